package admin

import (
	"context"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// ReleaseBatch is the admin action Held → Pending. The caller checks that
// the batch's collection is no longer held.
func (t *Tools) ReleaseBatch(ctx context.Context, bid string) (*v1.Batch, error) {
	return t.b.ReleaseBatch(ctx, bid)
}

// UpdateReport is the admin action Failed → UpdateReporting: troubleshooting
// is over, the batcher sends a second report. Every requeued job must have
// ended (none left in batch-processing), checked in the same operation.
func (t *Tools) UpdateReport(ctx context.Context, bid string) (*v1.Batch, error) {
	return t.b.UpdateReport(ctx, bid)
}

// DeleteBatch removes a held or failed batch with all its jobs. It refuses a
// failed batch that still has a live (requeued) job. It returns the deleted
// jobs so that the caller can remove their working directories.
func (t *Tools) DeleteBatch(ctx context.Context, bid string) ([]*v1.Job, error) {
	return t.b.DeleteBatch(ctx, bid)
}
