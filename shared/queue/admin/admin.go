// Package admin is the operators' side of the queue: what the batcher's
// AdminService, its console and janitor do to the queue beside the stages.
// It holds, releases, fails, requeues, reprioritizes and deletes jobs;
// releases, re-reports and deletes batches; holds collections and pauses
// the queue; lists, searches and counts jobs, batches, workers and object
// locks; cleans up ended batches; checks and mends the tree (Fsck); keeps
// the console's sign-ins; and reads the figures of the queue's gauges. A
// stage claims and commits through package queue alone; its code never
// needs this package.
//
// Tools work through a queue.Client's own session: their reads and writes
// are grouped, retried and fenced as the client's are, and the locks they
// take are that session's.
package admin

import (
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/core"
)

// Tools are the operators' actions on the queue of one client.
type Tools struct {
	q *queue.Client
	b *core.Backend
}

// New returns the operators' tools over q's session.
func New(q *queue.Client) *Tools {
	return &Tools{q: q, b: q.Backend(core.Key{})}
}
