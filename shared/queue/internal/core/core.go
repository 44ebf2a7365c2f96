// Package core is what package queue lends its operators' tools
// (shared/queue/admin) and nothing else: the ZooKeeper calls of a client's
// session, with the retries, grouping and fencing queue gives them, the
// paths of the queue contract (docs/queue-contract.md) and the node
// readers. Operators' tools read and mend the same nodes a stage moves, so
// they must spell and decode them exactly as queue does; lending queue's
// own functions keeps one home for each.
package core

import (
	"context"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// Key is what queue.Client.Backend asks for. Only packages under
// shared/queue can name it, so only they can borrow a client's backend.
type Key struct{ internal bool }

// Node is a node read with its stat; a missing node has a nil Stat.
type Node struct {
	Data []byte
	Stat *zk.Stat
}

// Backend is one queue client's session as operators' tools use it. Its
// calls behave as queue's own: reads are retried across connection loss
// and go with the reads other callers make meanwhile; a Multi is not
// retried.
type Backend struct {
	Get         func(ctx context.Context, path string) ([]byte, *zk.Stat, error)
	GetMany     func(ctx context.Context, paths []string) ([][]byte, error)
	GetManyStat func(ctx context.Context, paths []string) ([]Node, error)
	Children    func(ctx context.Context, path string) ([]string, *zk.Stat, error)
	Exists      func(ctx context.Context, path string) (bool, *zk.Stat, error)
	// CreateGrouped creates a node in a multi of one operation, sent
	// together with other callers' multis.
	CreateGrouped func(ctx context.Context, path string, data []byte, flags int32) (string, error)
	// EnsureOnce creates a folder the queue never removes, once a client.
	EnsureOnce func(ctx context.Context, path string) error
	// Delete deletes a node at version (-1: any), retried across
	// connection loss.
	Delete func(ctx context.Context, path string, version int32) error
	// EachAtMost calls f(i) for every i in [0, n), at most limit at a
	// time: the pace at which one session's requests are pipelined.
	EachAtMost func(n, limit int, f func(i int))

	// ReadJobs reads the status and the data nodes a listing shows
	// (bid, priority, space needed, configuration, identifiers) of each
	// job, in several multiReads at once; a job gone or unreadable is nil.
	ReadJobs func(ctx context.Context, jids []string) ([]*v1.Job, error)
	// ReadJobsWindow is how many jobs ReadJobs reads with all its
	// multiReads in flight together: the window a scan reads at a time.
	ReadJobsWindow int
	// BatchStatus reads a batch's status (queue.ErrNotFound when it has
	// none).
	BatchStatus       func(ctx context.Context, bid string) (*v1.BatchStatus, error)
	DecodeBatchStatus func(path string, data []byte) (*v1.BatchStatus, error)
	// RemoveBatch removes a Completed batch and its jobs under the
	// batch's lock (queue.ErrWrongState when it is not Completed,
	// queue.ErrLocked when a batcher holds it), returning the jobs removed.
	RemoveBatch func(ctx context.Context, bid string) ([]*v1.Job, error)

	Paths Paths
}

// Paths spells the queue's paths as package queue does.
type Paths struct {
	Jobs            func() string
	JobStateDir     func(s v1.JobState) string
	BatchStatus     func(bid string) string
	ConsoleSessions func() string
	ConsoleSession  func(id string) string
}
