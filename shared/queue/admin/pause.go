package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Pause stops every consumer from taking new batches and jobs; work already
// taken finishes its step.
func (t *Tools) Pause(ctx context.Context) error {
	if err := t.b.Ensure(ctx, t.b.Paths.IngestPause()); err != nil {
		return fmt.Errorf("pausing the queue: %w", err)
	}
	return nil
}

// Unpause lets consumers take work again.
func (t *Tools) Unpause(ctx context.Context) error {
	err := t.b.Delete(ctx, t.b.Paths.IngestPause(), -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("unpausing the queue: %w", err)
	}
	return nil
}
