package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
)

// CleanupResult says what CleanupBatches removed.
type CleanupResult struct {
	Batches []string
	Jobs    []*v1.Job // removed jobs, for their working directories
}

// Cleanup removes completed batches whose status is older than
// retention: every job of the batch (nodes and state entries) and the batch
// itself. A batch someone holds is skipped until the next run. It removes at
// most limit batches per call (0: no limit).
func (t *Batches) Cleanup(ctx context.Context, retention time.Duration, limit int) (CleanupResult, error) {
	var res CleanupResult
	bids, err := t.batches.ListBatchIDs(ctx)
	if err != nil {
		return res, err
	}
	cutoff := time.Now().Add(-retention)
	for _, bid := range bids {
		if limit > 0 && len(res.Batches) >= limit {
			break
		}
		st, err := t.batches.BatchStatus(ctx, bid)
		if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrCorrupt) {
			continue
		}
		if err != nil {
			return res, err
		}
		if st.GetStatus() != queue.BatchCompleted || st.GetLastModified() == nil || st.GetLastModified().AsTime().After(cutoff) {
			continue
		}
		jobs, err := t.removeCompleted(ctx, bid)
		if errors.Is(err, queue.ErrLocked) || errors.Is(err, queue.ErrWrongState) {
			continue
		}
		if err != nil {
			return res, fmt.Errorf("cleaning up batch %s: %w", bid, err)
		}
		res.Batches = append(res.Batches, bid)
		res.Jobs = append(res.Jobs, jobs...)
	}
	return res, nil
}

// removeCompleted removes a completed batch and its jobs under the batch's
// lock.
func (t *Batches) removeCompleted(ctx context.Context, bid string) ([]*v1.Job, error) {
	bc, err := t.batches.ClaimBatch(ctx, bid, queue.BatchCompleted)
	if err != nil {
		return nil, err
	}
	return bc.Remove(ctx)
}
