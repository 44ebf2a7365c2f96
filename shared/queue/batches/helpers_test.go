package batches_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// connect opens a session on a fresh root of the test ZooKeeper.
func connect(t testing.TB) *session.Session {
	t.Helper()
	return queuetest.Connect(t, zktest.Root(t))
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pathTo is how a test job reaches each state from Pending.
var pathTo = map[queue.JobState][]queue.JobState{
	queue.Pending:      nil,
	queue.Held:         {queue.Held},
	queue.Estimating:   {queue.Estimating},
	queue.Provisioning: {queue.Estimating, queue.Provisioning},
	queue.Downloading:  {queue.Estimating, queue.Provisioning, queue.Downloading},
	queue.Processing:   {queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing},
	queue.Storing:      {queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing},
	queue.Recording:    {queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording},
	queue.Notify:       {queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify},
	queue.Completed: {queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify,
		queue.Completed},
	queue.Failed: {queue.Failed},
}

// jobCounts counts the jobs in each state folder.
func jobCounts(t testing.TB, s *session.Session) map[queue.JobState]int {
	t.Helper()
	out := map[queue.JobState]int{}
	for _, st := range queue.JobStates() {
		if ok, stat, err := s.Nodes().Exists(testCtx(t), s.Paths().StateDir(st)); err != nil {
			t.Fatal(err)
		} else if ok {
			out[st] = int(stat.NumChildren)
		}
	}
	return out
}

// jids makes n jids numbered from first.
func jids(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("jid%010d", first+i)
	}
	return out
}

// answerCutter stands between a session and the server for its multis
// (multihook) and loses the answers of chosen ones: the
// n-th multi of a kind (counted from 1) is applied or not, and its caller
// told the connection closed, as when a ZooKeeper server goes away under
// it.
type answerCutter struct {
	p  queue.Paths
	mu sync.Mutex
	// lose says, for the n-th multi of kind, whether to lose its answer and
	// whether the server applies it first; nil: every multi goes through.
	lose   func(kind string, n int) (lose, apply bool)
	counts map[string]int
	lost   int
}

// connectCutting opens a session on root whose multis go through an
// answerCutter, which loses nothing until told to (loseAnswers).
func connectCutting(t testing.TB, root string) (*session.Session, *answerCutter) {
	t.Helper()
	p, err := queue.NewPaths(root)
	if err != nil {
		t.Fatal(err)
	}
	ct := &answerCutter{p: p}
	ctx, cancel := context.WithTimeout(context.Background(), queuetest.Wait)
	defer cancel()
	s, err := session.Connect(multihook.With(ctx, ct.send), session.Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, ct
}

// kind names what a multi does: "reserve", a reservation of job ids;
// "write", a write of jobs; "other".
func (ct *answerCutter) kind(ops []any) string {
	switch {
	case slices.ContainsFunc(ops, func(op any) bool {
		cr, ok := op.(*zk.CreateRequest)
		return ok && cr.Path == ct.p.JobSeq()
	}):
		return "reserve"
	case slices.ContainsFunc(ops, func(op any) bool {
		cr, ok := op.(*zk.CreateRequest)
		return ok && strings.HasSuffix(cr.Path, "/"+queue.NodeConfig) && strings.Contains(cr.Path, "/jobs/jid")
	}):
		return "write"
	}
	return "other"
}

func (ct *answerCutter) send(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
	ct.mu.Lock()
	if ct.lose == nil {
		ct.mu.Unlock()
		return send(ops)
	}
	kind := ct.kind(ops)
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

// loseAnswers makes the session lose the answers of chosen multis from now
// on: lose says, for the n-th multi (counted from 1) of a kind (see kind),
// whether its answer is lost and whether the server applies it first. lost
// counts the answers lost; stop sends every multi straight to ZooKeeper
// from then on.
func (ct *answerCutter) loseAnswers(lose func(kind string, n int) (lose, apply bool)) (lost func() int, stop func()) {
	ct.mu.Lock()
	ct.lose, ct.counts, ct.lost = lose, map[string]int{}, 0
	ct.mu.Unlock()
	return func() int {
			ct.mu.Lock()
			defer ct.mu.Unlock()
			return ct.lost
		}, func() {
			ct.mu.Lock()
			ct.lose = nil
			ct.mu.Unlock()
		}
}
