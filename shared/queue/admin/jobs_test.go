package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
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
	queuetest.Move(t, c, fresh, jobs.Change{To: queue.Failed, Message: "its manifest is corrupt"})
	_, err := a.Jobs.Requeue(ctx, fresh, queue.Downloading, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "it may be requeued to Pending, Estimating") ||
		strings.Contains(err.Error(), "Provisioning") {
		t.Fatalf("a job that never left Pending requeued to Downloading: %v, want a refusal naming Pending and Estimating", err)
	}
	if st, err := jobs.NewReader(c).JobStatus(ctx, fresh); err != nil || st.GetStatus() != queue.Failed {
		t.Fatalf("after the refusal the job is %v (%v), want Failed", st, err)
	}
	if _, err := a.Jobs.Requeue(ctx, fresh, queue.Estimating, ""); err != nil {
		t.Fatalf("requeue to Estimating: %v", err)
	}

	// Last successful Processing, but no store: Storing would find nothing to store.
	noStore := jids[1]
	for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Failed} {
		queuetest.Move(t, c, noStore, jobs.Change{To: s})
	}
	_, err = a.Jobs.Requeue(ctx, noStore, 0, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "it has no store, which Storing needs") ||
		!strings.HasSuffix(err.Error(), "it may be requeued to Pending, Estimating, Provisioning, Downloading, Processing") {
		t.Fatalf("requeue to Storing without a store: %v", err)
	}
	if _, err := a.Jobs.Requeue(ctx, noStore, queue.Processing, ""); err != nil {
		t.Fatalf("requeue to Processing: %v", err)
	}
}

// TestRequeueWaitsUntilTheBatchsJobsAreAllCreated: an operator requeues a
// failed job while its batch's jobs are still being created. The batcher
// learns which rows have jobs by listing the batch's folders one after the
// other; a job moving from batch-failed to batch-processing between two of
// those lists is missed and its row made a job again. The requeue is
// refused (FailedPrecondition) until spawning is over, and then goes through.
func TestRequeueWaitsUntilTheBatchsJobsAreAllCreated(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	bc, news := queuetest.SpawningBatch(t, c, 3)
	ids, err := bc.CreateJobs(ctx, news)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Jobs.Fail(ctx, ids[0], "bad row"); err != nil {
		t.Fatal(err)
	}
	_, err = a.Jobs.Requeue(ctx, ids[0], 0, "")
	if !errors.Is(err, queue.ErrWrongState) {
		t.Fatalf("requeue while the batch's jobs are being created: %v, want ErrWrongState", err)
	}
	if st, err := jobs.NewReader(c).JobStatus(ctx, ids[0]); err != nil || st.GetStatus() != queue.Failed {
		t.Fatalf("the refused requeue moved the job: %v, %v", st.GetStatus(), err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Jobs.Requeue(ctx, ids[0], 0, ""); err != nil {
		t.Fatalf("requeue once the batch's jobs are all created: %v", err)
	}
}
