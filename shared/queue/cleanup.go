package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// CleanupResult says what CleanupBatches removed.
type CleanupResult struct {
	Batches []string
	Jobs    []*v1.Job // removed jobs, for their working directories
}

// CleanupBatches removes completed batches whose status is older than
// retention: every job of the batch (nodes and state entries) and the batch
// itself. A batch someone holds is skipped until the next run. It removes at
// most limit batches per call (0: no limit).
func (c *Client) CleanupBatches(ctx context.Context, retention time.Duration, limit int) (CleanupResult, error) {
	var res CleanupResult
	bids, err := c.ListBatchIDs(ctx)
	if err != nil {
		return res, err
	}
	cutoff := time.Now().Add(-retention)
	for _, bid := range bids {
		if limit > 0 && len(res.Batches) >= limit {
			break
		}
		st, err := c.batchStatus(ctx, bid)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
			continue
		}
		if err != nil {
			return res, err
		}
		if st.GetStatus() != BatchCompleted || st.GetLastModified() == nil || st.GetLastModified().AsTime().After(cutoff) {
			continue
		}
		jobs, err := c.removeBatch(ctx, bid)
		if errors.Is(err, ErrLocked) || errors.Is(err, ErrWrongState) {
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

// removeBatch deletes a completed batch and its jobs under the batch's lock.
func (c *Client) removeBatch(ctx context.Context, bid string) ([]*v1.Job, error) {
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	if bc.from != BatchCompleted {
		bc.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batch %s is %s: %w", bid, BatchStateName(bc.from), ErrWrongState)
	}
	refs, err := c.BatchJobIDs(ctx, bid)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return c.removeClaimedBatch(ctx, bc, refs)
}
