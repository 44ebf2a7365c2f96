package queue

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// newClient connects a client with a fresh root prefix.
func newClient(t testing.TB) *Client {
	t.Helper()
	return newClientAt(t, zktest.Root(t))
}

func newClientAt(t testing.TB, root string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Package queue's own tests cannot import package admin, which imports
// queue: adminhook_test.go, of package queue_test, sets these two through
// SetAdmin.
var (
	// fsckDamages runs the operators' fsck over c and returns what it
	// found, as "kind item: detail".
	fsckDamages func(ctx context.Context, c *Client, grace time.Duration) ([]string, error)
	// operatorOf is the operators' tools over c.
	operatorOf func(c *Client) Operator
)

// Operator is what these tests ask of package admin's Tools: moving jobs,
// batches and collections as an operator does.
type Operator interface {
	ListWorkers(ctx context.Context) ([]*v1.WorkerInfo, error)
	ObjectLocks(ctx context.Context) (storage, inventory []string, err error)
	Pause(ctx context.Context) error
	Unpause(ctx context.Context) error
	HoldJob(ctx context.Context, jid, message string) (*v1.Job, error)
	ReleaseJob(ctx context.Context, jid, message string) (*v1.Job, error)
	FailJob(ctx context.Context, jid, message string) (*v1.Job, error)
	RequeueJob(ctx context.Context, jid string, to JobState, message string) (*v1.Job, error)
	DeleteJob(ctx context.Context, jid string, force bool) error
	HoldCollection(ctx context.Context, mnemonic string) error
	ReleaseCollection(ctx context.Context, mnemonic string) error
	HeldCollections(ctx context.Context) ([]string, error)
	ReleaseBatch(ctx context.Context, bid string) (*v1.Batch, error)
	UpdateReport(ctx context.Context, bid string) (*v1.Batch, error)
	DeleteBatch(ctx context.Context, bid string) ([]*v1.Job, error)
}

// SetAdmin sets fsckDamages and operatorOf.
func SetAdmin(fsck func(ctx context.Context, c *Client, grace time.Duration) ([]string, error), operator func(c *Client) Operator) {
	fsckDamages, operatorOf = fsck, operator
}

// jobCounts counts the jobs in each state folder.
func jobCounts(t testing.TB, c *Client) map[JobState]int {
	t.Helper()
	out := map[JobState]int{}
	for _, s := range jobStates {
		if ok, st, err := c.exists(testCtx(t), c.p.jobStateDir(s)); err != nil {
			t.Fatal(err)
		} else if ok {
			out[s] = int(st.NumChildren)
		}
	}
	return out
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// tree reads every node under the client's root: path (relative) → data.
func tree(t testing.TB, c *Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		data, _, err := c.conn.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		if err != nil {
			t.Fatalf("get %s: %v", p, err)
		}
		rel := strings.TrimPrefix(p, c.p.root)
		if rel == "" {
			rel = "/"
		}
		out[rel] = string(data)
		children, _, err := c.conn.Children(p)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("children %s: %v", p, err)
		}
		for _, ch := range children {
			walk(path.Join(p, ch))
		}
	}
	walk(c.p.root + "/batches")
	walk(c.p.root + "/batch-uuids")
	walk(c.p.root + "/jobs")
	walk(c.p.root + "/locks")
	return out
}

// nodeData reads one node (absolute path).
func nodeData(t testing.TB, c *Client, p string) string {
	t.Helper()
	data, _, err := c.conn.Get(p)
	if err != nil {
		t.Fatalf("get %s: %v", p, err)
	}
	return string(data)
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

// jsonField reads one field of a JSON node as raw JSON text.
func jsonField(t testing.TB, data, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("node is not JSON: %q: %v", data, err)
	}
	v, ok := m[field]
	if !ok {
		t.Fatalf("field %q missing in %s (keys %v)", field, data, slices.Sorted(maps.Keys(m)))
	}
	return string(v)
}

func sampleSubmission() *v1.Submission {
	return &v1.Submission{
		ProfileName:    "demo_profile",
		Submitter:      "dana",
		PayloadUrl:     "http://127.0.0.1:1/manifest.checkm",
		Type:           v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
		Metadata:       &v1.Metadata{Who: "Dana", What: "Letters", When: "1921", Where: ""},
	}
}

// spawn creates a batch, takes it to Processing and creates n jobs of the
// given priority, then finishes spawning. It returns the bid and jids.
func spawn(t testing.TB, c *Client, n int, priority int32) (string, []string) {
	t.Helper()
	ctx := testCtx(t)
	bid, err := c.CreateBatch(ctx, sampleSubmission())
	if err != nil {
		t.Fatalf("create batch: %v", err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatalf("claim batch: %v", err)
	}
	if err := bc.Commit(ctx, BatchChange{To: BatchProcessing}); err != nil {
		t.Fatalf("batch → Processing: %v", err)
	}
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{Priority: priority, Configuration: &v1.JobConfiguration{
			ProfileName: "demo_profile", Submitter: "dana", PayloadUrl: "http://127.0.0.1:1/f.checkm",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
			WorkingDir: "/tmp/work", BatchEntry: int32(i)}}
	}
	jids, err := bc.CreateJobs(ctx, jobs)
	if err != nil {
		t.Fatalf("create jobs: %v", err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatalf("finish spawning: %v", err)
	}
	return bid, jids
}

// completeBatch takes the batch's jobs from Pending to Completed, then the
// batch through Reporting to Completed.
func completeBatch(t testing.TB, c *Client, bid string, jids []string) {
	t.Helper()
	for _, jid := range jids {
		for _, to := range []JobState{Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Completed} {
			step(t, c, jid, Change{To: to})
		}
	}
	ctx := testCtx(t)
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []BatchChange{{To: BatchReporting, KeepLock: true}, {To: BatchCompleted}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatalf("batch %s → %s: %v", bid, BatchStateName(ch.To), err)
		}
	}
}

// step claims the job jid in its current state and commits ch.
func step(t testing.TB, c *Client, jid string, ch Change) {
	t.Helper()
	ctx := testCtx(t)
	cl, err := c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatalf("claim %s: %v", jid, err)
	}
	if err := cl.Commit(ctx, ch); err != nil {
		t.Fatalf("commit %s → %s: %v", jid, JobStateName(ch.To), err)
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
