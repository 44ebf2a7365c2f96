// Package stagetest has an in-memory stage.Job, so that what a handler
// decides is tested without ZooKeeper. How the queue reads, writes and
// commits the job is the queue's to test (queuetest).
package stagetest

import (
	"context"
	"sync"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
)

// Job is a claimed job held in memory. Its reads return its field Job;
// its writes change it and are recorded in Updates.
type Job struct {
	// Job is the job's data, as a stage's consumer would have read it.
	Job *v1.Job
	// From is the state the job was claimed in.
	From queue.JobState
	// Err, when set, is what every read and write returns (a lost job,
	// a node another writer broke).
	Err error
	// Counters, when set, are the counters MintFromCounter steps, shared
	// with other claims as the queue's are by its jobs; nil: the claim's
	// own.
	Counters *Counters

	mu      sync.Mutex
	updates []jobs.Change
	own     Counters
}

// Counters are named counters held in memory, each starting at 1; claims
// given the same Counters mint from the same counters.
type Counters struct {
	mu sync.Mutex
	n  map[string]int64
}

// next steps counter and returns its new value.
func (cs *Counters) next(counter string) int64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.n == nil {
		cs.n = map[string]int64{}
	}
	cs.n[counter]++
	return cs.n[counter]
}

var _ stage.Job = (*Job)(nil)

// New returns job, claimed in state from.
func New(job *v1.Job, from queue.JobState) *Job {
	return &Job{Job: job, From: from}
}

// ID implements stage.Job.
func (j *Job) ID() string { return j.Job.GetId() }

// State implements stage.Job.
func (j *Job) State() queue.JobState { return j.From }

// Data implements stage.Job.
func (j *Job) Data() *v1.Job { return j.Job }

// Load implements stage.Job: everything is in Job already.
func (j *Job) Load(context.Context, queue.Parts) error { return j.Err }

// LoadManifest implements stage.Job.
func (j *Job) LoadManifest(context.Context) (*v1.Manifest, error) {
	if j.Err != nil {
		return nil, j.Err
	}
	return j.Job.GetManifest(), nil
}

// WorkingDir implements stage.Job, as the queue places it.
func (j *Job) WorkingDir(_ context.Context, workRoot string) (string, error) {
	if j.Err != nil {
		return "", j.Err
	}
	return queue.JobWorkingDir(workRoot, j.Job), nil
}

// Update implements stage.Job: ch's data is written to Job.
func (j *Job) Update(_ context.Context, ch jobs.Change) error {
	if j.Err != nil {
		return j.Err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.updates = append(j.updates, ch)
	data := j.Job
	if ch.Priority != nil {
		data.Priority = *ch.Priority
	}
	if ch.SpaceNeeded != nil {
		data.SpaceNeeded = *ch.SpaceNeeded
	}
	if ch.Identifiers != nil {
		data.Identifiers = ch.Identifiers
	}
	if ch.Metadata != nil {
		data.Metadata = ch.Metadata
	}
	if ch.Store != nil {
		data.Store = ch.Store
	}
	if ch.Inventory != nil {
		data.Inventory = ch.Inventory
	}
	if ch.Manifest != nil {
		data.Manifest = ch.Manifest
	}
	return nil
}

// Updates are the changes Update was given, in order.
func (j *Job) Updates() []jobs.Change {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]jobs.Change(nil), j.updates...)
}

// MintFromCounter implements stage.Job with a counter of Counters, or
// of this claim's own; the id is written to the job's identifiers.
func (j *Job) MintFromCounter(ctx context.Context, counter string, makeID func(n int64) string) (string, error) {
	if j.Err != nil {
		return "", j.Err
	}
	if id := j.Job.GetIdentifiers().GetPrimaryId(); id != "" {
		return id, nil
	}
	cs := j.Counters
	if cs == nil {
		cs = &j.own
	}
	id := makeID(cs.next(counter))
	ids := &v1.Identifiers{PrimaryId: id}
	if old := j.Job.GetIdentifiers(); old != nil {
		ids.LocalId = old.GetLocalId()
	}
	if err := j.Update(ctx, jobs.Change{Identifiers: ids}); err != nil {
		return "", err
	}
	return id, nil
}
