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
	"google.golang.org/protobuf/encoding/protojson"
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

// The operators' tools (package admin) are tested in their own package;
// these tests make an operator's moves through what those tools call here.

// operatorMove moves the job jid, in state from, to `to` as an operator's
// move does (a hold, a release, a requeue to a named state): claimed by id,
// its batch pinned, committed fenced like a stage's step (moveJob).
func operatorMove(ctx context.Context, c *Client, jid string, from, to JobState, message string) (*v1.Job, error) {
	return c.moveJob(ctx, jid, []JobState{from}, func(*Claim) (Change, error) {
		return Change{To: to, Message: message}, nil
	})
}

// requeue resumes a failed job at the state after its last successful one,
// as an operator's requeue without a named state does.
func requeue(ctx context.Context, c *Client, jid, message string) (*v1.Job, error) {
	return c.moveJob(ctx, jid, []JobState{Failed}, func(cl *Claim) (Change, error) {
		return Change{To: ResumeState(cl.Job.GetStatus().GetLastSuccessfulStatus()), Message: message}, nil
	})
}

// pause and unpause write and remove the node that pauses the queue, as
// the operators' tools do.
func pause(t testing.TB, c *Client) {
	t.Helper()
	if err := c.ensure(testCtx(t), c.p.ingestPause()); err != nil {
		t.Fatalf("pausing: %v", err)
	}
}

func unpause(t testing.TB, c *Client) {
	t.Helper()
	if err := c.conn.Delete(c.p.ingestPause(), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("unpausing: %v", err)
	}
}

// storageLocks lists the storage locks held now, sorted.
func storageLocks(t testing.TB, c *Client) []string {
	t.Helper()
	names, _, err := c.children(testCtx(t), c.p.storageLocks())
	if err != nil {
		t.Fatalf("listing storage locks: %v", err)
	}
	slices.Sort(names)
	return names
}

// workerEntries reads every live worker entry; one gone while it is read
// is left out.
func workerEntries(t testing.TB, c *Client) []*v1.WorkerInfo {
	t.Helper()
	ctx := testCtx(t)
	names, _, err := c.children(ctx, c.p.workers())
	if err != nil {
		t.Fatalf("listing workers: %v", err)
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = c.p.worker(n)
	}
	datas, err := c.getMany(ctx, paths)
	if err != nil {
		t.Fatalf("reading worker entries: %v", err)
	}
	var out []*v1.WorkerInfo
	for i, d := range datas {
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
