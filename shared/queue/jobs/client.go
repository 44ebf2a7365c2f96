// Package jobs is the stages' side of the queue: a Consumer takes the jobs
// of one state, a Claim holds one job and commits what its stage did as one
// fenced transition, object locks and local-id bindings keep two jobs of one
// object apart, counters mint ids, and the worker registry says who is
// working. A Reader reads jobs for anyone. Operators' moves (package admin)
// go through the same claims.
package jobs

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Client is the stages' side of the queue over one session. It is safe for
// concurrent use; a process makes one per session, which its stages share
// (it follows the queue's pause and the held collections with one watch
// each).
type Client struct {
	s   *session.Session
	z   *session.Nodes
	p   queue.Paths
	log *slog.Logger
	r   *Reader

	pause pauseState
	holds holdState
	// counters are the blocks of counter numbers this client reserved
	// (counter path → *counterBlock).
	counters sync.Map
	// workerNonce and workerSeq make this client's worker ids (NewWorkerID).
	workerNonce uint32
	workerSeq   atomic.Int64
}

// New returns the stages' side of the queue over s.
func New(s *session.Session) *Client {
	return &Client{s: s, z: s.Nodes(), p: s.Paths(), log: s.Logger(), r: NewReader(s), workerNonce: rand.Uint32()}
}

// Reader reads jobs: their status and data nodes, the jobs of a state, a
// page of a listing. It is safe for concurrent use.
type Reader struct {
	z   *session.Nodes
	p   queue.Paths
	log *slog.Logger
}

// NewReader returns a reader of the jobs of s's queue.
func NewReader(s *session.Session) *Reader {
	return &Reader{z: s.Nodes(), p: s.Paths(), log: s.Logger()}
}
