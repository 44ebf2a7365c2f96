package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// client is one session of the queue with the stages' side of it (the
// package under test) and a reader of its jobs; b is the batcher's side,
// which makes the jobs the tests take.
type client struct {
	*jobs.Client
	*jobs.Reader
	s *session.Session
	z *session.Nodes
	p queue.Paths
	b *batches.Client
	// multis stands between the session and the server for its multis
	// (multihook), once a test sets it (cutMultis).
	multis *multiHook
}

// newClient connects a client with a fresh root prefix.
func newClient(t testing.TB) *client {
	t.Helper()
	return newClientAt(t, zktest.Root(t))
}

func newClientAt(t testing.TB, root string) *client {
	t.Helper()
	return connect(t, session.Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second})
}

// connect opens a session with opts, closed when the test ends, and the
// roles over it.
func connect(t testing.TB, opts session.Options) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hook := &multiHook{}
	s, err := session.Connect(multihook.With(ctx, hook.send), opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(s.Close)
	return &client{Client: jobs.New(s), Reader: jobs.NewReader(s), s: s, z: s.Nodes(), p: s.Paths(), b: batches.New(s), multis: hook}
}

// Close ends the client's session; its locks disappear at once.
func (c *client) Close() { c.s.Close() }

// Requests are the requests the client's session has sent.
func (c *client) Requests() []session.RequestCount { return c.s.Requests() }

// requestCount is how many requests of op on nodes of kind node (as
// session.RequestCount names them) c's session has sent.
func requestCount(c *client, op, node string) int64 {
	for _, r := range c.Requests() {
		if r.Op == op && r.Node == node {
			return r.Count
		}
	}
	return 0
}

// multiHook sends a session's multis through a test's function, when one
// is set; the session's own way otherwise.
type multiHook struct {
	mu sync.Mutex
	f  multihook.Hook
}

func (h *multiHook) send(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
	h.mu.Lock()
	f := h.f
	h.mu.Unlock()
	if f == nil {
		return send(ops)
	}
	return f(ops, send)
}

// cutMultis makes every multi the client's session sends from now on go
// through f, which gets the session's own way to send it: a test loses
// answers with it, or applies a multi without telling, as a server that
// goes away does.
func (c *client) cutMultis(f multihook.Hook) {
	c.multis.mu.Lock()
	c.multis.f = f
	c.multis.mu.Unlock()
}

