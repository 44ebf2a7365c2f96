package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Pause stops every consumer from taking new batches and jobs; work already
// taken finishes its step.
func (t *Queue) Pause(ctx context.Context) error {
	if err := t.z.Ensure(ctx, t.p.Locks().IngestPause()); err != nil {
		return fmt.Errorf("pausing the queue: %w", err)
	}
	return nil
}

// Unpause lets consumers take work again.
func (t *Queue) Unpause(ctx context.Context) error {
	err := t.z.Delete(ctx, t.p.Locks().IngestPause(), -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("unpausing the queue: %w", err)
	}
	return nil
}
