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

// CleanupBatches removes completed batches whose status is older than
// retention: every job of the batch (nodes and state entries) and the batch
// itself. A batch someone holds is skipped until the next run. It removes at
// most limit batches per call (0: no limit).
func (t *Tools) CleanupBatches(ctx context.Context, retention time.Duration, limit int) (CleanupResult, error) {
	var res CleanupResult
	bids, err := t.b.ListBatchIDs(ctx)
	if err != nil {
		return res, err
	}
	cutoff := time.Now().Add(-retention)
	for _, bid := range bids {
		if limit > 0 && len(res.Batches) >= limit {
			break
		}
		st, err := t.b.BatchStatus(ctx, bid)
		if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrCorrupt) {
			continue
		}
		if err != nil {
			return res, err
		}
		if st.GetStatus() != queue.BatchCompleted || st.GetLastModified() == nil || st.GetLastModified().AsTime().After(cutoff) {
			continue
		}
		jobs, err := t.b.RemoveBatch(ctx, bid)
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
