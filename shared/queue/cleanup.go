package queue

import (
	"context"
	"fmt"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

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