// proxiedClient connects through a proxy the test can cut, with a session
// that outlives a short cut.
func proxiedClient(t *testing.T, root string, timeout time.Duration) (*client, *zktest.Proxy) {
	t.Helper()
	proxy, err := zktest.NewProxy(zktest.Servers(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return connect(t, session.Options{Servers: []string{proxy.Addr}, Root: root, SessionTimeout: timeout}), proxy
}

// The operators' tools (package admin) are tested in their own package;
// these tests make an operator's moves as those tools do: claimed by id
// for an operator (ClaimForOperator), relying on the job's batch as read
// (RelyOnBatch), committed fenced like a stage's step. The tools' own
// refusals (a requeue into a batch that has completed, say) are theirs to
// test.

// operatorMove moves the job jid, in state from, to `to` as an operator's
// move does (a hold, a release, a requeue to a named state).
func operatorMove(ctx context.Context, c *client, jid string, from, to queue.JobState, message string) (*v1.Job, error) {
	return c.moveForOperator(ctx, jid, from, func(*jobs.Claim) queue.JobState { return to }, message)
}

// requeue resumes a failed job at the state after its last successful one,
// as an operator's requeue without a named state does.
func requeue(ctx context.Context, c *client, jid, message string) (*v1.Job, error) {
	return c.moveForOperator(ctx, jid, queue.Failed, func(cl *jobs.Claim) queue.JobState {
		return queue.ResumeState(cl.Job.GetStatus().GetLastSuccessfulStatus())
	}, message)
}

// moveForOperator claims jid for an operator, checks it is in state from,
// makes the move to the state `to` picks rely on the job's batch and
// commits it.
func (c *client) moveForOperator(ctx context.Context, jid string, from queue.JobState, to func(*jobs.Claim) queue.JobState, message string) (*v1.Job, error) {
	cl, err := c.ClaimForOperator(ctx, jid)
	if err != nil {
		return nil, err
	}
	switch {
	case cl.StatusErr != nil:
		err = fmt.Errorf("job %s: %w: its status is unreadable", jid, queue.ErrCorrupt)
	case cl.State() != from:
		err = fmt.Errorf("job %s is %s, not %s: %w", jid, queue.JobStateName(cl.State()), queue.JobStateName(from), queue.ErrWrongState)
	}
	ch := jobs.Change{Message: message}
	if err == nil {
		ch.To = to(cl)
		err = c.relyOnBatch(ctx, cl, ch.To)
	}
	if err == nil {
		err = cl.Commit(ctx, ch)
	}
	if err != nil {
		cl.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return cl.Job, nil
}

// relyOnBatch makes an operator's move of cl's job to `to` rely on the
// job's batch as read: a batch that is gone lets the job be failed or
// deleted only; a move out of an ended state needs the batch's status
// still at the version read when it commits.
func (c *client) relyOnBatch(ctx context.Context, cl *jobs.Claim, to queue.JobState) error {
	bid := cl.Job.GetBid()
	gone := func() error {
		if queue.IsLive(to) {
			return &queue.NoBatchError{Job: cl.ID(), Batch: bid}
		}
		cl.RelyOnBatch(false, false, 0)
		return nil
	}
	if !queue.ValidBatchID(bid) {
		return gone()
	}
	_, stat, err := c.z.Get(ctx, c.p.Batch(bid).Status())
	if errors.Is(err, zk.ErrNoNode) {
		return gone()
	}
	if err != nil {
		return err
	}
	cl.RelyOnBatch(true, !queue.IsLive(cl.State()), stat.Version)
	return nil
}

// pause and unpause write and remove the node that pauses the queue, as
// the operators' tools do.
func pause(t testing.TB, c *client) {
	t.Helper()
	if err := c.z.Ensure(testCtx(t), c.p.Locks().IngestPause()); err != nil {
		t.Fatalf("pausing: %v", err)
	}
}

func unpause(t testing.TB, c *client) {
	t.Helper()
	if err := c.z.Delete(testCtx(t), c.p.Locks().IngestPause(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("unpausing: %v", err)
	}
}

// storageLocks lists the storage locks held now, sorted.
func storageLocks(t testing.TB, c *client) []string {
	t.Helper()
	names, _, err := c.z.Children(testCtx(t), c.p.Locks().Storage())
	if err != nil {
		t.Fatalf("listing storage locks: %v", err)
	}
	slices.Sort(names)
	return names
}

// workerEntries reads every live worker entry; one gone while it is read
// is left out.
func workerEntries(t testing.TB, c *client) []*v1.WorkerInfo {
	t.Helper()
	ctx := testCtx(t)
	names, _, err := c.z.Children(ctx, c.p.Own().Workers())
	if err != nil {
		t.Fatalf("listing workers: %v", err)
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = c.p.Own().Worker(n)
	}
	read, err := c.z.Read(ctx, paths)
	if err != nil {
		t.Fatalf("reading worker entries: %v", err)
	}
	var out []*v1.WorkerInfo
	for i, d := range session.Datas(read) {
		if d == nil {
			continue
		}
		w := &v1.WorkerInfo{}
		if err := protojson.Unmarshal(d, w); err != nil {
			t.Fatalf("worker entry %s: %v", names[i], err)
		}
		out = append(out, w)
	}
	return out
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// tree reads every node under the client's root: path (relative) → data.
func tree(t testing.TB, c *client) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	out := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		data, _, err := c.z.Get(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		if err != nil {
			t.Fatalf("get %s: %v", p, err)
		}
		rel := strings.TrimPrefix(p, c.p.Root())
		if rel == "" {
			rel = "/"
		}
		out[rel] = string(data)
		children, _, err := c.z.Children(ctx, p)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("children %s: %v", p, err)
		}
		for _, ch := range children {
			walk(path.Join(p, ch))
		}
	}
	walk(c.p.Batches())
	walk(c.p.BatchUUIDs())
	walk(c.p.Jobs())
	walk(c.p.Locks().Dir())
	return out
}

// under lists the node paths below prefix (exclusive), sorted.
func under(tr map[string]string, prefix string) []string {
	var out []string
	for p := range tr {
		if strings.HasPrefix(p, prefix+"/") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// completeBatch takes the batch's jobs from Pending to Completed, then the
// batch through Reporting to Completed.
func completeBatch(t testing.TB, c *client, bid string, jids []string) {
	t.Helper()
	for _, jid := range jids {
		for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
			queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			queuetest.Move(t, c.s, jid, jobs.Change{To: to})
		}
	}
	ctx := testCtx(t)
	bc, err := c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true}, {To: queue.BatchCompleted}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatalf("batch %s → %s: %v", bid, queue.BatchStateName(ch.To), err)
		}
	}
}

// writes reports whether ops create or set the node at path.
func writes(ops []any, path string) bool {
	return slices.ContainsFunc(ops, func(op any) bool {
		switch op := op.(type) {
		case *zk.CreateRequest:
			return op.Path == path
		case *zk.SetDataRequest:
			return op.Path == path
		}
		return false
	})
}
