package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Figures is what the queue holds at one moment, for its metrics: one
// process (the batcher) reads them, so that a sum over processes counts
// each job once.
type Figures struct {
	// Jobs is how many jobs each state holds.
	Jobs map[JobState]int
	// Oldest is when the job waiting longest in each state entered it (its
	// state entry's creation), for the states a job waits in; a state
	// without jobs is left out. Completed and Deleted are not: their
	// oldest job is simply the first one.
	Oldest map[JobState]time.Time
	// Batches is how many batches each state holds.
	Batches map[BatchState]int
	// Workers is how many live stage replicas take jobs from each state
	// (their /workers entries), every stage state present, 0 included.
	Workers map[JobState]int
}

// FigureReader reads Figures, remembering when each job entered its state
// so that a read after the first asks ZooKeeper only about the entries
// that are new: a few requests, whatever the queue's size.
type FigureReader struct {
	c  *Client
	mu sync.Mutex
	// entered: state → entry name → the entry's creation time.
	entered map[JobState]map[string]time.Time
}

// NewFigureReader returns a FigureReader on c.
func (c *Client) NewFigureReader() *FigureReader {
	return &FigureReader{c: c, entered: map[JobState]map[string]time.Time{}}
}

// agedStates are the states whose oldest job's age is worth watching.
var agedStates = []JobState{Pending, Held, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Failed}

// stageStates are the states a stage takes jobs from.
var stageStates = []JobState{Pending, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify}

// Read reads the figures.
func (r *FigureReader) Read(ctx context.Context) (*Figures, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.c
	f := &Figures{Oldest: map[JobState]time.Time{}, Batches: map[BatchState]int{}, Workers: map[JobState]int{}}
	var err error
	if f.Jobs, err = c.JobCounts(ctx); err != nil {
		return nil, err
	}
	for _, s := range agedStates {
		oldest, err := r.oldest(ctx, s)
		if err != nil {
			return nil, err
		}
		if !oldest.IsZero() {
			f.Oldest[s] = oldest
		}
	}
	bids, err := c.ListBatchIDs(ctx)
	if err != nil {
		return nil, err
	}
	ps := make([]string, len(bids))
	for i, bid := range bids {
		ps[i] = c.p.batchStatus(bid)
	}
	datas, err := c.getMany(ctx, ps)
	if err != nil {
		return nil, fmt.Errorf("reading the batches' states: %w", err)
	}
	for i, d := range datas {
		if d == nil {
			continue // being created or deleted
		}
		if st, err := decodeBatchStatus(ps[i], d); err == nil {
			f.Batches[st.GetStatus()]++
		}
	}
	for _, s := range stageStates {
		f.Workers[s] = 0
	}
	workers, err := c.ListWorkers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		if s, err := ParseJobState(w.GetStage()); err == nil {
			f.Workers[s]++
		}
	}
	return f, nil
}

// oldest is when the job longest in state s entered it (zero: none).
func (r *FigureReader) oldest(ctx context.Context, s JobState) (time.Time, error) {
	c := r.c
	names, _, err := c.children(ctx, c.p.jobStateDir(s))
	if errors.Is(err, zk.ErrNoNode) {
		names, err = nil, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("listing %s jobs: %w", JobStateName(s), err)
	}
	known := r.entered[s]
	next := make(map[string]time.Time, len(names))
	var fresh, paths []string
	for _, n := range names {
		if t, ok := known[n]; ok {
			next[n] = t
		} else if strings.Contains(n, "-") {
			fresh = append(fresh, n)
			paths = append(paths, c.p.jobStateDir(s)+"/"+n)
		}
	}
	if len(paths) > 0 {
		read, err := c.getManyStat(ctx, paths)
		if err != nil {
			return time.Time{}, fmt.Errorf("reading %s entries: %w", JobStateName(s), err)
		}
		for i, d := range read {
			if d.stat != nil {
				next[fresh[i]] = time.UnixMilli(d.stat.Ctime)
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

// BatchStates lists the batch states in lifecycle order.
func BatchStates() []BatchState { return append([]BatchState(nil), batchStates...) }

var batchStates = []BatchState{BatchPending, BatchHeld, BatchProcessing, BatchReporting, BatchFailed, BatchUpdateReporting,
	BatchCompleted, BatchDeleted}
