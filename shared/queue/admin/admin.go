// Package admin is the operators' side of the queue: what the batcher's
// AdminService and janitor do to the queue beside the stages, split by what
// they act on. Jobs holds, releases, fails, requeues, reprioritizes,
// deletes, searches and counts jobs; Batches releases, re-reports, deletes,
// lists and cleans up batches; Queue pauses the queue, holds collections,
// lists workers and object locks, reads the queue's figures and
// aggregates, and checks and mends the tree (Fsck); SignIns keeps
// the console's sign-ins. A stage claims and commits through package jobs
// alone; its code never needs this package.
//
// The tools work through a session of their own caller's: their reads and
// writes are grouped, retried and fenced as the session's are, every
// change to a job or batch goes through a claim as a stage's does
// (jobs.Claim, batches.BatchClaim), and the locks they take are that
// session's.
package admin

import (
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Tools are the operators' tools over one session, by what they act on.
type Tools struct {
	Jobs    *Jobs
	Batches *Batches
	Queue   *Queue
	SignIns *SignIns
}

// New returns the operators' tools over s.
func New(s *session.Session) Tools {
	b := &base{s: s, z: s.Nodes(), p: s.Paths(), jobs: jobs.New(s), reader: jobs.NewReader(s), batches: batches.New(s)}
	return Tools{Jobs: &Jobs{b}, Batches: &Batches{b}, Queue: &Queue{b}, SignIns: &SignIns{b}}
}

// base is what every tool works with.
type base struct {
	s       *session.Session
	z       *session.Nodes
	p       queue.Paths
	jobs    *jobs.Client
	reader  *jobs.Reader
	batches *batches.Client
}

// Jobs are the operators' actions on jobs, and their searches.
type Jobs struct{ *base }

// Batches are the operators' actions on batches.
type Batches struct{ *base }

// Queue are the operators' tools for the queue as a whole: its pause, the
// collections held, its workers and object locks, its figures, its checks.
type Queue struct{ *base }

// SignIns are the operator console's sign-ins, kept in the queue
// so that every console replica and restart honours them.
type SignIns struct{ *base }
