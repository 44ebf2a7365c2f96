package queue

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// TestRequeueRefusesAStatePastTheJobsProgress fails a job that never got
// past Pending, and one that failed in Storing without the store processing
// writes: neither may be requeued to a state whose step before it never
// ran; the refusal names the states it may take, and those work.
func TestRequeueRefusesAStatePastTheJobsProgress(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 2, DefaultPriority)

	fresh := jids[0]
	step(t, c, fresh, Change{To: Failed, Message: "its manifest is corrupt"})
	_, err := c.RequeueJob(ctx, fresh, Downloading, "")
	if !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "it may be requeued to Pending, Estimating") ||
		strings.Contains(err.Error(), "Provisioning") {
		t.Fatalf("a job that never left Pending requeued to Downloading: %v, want a refusal naming Pending and Estimating", err)
	}
	if st, err := c.JobStatus(ctx, fresh); err != nil || st.GetStatus() != Failed {
		t.Fatalf("after the refusal the job is %v (%v), want Failed", st, err)
	}
	if _, err := c.RequeueJob(ctx, fresh, Estimating, ""); err != nil {
		t.Fatalf("requeue to Estimating: %v", err)
	}

	// Last successful Processing, but no store: Storing would find nothing to store.
	noStore := jids[1]
	for _, s := range []JobState{Estimating, Provisioning, Downloading, Processing, Storing, Failed} {
		step(t, c, noStore, Change{To: s})
	}
	_, err = c.RequeueJob(ctx, noStore, 0, "")
	if !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "it has no store, which Storing needs") ||
		!strings.HasSuffix(err.Error(), "it may be requeued to Pending, Estimating, Provisioning, Downloading, Processing") {
		t.Fatalf("requeue to Storing without a store: %v", err)
	}
	if _, err := c.RequeueJob(ctx, noStore, Processing, ""); err != nil {
		t.Fatalf("requeue to Processing: %v", err)
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
