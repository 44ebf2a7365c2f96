package queue

import (
	"context"
	"sync"

	"github.com/go-zookeeper/zk"
)

// multiGroup sends the concurrent multis of one client together: while one
// request is with the server, the multis that arrive wait, then go out as
// one multi. ZooKeeper's cost is mostly per request (each write request is
// one proposal and one log append however many operations it holds), so a
// stage running many jobs at once pays a fraction of a request per
// transition. A multi that arrives while nothing is in flight goes out at
// once, alone, as it would without grouping.
//
// Atomicity per caller is kept: if a grouped request fails on one
// operation, nothing of it was applied; the caller whose operation failed
// is sent alone to get its own answer and the others go again.
type multiGroup struct {
	send     func(ops []any) ([]zk.MultiResponse, error)
	maxCalls int // calls per request
	maxBytes int // encoded size per request, well under the server's jute.maxbuffer

	mu      sync.Mutex
	queue   []*multiCall
	running bool
}

type multiCall struct {
	ops   []any
	bytes int
	gone  bool // its caller stopped waiting: not sent (again)
	res   []zk.MultiResponse
	err   error
	done  chan struct{}
}

// Limits of one grouped request: 64 calls of a stage's few operations each,
// and 512 KiB (the server refuses requests over ~1 MiB).
const (
	groupMaxCalls = 64
	groupMaxBytes = 512 << 10
)

func newMultiGroup(send func(ops []any) ([]zk.MultiResponse, error)) *multiGroup {
	return &multiGroup{send: send, maxCalls: groupMaxCalls, maxBytes: groupMaxBytes}
}

// do runs ops as one atomic multi. When ctx ends before the multi was sent,
// it is withdrawn and never applied; after, its outcome is unknown, as for
// any request whose answer was not awaited.
func (g *multiGroup) do(ctx context.Context, ops []any) ([]zk.MultiResponse, error) {
	mc := &multiCall{ops: ops, bytes: encodedSize(ops), done: make(chan struct{})}
	if g.maxCalls <= 1 || mc.bytes > g.maxBytes/2 {
		// Large multis (a batch's jobs being created) go alone, now.
		return call(ctx, func() ([]zk.MultiResponse, error) { return g.send(ops) })
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
func (g *multiGroup) run() {
	for {
		g.mu.Lock()
		var batch []*multiCall
		size, rest := 0, g.queue[:0]
		for _, mc := range g.queue {
			switch {
			case mc.gone:
			case len(batch) < g.maxCalls && size+mc.bytes <= g.maxBytes:
				batch = append(batch, mc)
				size += mc.bytes
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
		g.sendGroup(batch)
	}
}

func (g *multiGroup) sendGroup(batch []*multiCall) {
	if len(batch) == 1 {
		res, err := g.send(batch[0].ops)
		finish(batch[0], res, err)
		return
	}
	var all []any
	for _, mc := range batch {
		all = append(all, mc.ops...)
	}
	res, err := g.send(all)
	failed := failedOp(multiError(res, err))
	if err == nil || failed < 0 || len(res) != len(all) {
		// Applied, or failed as a whole (connection or session lost): each
		// call gets its share of the answer, as it would have alone.
		off := 0
		for _, mc := range batch {
			var part []zk.MultiResponse
			if len(res) == len(all) {
				part = res[off : off+len(mc.ops)]
			}
			off += len(mc.ops)
			finish(mc, part, err)
		}
		return
	}
	// One operation failed and nothing was applied. Its call goes alone,
	// to get its own answer; the others are queued again, first in line.
	var retry []*multiCall
	off := 0
	for _, mc := range batch {
		if failed >= off && failed < off+len(mc.ops) {
			res, err := g.send(mc.ops)
			finish(mc, res, err)
		} else {
			retry = append(retry, mc)
		}
		off += len(mc.ops)
	}
	g.mu.Lock()
	g.queue = append(retry, g.queue...) // run drops those whose callers left
	g.mu.Unlock()
}

func finish(mc *multiCall, res []zk.MultiResponse, err error) {
	mc.res, mc.err = res, err
	close(mc.done)
}

// encodedSize approximates the bytes ops take in a request.
func encodedSize(ops []any) int {
	n := 0
	for _, op := range ops {
		n += 32
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
	}
	return n
}
