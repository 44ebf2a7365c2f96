package queue

import (
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// The spec's tables, written out again as the spec spells them, so that a
// change to the state machine that disagrees with the contract fails here.
var specJobTable = map[string]string{
	"Pending":      "Estimating Held Failed",
	"Held":         "Pending Deleted",
	"Estimating":   "Provisioning Failed", // Failed: ingestq's addition for unreadable job data
	"Provisioning": "Downloading Provisioning Failed",
	"Downloading":  "Processing Failed",
	"Processing":   "Storing Failed",
	"Storing":      "Recording Storing Failed", // Storing: ingestq's addition, while the store is unavailable
	"Recording":    "Notify Failed",
	"Notify":       "Completed Notify Failed",
	"Failed":       "Pending Estimating Provisioning Downloading Processing Storing Recording Notify Deleted",
	"Completed":    "",
	"Deleted":      "",
}

var specBatchTable = map[string]string{
	"Pending":         "Processing Held",
	"Held":            "Pending Deleted",
	"Processing":      "Reporting Failed",
	"Reporting":       "Completed Failed",
	"Failed":          "UpdateReporting Deleted",
	"UpdateReporting": "Completed Failed",
	"Completed":       "",
	"Deleted":         "",
}

func TestStateMachineMatchesTheSpecTables(t *testing.T) {
	for _, from := range jobStates {
		allowed := strings.Fields(specJobTable[JobStateName(from)])
		for _, to := range jobStates {
			want := false
			for _, a := range allowed {
				want = want || a == JobStateName(to)
			}
			if got := CanMoveJob(from, to); got != want {
				t.Errorf("job %s → %s: allowed=%v, spec says %v", JobStateName(from), JobStateName(to), got, want)
			}
		}
	}
	batchStates := []BatchState{BatchPending, BatchHeld, BatchProcessing, BatchReporting, BatchUpdateReporting, BatchCompleted, BatchFailed, BatchDeleted}
	for _, from := range batchStates {
		allowed := strings.Fields(specBatchTable[BatchStateName(from)])
		for _, to := range batchStates {
			want := false
			for _, a := range allowed {
				want = want || a == BatchStateName(to)
			}
			if got := CanMoveBatch(from, to); got != want {
				t.Errorf("batch %s → %s: allowed=%v, spec says %v", BatchStateName(from), BatchStateName(to), got, want)
			}
		}
	}
}

func TestLastSuccessfulStatusFollowsTheSpecRule(t *testing.T) {
	tests := []struct {
		name                 string
		old, lastSuccess, to JobState
		want                 JobState
	}{
		{"a step records the state it leaves", Estimating, Pending, Provisioning, Estimating},
		{"failing keeps the prior value", Downloading, Provisioning, Failed, Provisioning},
		{"deleting keeps the prior value", Held, Pending, Deleted, Pending},
		{"leaving Failed keeps the prior value", Failed, Provisioning, Downloading, Provisioning},
		{"staying in a state changes nothing", Provisioning, Estimating, Provisioning, Estimating},
		{"first step from Pending", Pending, 0, Estimating, Pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NextLastSuccessful(tt.old, tt.lastSuccess, tt.to); got != tt.want {
				t.Errorf("got %s, want %s", JobStateName(got), JobStateName(tt.want))
			}
		})
	}
}

func TestResumeStartsAfterLastSuccessfulStatus(t *testing.T) {
	for last, want := range map[JobState]JobState{
		0: Estimating, Pending: Estimating, Held: Estimating, Estimating: Provisioning,
		Provisioning: Downloading, Downloading: Processing, Processing: Storing,
		Storing: Recording, Recording: Notify,
	} {
		if got := ResumeState(last); got != want {
			t.Errorf("ResumeState(%s) = %s, want %s", JobStateName(last), JobStateName(got), JobStateName(want))
		}
	}
}

func TestRequeueStatesFollowLastSuccessfulAndNodes(t *testing.T) {
	names := func(ss []JobState) string {
		var out []string
		for _, s := range ss {
			out = append(out, JobStateName(s))
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		last       JobState
		store, inv bool
		want       string
	}{
		{v1.JobState_JOB_STATE_UNSPECIFIED, false, false, "Pending Estimating"},
		{Estimating, false, false, "Pending Estimating Provisioning"},
		{Processing, true, false, "Pending Estimating Provisioning Downloading Processing Storing"},
		{Recording, true, true, "Pending Estimating Provisioning Downloading Processing Storing Recording Notify"},
		{Recording, true, false, "Pending Estimating Provisioning Downloading Processing Storing"},
	} {
		if got := names(RequeueStates(tt.last, tt.store, tt.inv)); got != tt.want {
			t.Errorf("last %s, store %v, inventory %v: %q, want %q", JobStateName(tt.last), tt.store, tt.inv, got, tt.want)
		}
	}
}

// TestReachedBeforeTakesAJobBackToWhereItsEvidenceShowsItWas: a job found
// only in a state's folder resumes at that state (the one after its last
// successful state), but for Recording, which resumes at Storing: that its
// object was stored whole is not known. The ended states say nothing.
func TestReachedBeforeTakesAJobBackToWhereItsEvidenceShowsItWas(t *testing.T) {
	for _, tt := range []struct {
		found, last JobState
		ok          bool
	}{
		{Pending, v1.JobState_JOB_STATE_UNSPECIFIED, true},
		{Held, v1.JobState_JOB_STATE_UNSPECIFIED, true},
		{Estimating, Pending, true},
		{Provisioning, Estimating, true},
		{Downloading, Provisioning, true},
		{Processing, Downloading, true},
		{Storing, Processing, true},
		{Recording, Processing, true},
		{Notify, Recording, true},
		{Completed, v1.JobState_JOB_STATE_UNSPECIFIED, false},
		{Failed, v1.JobState_JOB_STATE_UNSPECIFIED, false},
		{Deleted, v1.JobState_JOB_STATE_UNSPECIFIED, false},
	} {
		last, ok := ReachedBefore(tt.found)
		if last != tt.last || ok != tt.ok {
			t.Errorf("ReachedBefore(%s) = %s, %v; want %s, %v", JobStateName(tt.found), JobStateName(last), ok, JobStateName(tt.last), tt.ok)
		}
	}
}

// TestStageStatesAreThePipelineAStageTakesFrom: every state a stage takes
// jobs from, in order, and the states jobs wait in besides.
func TestStageStatesAreThePipelineAStageTakesFrom(t *testing.T) {
	names := func(ss []JobState) string {
		var out []string
		for _, s := range ss {
			out = append(out, JobStateName(s))
		}
		return strings.Join(out, " ")
	}
	if got, want := names(StageStates()), "Pending Estimating Provisioning Downloading Processing Storing Recording Notify"; got != want {
		t.Errorf("StageStates: %s, want %s", got, want)
	}
	if got, want := names(WaitingStates()), "Pending Held Estimating Provisioning Downloading Processing Storing Recording Notify Failed"; got != want {
		t.Errorf("WaitingStates: %s, want %s", got, want)
	}
}
