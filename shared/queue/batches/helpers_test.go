package batches_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
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
func spawn(t testing.TB, s *session.Session, n int, priority int32) (string, []string) {
	t.Helper()
	ctx := testCtx(t)
	c := batches.New(s)
	bid, err := c.CreateBatch(ctx, sampleSubmission())
	if err != nil {
		t.Fatalf("create batch: %v", err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatalf("claim batch: %v", err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatalf("batch → Processing: %v", err)
	}
	news := make([]batches.NewJob, n)
	for i := range news {
		news[i] = batches.NewJob{Priority: priority, Configuration: &v1.JobConfiguration{
			ProfileName: "demo_profile", Submitter: "dana", PayloadUrl: "http://127.0.0.1:1/f.checkm",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
			WorkingDir: "/tmp/work", BatchEntry: int32(i)}}
	}
	jids, err := bc.CreateJobs(ctx, news)
	if err != nil {
		t.Fatalf("create jobs: %v", err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatalf("finish spawning: %v", err)
	}
	return bid, jids
}

// spawnWithUUID creates a batch submitted under uuid with one job and takes
// it to Processing, fully spawned.
func spawnWithUUID(t *testing.T, s *session.Session, uuid string) (string, string) {
	t.Helper()
	ctx := testCtx(t)
	c := batches.New(s)
	sub := sampleSubmission()
	sub.BatchId = uuid
	bid, err := c.CreateBatch(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	jids, err := bc.CreateJobs(ctx, []batches.NewJob{{Priority: 5, Configuration: &v1.JobConfiguration{ProfileName: "demo_profile",
		PayloadUrl: "http://127.0.0.1:1/a.txt", PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE, WorkingDir: "/tmp/work/x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	return bid, jids[0]
}

// step claims the job jid in its current state and commits ch.
func step(t testing.TB, s *session.Session, jid string, ch jobs.Change) {
	t.Helper()
	ctx := testCtx(t)
	cl, err := jobs.New(s).ClaimJob(ctx, jid)
	if err != nil {
		t.Fatalf("claim %s: %v", jid, err)
	}
	if err := cl.Commit(ctx, ch); err != nil {
		t.Fatalf("commit %s → %s: %v", jid, queue.JobStateName(ch.To), err)
	}
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

// nodeData reads one node (absolute path).
func nodeData(t testing.TB, s *session.Session, p string) string {
	t.Helper()
	data, _, err := s.Nodes().Get(testCtx(t), p)
	if err != nil {
		t.Fatalf("get %s: %v", p, err)
	}
	return string(data)
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

// answerCutter stands between a session and the server for its multis
// (session.Options.SendMulti) and loses the answers of chosen ones: the
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
	s, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second,
		SendMulti: ct.send})
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

func (ct *answerCutter) send(ops []any, send func([]any) ([]zk.MultiResponse, error)) ([]zk.MultiResponse, error) {
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
