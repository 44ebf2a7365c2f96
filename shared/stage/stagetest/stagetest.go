// Package stagetest has an in-memory stage.Claim, so that what a handler
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

// Claim is a claimed job held in memory. Its reads return Job; its writes
// change Job and are recorded in Updates.
type Claim struct {
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

var _ stage.Claim = (*Claim)(nil)

// New returns a claim of job in state from.
func New(job *v1.Job, from queue.JobState) *Claim {
	return &Claim{Job: job, From: from}
}

// ID implements stage.Claim.
func (c *Claim) ID() string { return c.Job.GetId() }

// State implements stage.Claim.
func (c *Claim) State() queue.JobState { return c.From }

// Data implements stage.Claim.
func (c *Claim) Data() *v1.Job { return c.Job }

// Load implements stage.Claim: everything is in Job already.
func (c *Claim) Load(context.Context, queue.Parts) error { return c.Err }

// LoadManifest implements stage.Claim.
func (c *Claim) LoadManifest(context.Context) (*v1.Manifest, error) {
	if c.Err != nil {
		return nil, c.Err
	}
	return c.Job.GetManifest(), nil
}

// WorkingDir implements stage.Claim, as the queue places it.
func (c *Claim) WorkingDir(_ context.Context, workRoot string) (string, error) {
	if c.Err != nil {
		return "", c.Err
	}
	return queue.JobWorkingDir(workRoot, c.Job), nil
}

// Update implements stage.Claim: ch's data is written to Job.
func (c *Claim) Update(_ context.Context, ch jobs.Change) error {
	if c.Err != nil {
		return c.Err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, ch)
	j := c.Job
	if ch.Priority != nil {
		j.Priority = *ch.Priority
	}
	if ch.SpaceNeeded != nil {
		j.SpaceNeeded = *ch.SpaceNeeded
	}
	if ch.Identifiers != nil {
		j.Identifiers = ch.Identifiers
	}
	if ch.Metadata != nil {
		j.Metadata = ch.Metadata
	}
	if ch.Store != nil {
		j.Store = ch.Store
	}
	if ch.Inventory != nil {
		j.Inventory = ch.Inventory
	}
	if ch.Manifest != nil {
		j.Manifest = ch.Manifest
	}
	return nil
}

// Updates are the changes Update was given, in order.
func (c *Claim) Updates() []jobs.Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]jobs.Change(nil), c.updates...)
}

// MintFromCounter implements stage.Claim with a counter of Counters, or
// of this claim's own; the id is written to the job's identifiers.
func (c *Claim) MintFromCounter(ctx context.Context, counter string, makeID func(n int64) string) (string, error) {
	if c.Err != nil {
		return "", c.Err
	}
	if id := c.Job.GetIdentifiers().GetPrimaryId(); id != "" {
		return id, nil
	}
	cs := c.Counters
	if cs == nil {
		cs = &c.own
	}
	id := makeID(cs.next(counter))
	ids := &v1.Identifiers{PrimaryId: id}
	if old := c.Job.GetIdentifiers(); old != nil {
		ids.LocalId = old.GetLocalId()
	}
	if err := c.Update(ctx, jobs.Change{Identifiers: ids}); err != nil {
		return "", err
	}
	return id, nil
}
