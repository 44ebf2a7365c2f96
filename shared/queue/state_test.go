package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
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
	"Storing":      "Recording Failed",
	"Recording":    "Notify Failed",
	"Notify":       "Completed Failed",
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
			if got := nextLastSuccessful(tt.old, tt.lastSuccess, tt.to); got != tt.want {
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

// pathTo is how a test job reaches each state from Pending.
var pathTo = map[JobState][]JobState{
	Pending:      nil,
	Held:         {Held},
	Estimating:   {Estimating},
	Provisioning: {Estimating, Provisioning},
	Downloading:  {Estimating, Provisioning, Downloading},
	Processing:   {Estimating, Provisioning, Downloading, Processing},
	Storing:      {Estimating, Provisioning, Downloading, Processing, Storing},
	Recording:    {Estimating, Provisioning, Downloading, Processing, Storing, Recording},
	Notify:       {Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify},
	Completed:    {Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Completed},
	Failed:       {Failed},
}

// TestEveryJobTableRowAgainstZooKeeper tries every (from, to) pair on a real
// job: allowed moves commit, refused ones fail naming both states and leave
// the job untouched.
func TestEveryJobTableRowAgainstZooKeeper(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	froms := []JobState{Pending, Held, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Completed, Failed}
	_, jids := spawn(t, c, len(froms)*len(jobStates), DefaultPriority)
	i := 0
	for _, from := range froms {
		for _, to := range jobStates {
			jid := jids[i]
			i++
			t.Run(fmt.Sprintf("%s→%s", JobStateName(from), JobStateName(to)), func(t *testing.T) {
				for _, s := range pathTo[from] {
					step(t, c, jid, Change{To: s})
				}
				before := nodeData(t, c, c.p.jobStatus(jid))
				cl, err := c.ClaimJob(ctx, jid)
				if err != nil {
					t.Fatal(err)
				}
				err = cl.Commit(ctx, Change{To: to})
				if CanMoveJob(from, to) {
					if err != nil {
						t.Fatalf("allowed move refused: %v", err)
					}
					if got := jsonField(t, nodeData(t, c, c.p.jobStatus(jid)), "status"); got != `"`+JobStateName(to)+`"` {
						t.Errorf("status = %s", got)
					}
					return
				}
				var te *TransitionError
				if !errors.As(err, &te) || !errors.Is(err, ErrWrongState) {
					t.Fatalf("refused move: err = %v, want a TransitionError", err)
				}
				if !strings.Contains(err.Error(), JobStateName(from)) || !strings.Contains(err.Error(), JobStateName(to)) {
					t.Errorf("refusal %q does not name both states", err)
				}
				if err := cl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				after := nodeData(t, c, c.p.jobStatus(jid))
				if jsonField(t, after, "status") != jsonField(t, before, "status") {
					t.Errorf("a refused move changed the status: %s → %s", before, after)
				}
			})
		}
	}
}

func TestStoringJobLeftByAPeerIsReadAndMovable(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, 7)
	jid := jids[0]
	// A peer writes Storing the way the Merritt library does: status, then entries.
	status := `{"status":"Storing","last_modified":"2026-11-22 03:51:07 +0000","last_successful_status":"Processing","retry_count":0}`
	if _, err := c.conn.Set(c.p.jobStatus(jid), []byte(status), -1); err != nil {
		t.Fatal(err)
	}
	if err := c.conn.Delete(c.p.jobEntry(Pending, 7, jid), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Create(c.p.jobEntry(Storing, 7, jid), nil, 0, c.acl); err != nil {
		t.Fatal(err)
	}
	job, err := c.GetJob(ctx, jid)
	if err != nil {
		t.Fatalf("reading a Storing job: %v", err)
	}
	if job.GetStatus().GetStatus() != Storing {
		t.Fatalf("status %s", job.GetStatus().GetStatus())
	}
	if counts := jobCounts(t, c); counts[Storing] != 1 {
		t.Fatalf("counts %v", counts)
	}
	step(t, c, jid, Change{To: Recording})
	if got := jsonField(t, nodeData(t, c, c.p.jobStatus(jid)), "last_successful_status"); got != `"Storing"` {
		t.Errorf("last_successful_status = %s", got)
	}
}

// TestAProcessedJobGoesToRecordingOnlyThroughStoring: as in the peer
// library, a job leaves Processing for Storing; a commit straight to
// Recording is refused and leaves the job where it was.
func TestAProcessedJobGoesToRecordingOnlyThroughStoring(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, DefaultPriority)
	jid := jids[0]
	for _, s := range pathTo[Processing] {
		step(t, c, jid, Change{To: s})
	}
	cl, err := c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	var te *TransitionError
	if err := cl.Commit(ctx, Change{To: Recording}); !errors.As(err, &te) || te.From != "Processing" || te.To != "Recording" {
		t.Fatalf("Processing → Recording: err = %v, want a TransitionError naming both", err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := jsonField(t, nodeData(t, c, c.p.jobStatus(jid)), "status"); got != `"Processing"` {
		t.Fatalf("after the refusal the job is %s", got)
	}
	step(t, c, jid, Change{To: Storing})
	step(t, c, jid, Change{To: Recording})
	st := nodeData(t, c, c.p.jobStatus(jid))
	if got, last := jsonField(t, st, "status"), jsonField(t, st, "last_successful_status"); got != `"Recording"` || last != `"Storing"` {
		t.Errorf("status %s, last_successful_status %s; want Recording after Storing", got, last)
	}
}

// TestEveryBatchTableRowAgainstZooKeeper does the same for batches.
func TestEveryBatchTableRowAgainstZooKeeper(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	batchStates := []BatchState{BatchPending, BatchHeld, BatchProcessing, BatchReporting, BatchUpdateReporting, BatchCompleted, BatchFailed, BatchDeleted}
	reach := map[BatchState][]BatchState{
		BatchPending:         nil,
		BatchHeld:            {BatchHeld},
		BatchProcessing:      {BatchProcessing},
		BatchReporting:       {BatchProcessing, BatchReporting},
		BatchFailed:          {BatchProcessing, BatchFailed},
		BatchUpdateReporting: {BatchProcessing, BatchFailed, BatchUpdateReporting},
		BatchCompleted:       {BatchProcessing, BatchReporting, BatchCompleted},
	}
	for _, from := range []BatchState{BatchPending, BatchHeld, BatchProcessing, BatchReporting, BatchUpdateReporting, BatchCompleted, BatchFailed} {
		for _, to := range batchStates {
			t.Run(fmt.Sprintf("%s→%s", BatchStateName(from), BatchStateName(to)), func(t *testing.T) {
				bid, err := c.CreateBatch(ctx, sampleSubmission())
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range reach[from] {
					bc, err := c.ClaimBatch(ctx, bid)
					if err != nil {
						t.Fatal(err)
					}
					if err := bc.Commit(ctx, BatchChange{To: s}); err != nil {
						t.Fatal(err)
					}
					if s == BatchProcessing {
						if err := bc.FinishSpawning(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				bc, err := c.ClaimBatch(ctx, bid)
				if err != nil {
					t.Fatal(err)
				}
				defer bc.Release(context.WithoutCancel(ctx))
				err = bc.Commit(ctx, BatchChange{To: to})
				if CanMoveBatch(from, to) {
					if err != nil {
						t.Fatalf("allowed move refused: %v", err)
					}
					return
				}
				if !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), BatchStateName(from)) || !strings.Contains(err.Error(), BatchStateName(to)) {
					t.Fatalf("refused move: err = %v, want a refusal naming both states", err)
				}
			})
		}
	}
}
