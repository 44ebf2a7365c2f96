package queue

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
)

// What this package's external tests (package queue_test, which may use the
// operators' tools of package admin, fsck among them) reach inside a client
// for.

// cutter loses the answers of chosen multis sent by a client: the n-th
// multi of a kind (counted from 1) is applied or not, and its caller told
// the connection closed, as when a ZooKeeper server goes away under it.
type cutter struct {
	mu     sync.Mutex
	counts map[string]int
	// lose says, for the n-th multi of kind, whether to lose its answer and
	// whether the server applies it first.
	lose func(kind string, n int) (lose, apply bool)
	lost int
}

func (ct *cutter) install(c *Client) {
	send := c.group.send
	ct.counts = map[string]int{}
	c.group.send = func(ops []any) ([]zk.MultiResponse, error) {
		kind := "other"
		switch {
		case writes(ops, c.p.jobSeq()):
			kind = "reserve"
		case slices.ContainsFunc(ops, func(op any) bool {
			cr, ok := op.(*zk.CreateRequest)
			return ok && strings.HasSuffix(cr.Path, "/"+nodeConfig) && strings.Contains(cr.Path, "/jobs/jid")
		}):
			kind = "write"
		}
		ct.mu.Lock()
		ct.counts[kind]++
		lose, apply := ct.lose(kind, ct.counts[kind])
		if lose {
			ct.lost++
		}
		ct.mu.Unlock()
		if !lose {
			return send(ops)
		}
		if apply {
			send(ops)
		}
		return nil, zk.ErrConnectionClosed
	}
}

// LoseAnswers makes c lose the answers of chosen multis: lose says, for the
// n-th multi (counted from 1) of a kind ("reserve": a reservation of job
// ids; "write": a write of jobs; "other"), whether its answer is lost and
// whether the server applies it first. lost counts the answers lost;
// stop sends every multi alone and straight to ZooKeeper from then on.
func LoseAnswers(c *Client, lose func(kind string, n int) (lose, apply bool)) (lost func() int, stop func()) {
	ct := &cutter{lose: lose}
	ct.install(c)
	return func() int {
			ct.mu.Lock()
			defer ct.mu.Unlock()
			return ct.lost
		}, func() {
			c.group.send = func(ops []any) ([]zk.MultiResponse, error) { return c.conn.Multi(ops...) }
		}
}

// DropBatchLock removes a batch's lock node, as another batcher's session
// expiring this one's would.
func DropBatchLock(c *Client, bid string) error { return c.conn.Delete(c.p.batchLock(bid), -1) }

// JobNodes lists the job nodes under /jobs.
func JobNodes(ctx context.Context, c *Client) ([]string, error) {
	names, _, err := c.children(ctx, c.p.jobs())
	if err != nil {
		return nil, err
	}
	var jobs []string
	for _, n := range names {
		if strings.HasPrefix(n, "jid") {
			jobs = append(jobs, n)
		}
	}
	return jobs, nil
}
