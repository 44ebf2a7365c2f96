package admin

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestReleaseBatchReturnsAHeldBatchToPending: a batch held (its collection
// was on hold) goes back to Pending, saying who moved it; a batch that is
// not held is refused.
func TestReleaseBatchReturnsAHeldBatchToPending(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	bid, _ := queuetest.ClaimedBatch(t, c, batches.BatchChange{To: queue.BatchHeld, Message: "collection demo is held"})
	b, err := a.Batches.Release(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if b.GetStatus().GetStatus() != queue.BatchPending || b.GetStatus().GetMessage() != "released by an operator" {
		t.Errorf("released batch: %v", b.GetStatus())
	}
	if got, err := batches.New(c).GetBatch(ctx, bid); err != nil || got.GetStatus().GetStatus() != queue.BatchPending || got.GetLocked() {
		t.Errorf("the batch as read after its release: %v, locked %v (%v)", got.GetStatus(), got.GetLocked(), err)
	}
	var te *queue.TransitionError
	if _, err := a.Batches.Release(ctx, bid); !errors.As(err, &te) {
		t.Errorf("releasing a pending batch: %v, want a refused transition", err)
	}
}

// TestUpdateReportWaitsUntilTheRequeuedJobsHaveEnded: a failed batch whose
// failed job an operator requeued has a live job again; its second report
// waits until that job has completed or failed.
func TestUpdateReportWaitsUntilTheRequeuedJobsHaveEnded(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	bid, jids := spawn(t, c, 1, queue.DefaultPriority)
	queuetest.Move(t, c, jids[0], jobs.Change{To: queue.Failed, Message: "bad digest"})
	bc, err := batches.New(c).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true}, {To: queue.BatchFailed}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Jobs.Requeue(ctx, jids[0], 0, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Batches.UpdateReport(ctx, bid); !errors.Is(err, queue.ErrWrongState) {
		t.Fatalf("update-report with a requeued job still live: %v, want ErrWrongState", err)
	}
	if got, err := batches.New(c).GetBatch(ctx, bid); err != nil || got.GetStatus().GetStatus() != queue.BatchFailed || got.GetLocked() {
		t.Fatalf("after the refusal the batch is %v, locked %v (%v); want Failed, free", got.GetStatus(), got.GetLocked(), err)
	}
	queuetest.Move(t, c, jids[0], jobs.Change{To: queue.Failed, Message: "bad digest again"})
	b, err := a.Batches.UpdateReport(ctx, bid)
	if err != nil {
		t.Fatalf("update-report once the requeued job ended: %v", err)
	}
	if b.GetStatus().GetStatus() != queue.BatchUpdateReporting {
		t.Errorf("batch is %s, want UpdateReporting", queue.BatchStateName(b.GetStatus().GetStatus()))
	}
}

// TestUpdateReportOfABatchThatNeverHadAJobIsRefusedAndKeepsItsReason: a
// batch whose payload could not be used has no job; an update report would
// report nothing and, before, turned it Completed. It is refused, and the
// batch stays Failed with its reason.
func TestUpdateReportOfABatchThatNeverHadAJobIsRefusedAndKeepsItsReason(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	reason := "failed: the payload could not be used: fetching payload http://127.0.0.1:1/m.checkm: 404 Not Found"
	bid, bc := queuetest.ClaimedBatch(t, c, batches.BatchChange{To: queue.BatchProcessing})
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Message: reason}); err != nil {
		t.Fatal(err)
	}
	_, err := a.Batches.UpdateReport(ctx, bid)
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "has no job") || !strings.Contains(err.Error(), "404") {
		t.Fatalf("update-report of a batch without jobs: %v, want ErrWrongState naming why", err)
	}
	got, err := batches.New(c).GetBatch(ctx, bid)
	if err != nil || got.GetStatus().GetStatus() != queue.BatchFailed || got.GetStatus().GetMessage() != reason || got.GetLocked() {
		t.Fatalf("after the refusal the batch is %v, locked %v (%v); want Failed with its reason, free", got.GetStatus(), got.GetLocked(), err)
	}
}

// TestUpdateReportWithNothingNewIsRefusedSayingSo: a failed batch whose
// jobs have not moved since its report has nothing new for its
// depositor (the mail would say "0 more object(s) completed"): the update
// report is refused, saying so and what to do, and UpdateReportBlocked
// says the same beforehand. Once a failed job is requeued, even if it
// fails again with the same counts, there is something new.
func TestUpdateReportWithNothingNewIsRefusedSayingSo(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	bid, jids := spawn(t, c, 2, queue.DefaultPriority)
	queuetest.Move(t, c, jids[0], jobs.Change{To: queue.Failed, Message: "bad digest"})
	queuetest.Move(t, c, jids[1], jobs.Change{To: queue.Failed, Message: "bad digest"})
	bc, err := batches.New(c).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true},
		{To: queue.BatchFailed, Report: &v1.StatusReport{LastModified: queue.NowStamp(), FailedJobs: jids}}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	read := func() *v1.Batch {
		t.Helper()
		b, err := batches.New(c).GetBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if b.Counts, err = batches.New(c).BatchCounts(ctx, bid); err != nil {
			t.Fatal(err)
		}
		return b
	}
	const nothingNew = "has nothing new to report: none of its jobs completed, was requeued or deleted since its last report"
	if why, err := a.Batches.UpdateReportBlocked(ctx, read()); err != nil || !strings.Contains(why, nothingNew) {
		t.Errorf("UpdateReportBlocked right after the report: %q (%v)", why, err)
	}
	_, err = a.Batches.UpdateReport(ctx, bid)
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), nothingNew) || !strings.Contains(err.Error(), "requeue them") {
		t.Fatalf("update-report with nothing new: %v, want ErrWrongState saying so", err)
	}
	if got := read(); got.GetStatus().GetStatus() != queue.BatchFailed || got.GetLocked() {
		t.Fatalf("after the refusal the batch is %v, locked %v; want Failed, free", got.GetStatus(), got.GetLocked())
	}
	if _, err := a.Jobs.Requeue(ctx, jids[0], 0, ""); err != nil {
		t.Fatal(err)
	}
	queuetest.Move(t, c, jids[0], jobs.Change{To: queue.Failed, Message: "bad digest again"})
	if why, err := a.Batches.UpdateReportBlocked(ctx, read()); err != nil || why != "" {
		t.Errorf("UpdateReportBlocked after a requeue: %q (%v), want none", why, err)
	}
	if b, err := a.Batches.UpdateReport(ctx, bid); err != nil || b.GetStatus().GetStatus() != queue.BatchUpdateReporting {
		t.Fatalf("update-report after a requeue: %v (%v), want UpdateReporting", b.GetStatus(), err)
	}
}
