package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// BatchWork is a batch that needs a batcher now.
type BatchWork struct {
	Bid    string
	Status BatchState
	// Spawning: a Processing batch whose jobs are still being created, left
	// by a batcher that died (Status Processing) or not started (Pending).
	Spawning bool
	// Done: a Processing batch with no live job left, ready for Reporting.
	Done bool
}

// WatchBatches reports, on the returned channel, every batch that a batcher
// should act on: pending batches, half-spawned ones, processing batches whose
// last job ended, and batches waiting in Reporting or UpdateReporting. It
// follows each open batch with watches (its status, its lock and its
// batch-processing folder, which every job leaving it touches), so a batch is
// looked at when something about it changes, never by scanning all batches.
// A batch may be reported more than once; claiming it settles who acts.
// The channel closes when ctx ends.
func (c *Client) WatchBatches(ctx context.Context) <-chan BatchWork {
	out := make(chan BatchWork, 64)
	go func() {
		defer close(out)
		var wg sync.WaitGroup
		defer wg.Wait()
		tracked := map[string]bool{}
		var mu sync.Mutex
		for {
			names, _, ev, err := c.childrenW(ctx, c.p.batches())
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(200 * time.Millisecond):
					continue
				}
			}
			for _, bid := range names {
				if !ValidBatchID(bid) {
					continue
				}
				mu.Lock()
				seen := tracked[bid]
				tracked[bid] = true
				mu.Unlock()
				if seen {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.followBatch(ctx, bid, out)
					mu.Lock()
					delete(tracked, bid)
					mu.Unlock()
				}()
			}
			select {
			case <-ctx.Done():
				return
			case <-ev:
			}
		}
	}()
	return out
}

// batchRecheck re-examines a batch now and then even without an event, in
// case a batcher was told about it but did not act (it was stopping).
const batchRecheck = 30 * time.Second

// followBatch watches one batch until it is finished or deleted. Each path
// has at most one watch armed at a time: a watch is re-armed only after it
// fired, so a long batch does not pile up watches.
func (c *Client) followBatch(ctx context.Context, bid string, out chan<- BatchWork) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fw := &feedWatches{c: c, armed: map[string]bool{}, fired: make(chan string, 8)}
	for {
		work, finished, err := c.examineBatch(ctx, bid, fw)
		if finished || ctx.Err() != nil {
			return
		}
		if err == nil && work != nil {
			select {
			case out <- *work:
			case <-ctx.Done():
				return
			}
		}
		wait := batchRecheck
		if err != nil {
			wait = time.Second
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case p := <-fw.fired:
			delete(fw.armed, p)
		drain:
			for {
				select {
				case p := <-fw.fired:
					delete(fw.armed, p)
				default:
					break drain
				}
			}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// feedWatches are the watches one batch follower has armed.
type feedWatches struct {
	c     *Client
	armed map[string]bool
	fired chan string
}

// exists reads a node's existence, arming a watch on it unless one is armed.
func (fw *feedWatches) exists(ctx context.Context, path string) (bool, *zk.Stat, error) {
	if fw.armed[path] {
		return fw.c.exists(ctx, path)
	}
	ok, st, ev, err := fw.c.existsW(ctx, path)
	if err != nil {
		return false, nil, err
	}
	fw.armed[path] = true
	go func() {
		select {
		case <-ev:
			select {
			case fw.fired <- path:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	return ok, st, nil
}

// examineBatch reads what a batcher needs to know about a batch, arming the
// watches that tell when that changes.
func (c *Client) examineBatch(ctx context.Context, bid string, fw *feedWatches) (*BatchWork, bool, error) {
	ok, _, err := fw.exists(ctx, c.p.batchStatus(bid))
	if err != nil {
		return nil, false, err
	}
	if !ok {
		// Being created, or deleted: gone if the batch node is gone.
		exists, _, err := c.exists(ctx, c.p.batch(bid))
		return nil, err == nil && !exists, err
	}
	st, err := c.batchStatus(ctx, bid)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	state := st.GetStatus()
	switch state {
	case BatchCompleted, BatchDeleted:
		return nil, true, nil
	case BatchHeld, BatchFailed:
		return nil, false, nil // an operator's move comes through the status watch
	}
	locked, _, err := fw.exists(ctx, c.p.batchLock(bid))
	if err != nil || locked {
		return nil, false, err
	}
	work := &BatchWork{Bid: bid, Status: state}
	switch state {
	case BatchPending:
		taken, _, err := c.exists(ctx, c.p.batchStates(bid))
		if err != nil || taken {
			return nil, false, err // Pending with states: not the spec's pending
		}
		work.Spawning = true
	case BatchProcessing:
		spawning, _, err := c.exists(ctx, c.p.batchSpawning(bid))
		if err != nil {
			return nil, false, err
		}
		if spawning {
			work.Spawning = true
			break
		}
		ok, st, err := fw.exists(ctx, c.p.batchFolder(bid, folderProcessing))
		if err != nil || (ok && st.NumChildren > 0) {
			return nil, false, err
		}
		work.Done = true
	}
	return work, false, nil
}
