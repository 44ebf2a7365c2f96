package batches

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/retry"
)

// BatchWork is a batch that needs a batcher now.
type BatchWork struct {
	Bid    string
	Status queue.BatchState
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
			names, _, ev, err := c.z.WatchChildren(ctx, c.p.Batches())
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
				if !queue.ValidBatchID(bid) {
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
	folder := c.p.Batch(bid).Folder(queue.FolderProcessing)
	// onlyFolder: since the last full look, only the batch-processing
	// folder changed (a job ended) while the batch was Processing, unlocked
	// and fully spawned. Status and lock have watches of their own, so
	// looking at the folder alone is enough: one request per look instead
	// of five, and a look for the jobs that ended within folderSettle.
	var watchingFolder, onlyFolder bool
	for {
		var work *BatchWork
		var finished bool
		var err error
		if onlyFolder {
			work, err = c.examineFolder(ctx, bid, fw)
		} else {
			work, finished, watchingFolder, err = c.examineBatch(ctx, bid, fw)
		}
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
		onlyFolder = false
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case p := <-fw.fired:
			delete(fw.armed, p)
			onlyFolder = watchingFolder && err == nil && p == folder
			if onlyFolder && retry.Sleep(ctx, folderSettle) != nil {
				timer.Stop()
				return
			}
			onlyFolder = fw.drain(onlyFolder, folder)
		case <-timer.C:
		}
		timer.Stop()
	}
}

// folderSettle is how long the feed waits, after a job left a batch's
// batch-processing folder, before it looks at the folder again: the jobs
// that end meanwhile cost that one look, not one each. A batch's report
// starts at most this much later.
const folderSettle = 100 * time.Millisecond

// drain takes the watches that fired and are not taken yet; onlyFolder
// stays true only if the folder's was the only one.
func (fw *feedWatches) drain(onlyFolder bool, folder string) bool {
	for {
		select {
		case p := <-fw.fired:
			delete(fw.armed, p)
			onlyFolder = onlyFolder && p == folder
		default:
			return onlyFolder
		}
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
		return fw.c.z.Exists(ctx, path)
	}
	ok, st, ev, err := fw.c.z.WatchExists(ctx, path)
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
//
// watchingFolder is true when what decides the batch's next step is its
// batch-processing folder alone (Processing, unlocked, fully spawned).
func (c *Client) examineBatch(ctx context.Context, bid string, fw *feedWatches) (work *BatchWork, finished, watchingFolder bool, err error) {
	ok, _, err := fw.exists(ctx, c.p.Batch(bid).Status())
	if err != nil {
		return nil, false, false, err
	}
	if !ok {
		// Being created, or deleted: gone if the batch node is gone.
		exists, _, err := c.z.Exists(ctx, c.p.Batch(bid).Dir())
		return nil, err == nil && !exists, false, err
	}
	st, err := c.BatchStatus(ctx, bid)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, false, false, nil
	}
	if err != nil {
		return nil, false, false, err
	}
	state := st.GetStatus()
	switch state {
	case queue.BatchCompleted, queue.BatchDeleted:
		return nil, true, false, nil
	case queue.BatchHeld, queue.BatchFailed:
		return nil, false, false, nil // an operator's move comes through the status watch
	}
	locked, _, err := fw.exists(ctx, c.p.Batch(bid).Lock())
	if err != nil || locked {
		return nil, false, false, err
	}
	work = &BatchWork{Bid: bid, Status: state}
	switch state {
	case queue.BatchPending:
		taken, _, err := c.z.Exists(ctx, c.p.Batch(bid).States())
		if err != nil || taken {
			return nil, false, false, err // Pending with states: not the spec's pending
		}
		work.Spawning = true
	case queue.BatchProcessing:
		spawning, _, err := c.z.Exists(ctx, c.p.Batch(bid).Node(queue.NodeSpawning))
		if err != nil {
			return nil, false, false, err
		}
		if spawning {
			work.Spawning = true
			break
		}
		work, err = c.examineFolder(ctx, bid, fw)
		return work, false, err == nil, err
	}
	return work, false, false, nil
}

// examineFolder looks at a Processing batch's batch-processing folder: with
// no job left in it, the batch is Done.
func (c *Client) examineFolder(ctx context.Context, bid string, fw *feedWatches) (*BatchWork, error) {
	ok, st, err := fw.exists(ctx, c.p.Batch(bid).Folder(queue.FolderProcessing))
	if err != nil || (ok && st.NumChildren > 0) {
		return nil, err
	}
	return &BatchWork{Bid: bid, Status: queue.BatchProcessing, Done: true}, nil
}
