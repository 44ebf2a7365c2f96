package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
)

// Counts counts the jobs in every state from the state folders' node
// statistics: one small read per state, whatever the queue's size.
func (t *Jobs) Counts(ctx context.Context) (map[queue.JobState]int, error) { return t.jobCounts(ctx) }

func (t *base) jobCounts(ctx context.Context) (map[queue.JobState]int, error) {
	out := make(map[queue.JobState]int, len(queue.JobStates()))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for _, s := range queue.JobStates() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, st, err := t.z.Exists(ctx, t.p.StateDir(s))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && firstErr == nil:
				firstErr = fmt.Errorf("counting %s jobs: %w", queue.JobStateName(s), err)
			case ok:
				out[s] = int(st.NumChildren)
			}
		}()
	}
	wg.Wait()
	return out, firstErr
}

// BatchFilter selects batches for ListBatches.
type BatchFilter struct {
	Status    queue.BatchState // 0: any
	Submitter string           // "": any
	PageSize  int              // default 50, at most 500
	PageToken string
}

// List returns one page of batches, newest first, with their job
// counts. Filtering reads batches until the page is full, at most ten pages'
// worth per call; the token lets the caller continue.
func (t *Batches) List(ctx context.Context, f BatchFilter) ([]*v1.Batch, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 50
	}
	size = min(size, 500)
	bids, err := t.batches.ListBatchIDs(ctx)
	if err != nil {
		return nil, "", err
	}
	slices.Reverse(bids)
	start := 0
	if f.PageToken != "" {
		// Newest first: skip every bid >= the token.
		start = sort.Search(len(bids), func(i int) bool { return bids[i] < f.PageToken })
	}
	var out []*v1.Batch
	scanned := 0
	i := start
	for ; i < len(bids) && len(out) < size && scanned < 10*size; i++ {
		scanned++
		b, err := t.batches.GetBatch(ctx, bids[i])
		if errors.Is(err, queue.ErrNotFound) {
			continue
		}
		if errors.Is(err, queue.ErrCorrupt) {
			b = &v1.Batch{Id: bids[i], Status: &v1.BatchStatus{Message: err.Error()}}
		} else if err != nil {
			return nil, "", err
		}
		if f.Status != 0 && b.GetStatus().GetStatus() != f.Status {
			continue
		}
		if f.Submitter != "" && b.GetSubmission().GetSubmitter() != f.Submitter {
			continue
		}
		out = append(out, b)
	}
	next := ""
	if i < len(bids) {
		next = bids[i-1]
	}
	return out, next, nil
}
