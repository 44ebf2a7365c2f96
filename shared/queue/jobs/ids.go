package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Identifier bookkeeping of ours, outside the spec's paths:
//   /counters/<name>            decimal text: the last number reserved (see
//                               nextNumber; each number goes to one job at most)
//   /local-ids/<owner>/<local>  the ARK a depositor's local id is bound to

// mintBlock is how many numbers a client reserves from a counter at a time:
// one counter write per mintBlock jobs, and at most mintBlock-1 numbers
// left unused when a client stops.
const mintBlock = 32

// counterBlock is a run of a counter's numbers reserved by this client.
type counterBlock struct {
	mu        sync.Mutex
	next, end int64 // next to hand out; the block is used up when next > end
}

// nextNumber hands out the next number of counter, reserving a new block
// when this client's is used up: the counter node holds the last number
// reserved, moved on by a write guarded by the version read.
func (c *Client) nextNumber(ctx context.Context, counter string) (int64, error) {
	cp := c.p.Own().Counter(queue.LockName(counter))
	v, _ := c.counters.LoadOrStore(cp, &counterBlock{})
	b := v.(*counterBlock)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next > 0 && b.next <= b.end {
		b.next++
		return b.next - 1, nil
	}
	if err := c.z.EnsureOnce(ctx, cp); err != nil {
		return 0, err
	}
	for attempt := 0; attempt < 100; attempt++ {
		data, stat, err := c.z.Get(ctx, cp)
		if errors.Is(err, zk.ErrNoNode) {
			// Removed since this client made sure of it.
			if err := c.z.Ensure(ctx, cp); err != nil {
				return 0, err
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("reading counter %s: %w", counter, err)
		}
		var last int64
		if len(data) > 0 {
			if last, err = queue.DecodeInt(cp, data); err != nil {
				return 0, err
			}
		}
		_, err = c.z.Set(ctx, cp, queue.EncodeInt(last+mintBlock), stat.Version)
		switch {
		case err == nil:
			b.next, b.end = last+2, last+mintBlock
			return last + 1, nil
		case errors.Is(err, zk.ErrBadVersion), session.Retryable(err):
			// Another client reserved first, or the answer was lost: a
			// block reserved without this client knowing is never used.
			continue
		default:
			return 0, fmt.Errorf("reserving numbers of counter %s: %w", counter, err)
		}
	}
	return 0, fmt.Errorf("counter %s too contended", counter)
}

// LookupLocalID returns the ARK an owner's local id is bound to (ErrNotFound if none).
func (c *Client) LookupLocalID(ctx context.Context, owner, localID string) (string, error) {
	if err := queue.ValidName("owner", owner); err != nil {
		return "", err
	}
	if err := queue.ValidName("local id", localID); err != nil {
		return "", err
	}
	data, _, err := c.z.Get(ctx, c.p.Own().Binding(owner, localID))
	if errors.Is(err, zk.ErrNoNode) {
		return "", fmt.Errorf("local id %s of %s: %w", localID, owner, queue.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("reading local id %s: %w", localID, err)
	}
	return string(data), nil
}

// BindLocalID binds an owner's local id to an ARK. If the local id is bound
// already it returns the ARK it is bound to, which may differ from ark: the
// caller decides what a mismatch means.
func (c *Client) BindLocalID(ctx context.Context, owner, localID, ark string) (string, error) {
	if err := queue.ValidName("owner", owner); err != nil {
		return "", err
	}
	if err := queue.ValidName("local id", localID); err != nil {
		return "", err
	}
	if ark == "" {
		return "", fmt.Errorf("%w: empty ARK", queue.ErrInvalid)
	}
	folder := c.p.Own().BindingOwner(owner)
	if err := c.z.EnsureOnce(ctx, folder); err != nil {
		return "", err
	}
	_, err := c.z.Create(ctx, c.p.Own().Binding(owner, localID), []byte(ark), 0)
	if errors.Is(err, zk.ErrNoNode) {
		// Removed since this client made sure of it.
		if err = c.z.Ensure(ctx, folder); err == nil {
			_, err = c.z.Create(ctx, c.p.Own().Binding(owner, localID), []byte(ark), 0)
		}
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return c.LookupLocalID(ctx, owner, localID)
	}
	if err != nil {
		return "", fmt.Errorf("binding local id %s: %w", localID, err)
	}
	return ark, nil
}
