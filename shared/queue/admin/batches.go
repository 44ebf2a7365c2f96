package admin

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
)

// Release is the admin action Held → Pending. The caller checks that the
// batch's collection is no longer held.
func (t *Batches) Release(ctx context.Context, bid string) (*v1.Batch, error) {
	bc, err := t.batches.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchPending, Message: "released by an operator"}); err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return bc.Batch, nil
}

// UpdateReport is the admin action Failed → UpdateReporting: troubleshooting
// is over, the batcher sends a second report. Every requeued job must have
// ended (none left in batch-processing), checked in the same operation. A
// batch that never had a job (its payload could not be used), or whose
// jobs have not moved since its last report, has nothing to report again:
// it is refused, saying so (UpdateReportBlocked).
func (t *Batches) UpdateReport(ctx context.Context, bid string) (*v1.Batch, error) {
	bc, err := t.batches.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	live, err := bc.LiveJobs(ctx)
	if err == nil && bc.State() == queue.BatchFailed {
		var n *v1.BatchJobCounts
		if n, err = t.batches.BatchCounts(ctx, bid); err == nil {
			n.Processing = live
			var why string
			if why, err = t.updateReportBlocker(ctx, bid, bc.Batch.GetStatus().GetMessage(), n); err == nil && why != "" {
				err = fmt.Errorf("%s: %w", why, queue.ErrWrongState)
			}
		}
	}
	if err == nil {
		err = bc.Commit(ctx, batches.BatchChange{To: queue.BatchUpdateReporting, Message: "update report requested by an operator", IfNoJobMoved: true})
	}
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return bc.Batch, nil
}

// UpdateReportBlocked says why UpdateReport would refuse failed batch b
// (as read, with its counts) now, and what to do first: "" when it would
// take it. A client offers the action only where it applies.
func (t *Batches) UpdateReportBlocked(ctx context.Context, b *v1.Batch) (string, error) {
	return t.updateReportBlocker(ctx, b.GetId(), b.GetStatus().GetMessage(), b.GetCounts())
}

// updateReportBlocker is why a failed batch with the job counts n (its
// message: the reason of a batch without jobs) cannot be update-reported.
func (t *Batches) updateReportBlocker(ctx context.Context, bid, message string, n *v1.BatchJobCounts) (string, error) {
	switch {
	case n.GetProcessing() > 0:
		return fmt.Sprintf("batch %s still has %d live job(s) (requeued, not ended): update-report once they have completed or failed",
			bid, n.GetProcessing()), nil
	case n.GetCompleted()+n.GetFailed()+n.GetDeleted() == 0:
		return fmt.Sprintf("batch %s has no job (%s): an update report would have nothing to report; submit a corrected payload as a new batch",
			bid, message), nil
	}
	moved, err := t.batches.JobsMovedSinceReport(ctx, bid)
	if err != nil || moved {
		return "", err
	}
	return fmt.Sprintf("batch %s has nothing new to report: none of its jobs completed, was requeued or deleted since its last report; "+
		"fix the cause of its failed jobs, requeue them, and update-report once they have ended", bid), nil
}

// Delete removes a held or failed batch with all its jobs. It refuses a
// failed batch that still has a live (requeued) job. It returns the deleted
// jobs so that the caller can remove their working directories.
func (t *Batches) Delete(ctx context.Context, bid string) ([]*v1.Job, error) {
	bc, err := t.batches.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	if s := bc.State(); s != queue.BatchHeld && s != queue.BatchFailed && s != queue.BatchDeleted {
		bc.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batch %s is %s, not Held or Failed: %w", bid, queue.BatchStateName(s), queue.ErrWrongState)
	}
	// The folders are listed one after another: a job requeued meanwhile
	// could be missed in both. Its move writes batch-processing, whose
	// version, read first, guards the commit to Deleted; once Deleted, no
	// job of the batch can be requeued (Jobs.Requeue checks the batch's
	// state in its own commit).
	if _, err := bc.LiveJobs(ctx); err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	refs, err := t.reader.BatchJobIDs(ctx, bid)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	if live := refs[queue.FolderProcessing]; len(live) > 0 {
		bc.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batch %s still has %d live job(s) (%s): %w", bid, len(live), strings.Join(first(live, 5), ", "), queue.ErrWrongState)
	}
	if bc.State() != queue.BatchDeleted {
		ch := batches.BatchChange{To: queue.BatchDeleted, Message: "deleted by an operator", KeepLock: true, IfNoJobMoved: true}
		if err := bc.Commit(ctx, ch); err != nil {
			bc.Release(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return bc.Remove(ctx)
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
