package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestRequeueRefusesAStatePastTheJobsProgress fails a job that never got
// past Pending, and one that failed in Storing without the store processing
// writes: neither may be requeued to a state whose step before it never
// ran; the refusal names the states it may take, and those work.
func TestRequeueRefusesAStatePastTheJobsProgress(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 2, queue.DefaultPriority)

	fresh := jids[0]
	queuetest.Move(t, c, fresh, queue.Change{To: queue.Failed, Message: "its manifest is corrupt"})
	_, err := a.RequeueJob(ctx, fresh, queue.Downloading, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "it may be requeued to Pending, Estimating") ||
		strings.Contains(err.Error(), "Provisioning") {
		t.Fatalf("a job that never left Pending requeued to Downloading: %v, want a refusal naming Pending and Estimating", err)
	}
	if st, err := c.JobStatus(ctx, fresh); err != nil || st.GetStatus() != queue.Failed {
		t.Fatalf("after the refusal the job is %v (%v), want Failed", st, err)
	}
	if _, err := a.RequeueJob(ctx, fresh, queue.Estimating, ""); err != nil {
		t.Fatalf("requeue to Estimating: %v", err)
	}

	// Last successful Processing, but no store: Storing would find nothing to store.
	noStore := jids[1]
	for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Failed} {
		queuetest.Move(t, c, noStore, queue.Change{To: s})
	}
	_, err = a.RequeueJob(ctx, noStore, 0, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "it has no store, which Storing needs") ||
		!strings.HasSuffix(err.Error(), "it may be requeued to Pending, Estimating, Provisioning, Downloading, Processing") {
		t.Fatalf("requeue to Storing without a store: %v", err)
	}
	if _, err := a.RequeueJob(ctx, noStore, queue.Processing, ""); err != nil {
		t.Fatalf("requeue to Processing: %v", err)
	}
}
