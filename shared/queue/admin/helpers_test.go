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
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// newTools connects a session with a fresh root prefix and returns it with
// its tools.
func newTools(t testing.TB) (*session.Session, Tools) {
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
func spawn(t testing.TB, q *session.Session, n int, priority int32) (string, []string) {
	t.Helper()
	news := make([]batches.NewJob, n)
	for i := range news {
		news[i].Priority = priority
	}
	jids := queuetest.SpawnN(t, q, news, queue.Pending)
	j, err := jobs.NewReader(q).GetJob(testCtx(t), jids[0])
	if err != nil {
		t.Fatal(err)
	}
	return j.GetBid(), jids
}

// nodes and paths are the session's requests and paths the tools work
// through.
func nodes(a Tools) *session.Nodes { return a.Queue.z }
func paths(a Tools) queue.Paths    { return a.Queue.p }

// nodeData reads the node at p.
func nodeData(t testing.TB, a Tools, p string) string {
	t.Helper()
	data, _, err := nodes(a).Get(testCtx(t), p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	return string(data)
}

// encodeStatus is a job's status as the queue writes it.
func encodeStatus(st *v1.JobStatus) []byte { return queue.RewriteJobStatus(nil, st, nil) }

// tree lists every node under the tools' root, relative to it.
func tree(t testing.TB, a Tools) []string {
	t.Helper()
	ctx := testCtx(t)
	root := paths(a).Root()
	var out []string
	var walk func(p string)
	walk = func(p string) {
		names, _, err := nodes(a).Children(ctx, p)
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
