package session

import (
	"context"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
)

// requestGroup sends the concurrent calls of one client together: while one
// request is with the server, the calls that arrive wait, then go out as
// one request. ZooKeeper's cost is mostly per request (a packet in, one
// trip through its request pipeline, a packet out; for a write also one
// proposal and one log append), however many operations it holds, so a
// stage running many jobs at once pays a fraction of a request per step. A
// call that arrives while nothing is in flight goes out at once, alone, as
// it would without grouping.
//
// Two kinds share it: multis (multiGroup), whose calls each stay atomic,
// and multiReads (readGroup), whose reads stand alone.
type requestGroup[Op, Res any] struct {
	send func(ops []Op) ([]Res, error)
	// cost is what one operation counts against maxCost.
	cost     func(op Op) int
	maxCalls int // calls per request
	maxCost  int // summed cost per request
	// settle gives each call of a request that was sent its share of the
	// answer (finish), and returns the calls to send again, first in line.
	settle func(batch []*groupCall[Op, Res], res []Res, err error) (again []*groupCall[Op, Res])

	mu      sync.Mutex
	queue   []*groupCall[Op, Res]
	running bool
}

type groupCall[Op, Res any] struct {
	ops  []Op
	cost int
	gone bool // its caller stopped waiting: not sent (again)
	res  []Res
	err  error
	done chan struct{}
}

func (mc *groupCall[Op, Res]) finish(res []Res, err error) {
	mc.res, mc.err = res, err
	close(mc.done)
}

// fits reports whether ops can go in one request at all (their cost is
// within maxCost).
func (g *requestGroup[Op, Res]) fits(ops []Op) bool {
	cost := 0
	for _, op := range ops {
		cost += g.cost(op)
	}
	return cost <= g.maxCost
}

// do sends ops as one call. When ctx ends before the call was sent, it is
// withdrawn and never sent; after, its outcome is unknown, as for any
// request whose answer was not awaited.
func (g *requestGroup[Op, Res]) do(ctx context.Context, ops []Op) ([]Res, error) {
	mc := &groupCall[Op, Res]{ops: ops, done: make(chan struct{})}
	for _, op := range ops {
		mc.cost += g.cost(op)
	}
	if g.maxCalls <= 1 || mc.cost > g.maxCost/2 {
		// Large calls (a batch's jobs being created) go alone, now.
		return call(ctx, func() ([]Res, error) { return g.send(ops) })
	}
	g.mu.Lock()
	g.queue = append(g.queue, mc)
	if !g.running {
		g.running = true
		go g.run()
	}
	g.mu.Unlock()
	select {
	case <-mc.done:
		return mc.res, mc.err
	case <-ctx.Done():
		g.mu.Lock()
		mc.gone = true
		g.mu.Unlock()
		return nil, context.Cause(ctx)
	}
}

// run sends what is queued, one request at a time, until the queue is empty.
func (g *requestGroup[Op, Res]) run() {
	for {
		g.mu.Lock()
		var batch []*groupCall[Op, Res]
		cost, rest := 0, g.queue[:0]
		for _, mc := range g.queue {
			switch {
			case mc.gone:
			case len(batch) < g.maxCalls && cost+mc.cost <= g.maxCost:
				batch = append(batch, mc)
				cost += mc.cost
			default:
				rest = append(rest, mc)
			}
		}
		clear(g.queue[len(rest):])
		g.queue = rest
		if len(batch) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		if again := g.sendBatch(batch); len(again) > 0 {
			g.mu.Lock()
			g.queue = append(again, g.queue...) // run drops those whose callers left
			g.mu.Unlock()
		}
	}
}

func (g *requestGroup[Op, Res]) sendBatch(batch []*groupCall[Op, Res]) []*groupCall[Op, Res] {
	if len(batch) == 1 {
		batch[0].finish(g.send(batch[0].ops))
		return nil
	}
	var all []Op
	for _, mc := range batch {
		all = append(all, mc.ops...)
	}
	res, err := g.send(all)
	return g.settle(batch, res, err)
}

// shareOut gives each call of batch its part of res (nil when res does not
// answer every operation) and err.
func shareOut[Op, Res any](batch []*groupCall[Op, Res], res []Res, err error) {
	total := 0
	for _, mc := range batch {
		total += len(mc.ops)
	}
	off := 0
	for _, mc := range batch {
		var part []Res
		if len(res) == total {
			part = res[off : off+len(mc.ops)]
		}
		off += len(mc.ops)
		mc.finish(part, err)
	}
}

// multiGroup groups multis. Atomicity per caller is kept: if a grouped
// request fails on one operation, nothing of it was applied; the call whose
// operation failed is sent alone to get its own answer and the others go
// again.
type multiGroup = requestGroup[any, zk.MultiResponse]

// Limits of one grouped multi: 64 calls of a stage's few operations each,
// and 512 KiB (the server refuses requests over ~1 MiB).
const (
	groupMaxCalls = 64
	groupMaxBytes = 512 << 10
)

func newMultiGroup(send func(ops []any) ([]zk.MultiResponse, error)) *multiGroup {
	g := &multiGroup{send: send, cost: encodedSize, maxCalls: groupMaxCalls, maxCost: groupMaxBytes}
	g.settle = func(batch []*groupCall[any, zk.MultiResponse], res []zk.MultiResponse, err error) []*groupCall[any, zk.MultiResponse] {
		failed, total := zkwire.FailedAt(res, err), 0
		for _, mc := range batch {
			total += len(mc.ops)
		}
		if err == nil || failed < 0 || len(res) != total {
			// Applied, or failed as a whole (connection or session lost): each
			// call gets its share of the answer, as it would have alone.
			shareOut(batch, res, err)
			return nil
		}
		// One operation failed and nothing was applied. Its call goes alone,
		// to get its own answer; the others are queued again.
		var again []*groupCall[any, zk.MultiResponse]
		off := 0
		for _, mc := range batch {
			if failed >= off && failed < off+len(mc.ops) {
				mc.finish(send(mc.ops))
			} else {
				again = append(again, mc)
			}
			off += len(mc.ops)
		}
		return again
	}
	return g
}

// encodedSize approximates the bytes an operation takes in a multi.
func encodedSize(op any) int {
	n := 32
	switch op := op.(type) {
	case *zk.CreateRequest:
		n += len(op.Path) + len(op.Data) + 16*len(op.Acl)
	case *zk.SetDataRequest:
		n += len(op.Path) + len(op.Data)
	case *zk.DeleteRequest:
		n += len(op.Path)
	case *zk.CheckVersionRequest:
		n += len(op.Path)
	}
	return n
}

// readGroup groups multiReads: each read stands alone in the answer, so a
// grouped request needs no care beyond giving each call its own reads. The
// answer's size is what limits a request: every node read may be as large
// as a node can be, and the whole answer must fit the client's buffer.
type readGroup = requestGroup[string, zkwire.ReadResult]

// maxNodeRead is the most one node can hold: the server's default
// jute.maxbuffer (1 MiB), which bounds what it accepts in a write.
const maxNodeRead = 1 << 20

func newReadGroup(send func(paths []string) ([]zkwire.ReadResult, error), maxResponseBytes int) *readGroup {
	return &readGroup{
		send:     send,
		cost:     func(string) int { return maxNodeRead },
		maxCalls: groupMaxCalls,
		maxCost:  maxResponseBytes,
		settle: func(batch []*groupCall[string, zkwire.ReadResult], res []zkwire.ReadResult, err error) []*groupCall[string, zkwire.ReadResult] {
			shareOut(batch, res, err)
			return nil
		},
	}
}
