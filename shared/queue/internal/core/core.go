// Package core is what package queue lends its operators' tools
// (shared/queue/admin) and nothing else: the ZooKeeper calls of a client's
// session, with the retries, grouping and fencing queue gives them, the
// paths of the queue contract (docs/queue-contract.md), the node codec, and
// the writes an operator's action makes under a claim (a job's move, a
// job's or batch's deletion), whose fencing is the claim's own. Operators'
// tools read and mend the same nodes a stage moves, so they must spell and
// decode them exactly as queue does; lending queue's own functions keeps
// one home for each.
package core

import (
	"context"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Key is what queue.Client.Backend asks for. Only packages under
// shared/queue can name it, so only they can borrow a client's backend.
type Key struct{ _ [0]func() }

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
	// Multi runs ops atomically, grouped with other callers' multis; it
	// is not retried. A failed operation's index is FailedOp(err).
	Multi    func(ctx context.Context, ops ...any) ([]zk.MultiResponse, error)
	FailedOp func(err error) int
	// CreateOp, SetOp, DeleteOp and CheckOp are a multi's operations;
	// CreateOp gives the node the client's ACL.
	CreateOp func(path string, data []byte, flags int32) *zk.CreateRequest
	SetOp    func(path string, data []byte, version int32) *zk.SetDataRequest
	DeleteOp func(path string, version int32) *zk.DeleteRequest
	CheckOp  func(path string, version int32) *zk.CheckVersionRequest
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
	// ListBatchIDs lists every bid, oldest first.
	ListBatchIDs func(ctx context.Context) ([]string, error)
	// BatchStatus reads a batch's status (queue.ErrNotFound when it has
	// none).
	BatchStatus       func(ctx context.Context, bid string) (*v1.BatchStatus, error)
	DecodeBatchStatus func(path string, data []byte) (*v1.BatchStatus, error)
	// RemoveBatch removes a Completed batch and its jobs under the
	// batch's lock (queue.ErrWrongState when it is not Completed,
	// queue.ErrLocked when a batcher holds it), returning the jobs removed.
	RemoveBatch func(ctx context.Context, bid string) ([]*v1.Job, error)

	// DeleteJobTrees deletes jobs' nodes and state entries, returning the
	// jobs as they were; DeleteBatchTree a batch's tree and its uuid's
	// entry ("": none).
	DeleteJobTrees  func(ctx context.Context, jids []string) ([]*v1.Job, error)
	DeleteBatchTree func(ctx context.Context, bid, uuid string) error
	// EnsureRefFolders makes the folders of a batch's job references
	// exist (a peer may create a batch without them).
	EnsureRefFolders func(ctx context.Context, bid, jid string) error

	// MoveJob claims a job by id (queue.Client.ClaimJob), checks it is in
	// one of want (any, when empty), asks decide where it goes, pins its
	// batch as an operator's move must (a live job needs a batch that will
	// still report; a job leaving an ended state relies on its batch as
	// read) and commits the move, fenced like a stage's.
	MoveJob func(ctx context.Context, jid string, want []v1.JobState, decide func(Claimed) (Move, error)) (*v1.Job, error)
	// CheckJobMove is the state machine's refusal of a job's move from to
	// (a *queue.TransitionError), nil when the move is allowed.
	CheckJobMove func(jid string, from, to v1.JobState) error
	// ValidPriority refuses a priority outside 0..queue.MaxPriority.
	ValidPriority func(p *int32) error
	// DeleteJob, DeleteBatch, ReleaseBatch and UpdateReport are the
	// operators' actions of the same names, as the admin package
	// documents them, written where their claims' fencing is. DeleteJob
	// returns the job as its claim read it.
	DeleteJob    func(ctx context.Context, jid string, force bool) (*v1.Job, error)
	DeleteBatch  func(ctx context.Context, bid string) ([]*v1.Job, error)
	ReleaseBatch func(ctx context.Context, bid string) (*v1.Batch, error)
	UpdateReport func(ctx context.Context, bid string) (*v1.Batch, error)
	// Ensure creates a node if it is missing (retried: it is idempotent).
	Ensure func(ctx context.Context, path string) error

	// The node codec.
	DecodeJobStatus func(path string, data []byte) (*v1.JobStatus, error)
	// RewriteJobStatus encodes next keeping the keys of old (a status as
	// read) that queue does not know.
	RewriteJobStatus func(old []byte, next *v1.JobStatus) []byte
	EncodeInt        func(n int64) []byte
	DecodeInt        func(path string, data []byte) (int64, error)
	Truncate         func(s string, n int) string
	// NowStamp is a last_modified of now, as queue writes them.
	NowStamp func() *timestamppb.Timestamp
	// RecordChange adds to next's history the change from old, as a
	// commit by worker at now does.
	RecordChange func(old, next *v1.JobStatus, worker string, now time.Time) *v1.JobStateChange

	// The state machine's rules about a job's nodes.
	// HasWhatItNeeds reports whether a job in s has the nodes the steps
	// before s write (a store, an inventory); NeededNodes names them.
	HasWhatItNeeds func(s v1.JobState, hasStore, hasInventory bool) bool
	NeededNodes    func(s v1.JobState) string

	Paths Paths
	Names Names
}

// Claimed is what an operator's move knows of the job it claimed.
type Claimed struct {
	From                   v1.JobState
	Job                    *v1.Job
	HasStore, HasInventory bool
	// StatusErr is why the job's status is unreadable (From is then its
	// state entry's); such a job may only be failed.
	StatusErr error
}

// Move is where an operator's move takes a job, and the message it leaves.
type Move struct {
	To      v1.JobState
	Message string
}

// Names are the names of the nodes and folders of the contract that
// operators' tools look at.
type Names struct {
	NodeStatus, NodeBid, NodePriority, NodeStore, NodeInventory string
	// Batch reference folders: a deleted job's, and the live jobs'.
	FolderDeleted, FolderProcessing string
	// ForeignLockMessage says why a lock node no session holds is
	// damage.
	ForeignLockMessage string
}

// Paths spells the queue's paths as package queue does.
type Paths struct {
	Jobs        func() string
	Job         func(jid string) string
	JobNode     func(jid, name string) string
	JobStatus   func(jid string) string
	JobLock     func(jid string) string
	JobStateDir func(s v1.JobState) string
	// JobEntry is a job's entry in state s's folder at priority.
	JobEntry    func(s v1.JobState, priority int32, jid string) string
	Batch       func(bid string) string
	BatchStatus func(bid string) string
	BatchFolder func(bid, folder string) string
	BatchRef    func(bid, folder, jid string) string
	BatchUUIDs  func() string
	BatchUUID   func(uuid string) string
	// FolderOf is the batch folder referencing a job in state s.
	FolderOf func(s v1.JobState) string
	// ParseEntry reads a state entry's name ("PP-jid…").
	ParseEntry func(name string) (priority int32, jid string, ok bool)
	// StateSegment is state s's folder name under jobs/states.
	StateSegment    func(s v1.JobState) string
	IngestPause     func() string
	Workers         func() string
	Worker          func(id string) string
	StorageLocks    func() string
	InventoryLocks  func() string
	Collections     func() string
	CollectionHold  func(mnemonic string) string
	ConsoleSessions func() string
	ConsoleSession  func(id string) string
}
