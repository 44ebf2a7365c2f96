package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// newTools connects a client with a fresh root prefix and returns it with
// its tools.
func newTools(t testing.TB) (*queue.Client, *Tools) {
	t.Helper()
	q := queuetest.Connect(t, zktest.Root(t))
	return q, New(q)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// spawn creates a batch of n Pending jobs of the given priority and
// returns its bid and the jobs' ids.
func spawn(t testing.TB, q *queue.Client, n int, priority int32) (string, []string) {
	t.Helper()
	jobs := make([]queue.NewJob, n)
	for i := range jobs {
		jobs[i].Priority = priority
	}
	jids := queuetest.SpawnN(t, q, jobs, queue.Pending)
	j, err := q.GetJob(testCtx(t), jids[0])
	if err != nil {
		t.Fatal(err)
	}
	return j.GetBid(), jids
}

// nodeData reads the node at p.
func nodeData(t testing.TB, a *Tools, p string) string {
	t.Helper()
	data, _, err := a.b.Get(testCtx(t), p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return string(data)
}

// encodeStatus is a job's status as the queue writes it.
func encodeStatus(a *Tools, st *v1.JobStatus) []byte { return a.b.RewriteJobStatus(nil, st) }

// tree lists every node under the tools' root, relative to it.
func tree(t testing.TB, a *Tools) []string {
	t.Helper()
	ctx := testCtx(t)
	root := a.q.Root()
	var out []string
	var walk func(p string)
	walk = func(p string) {
		names, _, err := a.b.Children(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			child := p + "/" + n
			out = append(out, strings.TrimPrefix(child, root))
			walk(child)
		}
	}
	walk(root)
	return out
}
