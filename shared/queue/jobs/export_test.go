package jobs

import (
	"context"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
)

// What this package's tests reach inside a client for. They are external
// tests (package jobs_test): the jobs they take are made by package
// batches, and operators' tools (package admin) act beside them, both
// built on this package.

// ErrStale is why ClaimEntry passes over an entry that no longer describes
// its job.
var ErrStale = errStale

// MintBlock is how many numbers a client reserves from a counter at a time.
const MintBlock = mintBlock

// RegisterRetry is how RegisterWorker's first write is tried again.
func RegisterRetry() retrypolicy.Policy { return registerRetry() }

// ClaimEntry tries to take the job behind one state-folder entry, as a
// consumer does (claimEntry).
func (c *Client) ClaimEntry(ctx context.Context, state queue.JobState, e queue.Entry, parts queue.Parts, checkLock bool) (*Claim, error) {
	return c.claimEntry(ctx, state, entry{Entry: e}, parts, checkLock)
}

// PausedNow reports whether the client's pause watch knows the queue
// paused.
func (c *Client) PausedNow() bool { return c.pausedNow() }

// SetRetryGap sets how long the consumer leaves a job its own claim gave
// back (ReleasedRetryAfter).
func (co *Consumer) SetRetryGap(d time.Duration) {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.retryGap = d
}

// SetBackstop sets how long the consumer trusts a folder whose watch has
// not fired (relistBackstop).
func (co *Consumer) SetBackstop(d time.Duration) {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.backstop = d
}

// WaitsForLock reports whether the consumer found jid locked and watches
// its lock.
func (co *Consumer) WaitsForLock(jid string) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.lockWait[jid]
}

// Loaded reports whether the claim has read the job's data node name.
func (cl *Claim) Loaded(name string) bool { return cl.loaded[name] }

// KeptEntries is how many of its status's history entries the claim keeps
// as read, for its commit to write back as they were: the entries a
// commit that kept them all would reuse, without the status's bytes to
// scan them again from.
func (cl *Claim) KeptEntries() int {
	old := cl.Job.GetStatus()
	return len(cl.history.Entries(nil, old, &v1.JobStatus{History: old.GetHistory()}))
}
