package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
)

// Figures is what the queue holds at one moment, for its metrics: one
// process (the batcher) reads them, so that a sum over processes counts
// each job once.
type Figures struct {
	// Jobs is how many jobs each state holds.
	Jobs map[queue.JobState]int
	// Oldest is when the job waiting longest in each state entered it (its
	// state entry's creation), for the states a job waits in; a state
	// without jobs is left out. Completed and Deleted are not: their
	// oldest job is simply the first one.
	Oldest map[queue.JobState]time.Time
	// Batches is how many batches each state holds.
	Batches map[queue.BatchState]int
	// Workers is how many live stage replicas take jobs from each state
	// (their /workers entries), every stage state present, 0 included.
	Workers map[queue.JobState]int
}

// FigureReader reads Figures, remembering when each job entered its state
// so that a read after the first asks ZooKeeper only about the entries
// that are new: a few requests, whatever the queue's size.
type FigureReader struct {
	t  *Queue
	mu sync.Mutex
	// entered: state → entry name → the entry's creation time.
	entered map[queue.JobState]map[string]time.Time
}

// NewFigureReader returns a FigureReader of t's queue.
func (t *Queue) NewFigureReader() *FigureReader {
	return &FigureReader{t: t, entered: map[queue.JobState]map[string]time.Time{}}
}

// Read reads the figures.
func (r *FigureReader) Read(ctx context.Context) (*Figures, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &Figures{Oldest: map[queue.JobState]time.Time{}, Batches: map[queue.BatchState]int{}, Workers: map[queue.JobState]int{}}
	var err error
	if f.Jobs, err = r.t.jobCounts(ctx); err != nil {
		return nil, err
	}
	for _, s := range queue.WaitingStates() {
		oldest, err := r.oldest(ctx, s)
		if err != nil {
			return nil, err
		}
		if !oldest.IsZero() {
			f.Oldest[s] = oldest
		}
	}
	bids, err := r.t.batches.ListBatchIDs(ctx)
	if err != nil {
		return nil, err
	}
	ps := make([]string, len(bids))
	for i, bid := range bids {
		ps[i] = r.t.p.Batch(bid).Status()
	}
	datas, err := r.t.z.ReadData(ctx, ps)
	if err != nil {
		return nil, fmt.Errorf("reading the batches' states: %w", err)
	}
	for i, d := range datas {
		if d == nil {
			continue // being created or deleted
		}
		if st, err := queue.DecodeBatchStatus(ps[i], d); err == nil {
			f.Batches[st.GetStatus()]++
		}
	}
	for _, s := range queue.StageStates() {
		f.Workers[s] = 0
	}
	workers, err := r.t.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		if s, err := queue.ParseJobState(w.GetStage()); err == nil {
			f.Workers[s]++
		}
	}
	return f, nil
}

// oldest is when the job longest in state s entered it (zero: none).
func (r *FigureReader) oldest(ctx context.Context, s queue.JobState) (time.Time, error) {
	names, _, err := r.t.z.Children(ctx, r.t.p.StateDir(s))
	if errors.Is(err, zk.ErrNoNode) {
		names, err = nil, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("listing %s jobs: %w", queue.JobStateName(s), err)
	}
	known := r.entered[s]
	next := make(map[string]time.Time, len(names))
	var fresh, paths []string
	for _, n := range names {
		if t, ok := known[n]; ok {
			next[n] = t
		} else if strings.Contains(n, "-") {
			fresh = append(fresh, n)
			paths = append(paths, r.t.p.StateDir(s)+"/"+n)
		}
	}
	if len(paths) > 0 {
		read, err := r.t.z.Read(ctx, paths)
		if err != nil {
			return time.Time{}, fmt.Errorf("reading %s entries: %w", queue.JobStateName(s), err)
		}
		for i, d := range read {
			if d.Stat != nil {
				next[fresh[i]] = time.UnixMilli(d.Stat.Ctime)
			}
		}
	}
	r.entered[s] = next
	var oldest time.Time
	for _, t := range next {
		if oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, nil
}
