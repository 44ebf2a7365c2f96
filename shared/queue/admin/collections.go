package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
)

func validMnemonic(m string) error {
	if m == "" || len(m) > 200 || m == "." || m == ".." {
		return fmt.Errorf("%w: collection %q must be 1..200 characters", queue.ErrInvalid, m)
	}
	if !utf8.ValidString(m) {
		return fmt.Errorf("%w: collection %q is not valid UTF-8", queue.ErrInvalid, m)
	}
	for _, r := range m {
		if r == '/' || v1.ZooKeeperRefuses(r) {
			return fmt.Errorf("%w: collection %q must not contain '/' or a character ZooKeeper refuses in a node name (%U)", queue.ErrInvalid, m, r)
		}
	}
	return nil
}

// HoldCollection puts a collection on hold: its pending batches and pending
// jobs go to Held when a consumer meets them.
func (t *Queue) HoldCollection(ctx context.Context, mnemonic string) error {
	if err := validMnemonic(mnemonic); err != nil {
		return err
	}
	if err := t.z.Ensure(ctx, t.p.Locks().CollectionHold(mnemonic)); err != nil {
		return fmt.Errorf("holding collection %s: %w", mnemonic, err)
	}
	return nil
}

// ReleaseCollection lifts a collection's hold. (Returning its held batches
// and jobs to Pending is a separate, admin-visible step.)
func (t *Queue) ReleaseCollection(ctx context.Context, mnemonic string) error {
	if err := validMnemonic(mnemonic); err != nil {
		return err
	}
	err := t.z.Delete(ctx, t.p.Locks().CollectionHold(mnemonic), -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("releasing collection %s: %w", mnemonic, err)
	}
	return nil
}

// HeldCollections lists the collections on hold, read from ZooKeeper.
func (t *Queue) HeldCollections(ctx context.Context) ([]string, error) {
	names, _, err := t.z.Children(ctx, t.p.Locks().Collections())
	if err != nil {
		return nil, fmt.Errorf("listing collection holds: %w", err)
	}
	slices.Sort(names)
	return names, nil
}
