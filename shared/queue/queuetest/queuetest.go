// Package queuetest puts jobs into a real queue (the test ZooKeeper of
// zktest) in the state a test needs, as the batcher and the stages before
// would, and reads and waits on them. It goes through the public queue API
// only, so what a test sets up is what a service would meet.
package queuetest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// Profile is the profile (and collection) of a job whose configuration
// names none: the repository's sample profile, examples/profiles/demo.yaml.
const Profile = "demo"

// Wait bounds every wait of this package: Eventually and WaitState fail the
// test after it.
const Wait = 30 * time.Second

// Connect opens a queue client on root of the test ZooKeeper, closed when
// the test ends. Its session timeout is short (4 s) so that tests of lost
// sessions end soon.
func Connect(t testing.TB, root string) *session.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	q, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

// ConnectThroughProxy opens a queue client on root of the test ZooKeeper
// through a zktest.Proxy, both closed when the test ends, so that the test
// can slow or cut this client's traffic alone; timeout is the client's
// session timeout.
func ConnectThroughProxy(t testing.TB, root string, timeout time.Duration) (*session.Session, *zktest.Proxy) {
	t.Helper()
	proxy, err := zktest.NewProxy(zktest.Servers(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	q, err := session.Connect(ctx, session.Options{Servers: []string{proxy.Addr}, Root: root, SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q, proxy
}

// Spawn creates a batch of one job holding j's data and walks the job to
// state to (Pending or a later state of the successful path); see SpawnN.
func Spawn(t testing.TB, q *session.Session, j batches.NewJob, to queue.JobState) string {
	t.Helper()
	return SpawnN(t, q, []batches.NewJob{j}, to)[0]
}

// SpawnN creates one batch with these jobs, in order, and walks each to
// state to (Pending or a later state of the successful path, one commit per
// state as the stages would make). It returns the jobs' ids. The jobs'
// configurations are filled as Submit fills them.
func SpawnN(t testing.TB, q *session.Session, news []batches.NewJob, to queue.JobState) []string {
	t.Helper()
	steps := pathTo(t, to)
	_, jids, err := Submit(context.Background(), q, news)
	if err != nil {
		t.Fatal(err)
	}
	for _, jid := range jids {
		for _, s := range steps {
			Move(t, q, jid, WithProducts(jobs.Change{To: s}))
		}
	}
	return jids
}

// Submit does what the batcher does with a submission: one batch is
// created Pending, claimed, moved to Processing, given these jobs (each in
// /jobs, in its Pending entry and in its batch's references in one atomic
// operation), and let go. It returns the batch's id and the jobs' ids, in
// order. It reports errors rather than failing a test, so that Examples,
// which have no testing.T, use it too.
//
// A job's configuration is filled as the batcher fills it: batch_entry is
// its index, profile_name defaults to Profile and collection to the profile
// name. The priority is taken as given (0 is a valid priority).
func Submit(ctx context.Context, q *session.Session, news []batches.NewJob) (bid string, jids []string, err error) {
	for i := range news {
		if news[i].Configuration == nil {
			news[i].Configuration = &v1.JobConfiguration{}
		}
		c := news[i].Configuration
		c.BatchEntry = int32(i)
		if c.ProfileName == "" {
			c.ProfileName = Profile
		}
		if c.Collection == "" {
			c.Collection = c.ProfileName
		}
	}
	profile := Profile
	if len(news) > 0 {
		profile = news[0].Configuration.ProfileName
	}
	// An unreachable payload: the jobs are made here, not by a batcher.
	bid, err = batches.New(q).CreateBatch(ctx, &v1.Submission{ProfileName: profile, Collection: profile, Submitter: "queuetest",
		PayloadUrl: "http://127.0.0.1:1/batch.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
	if err != nil {
		return "", nil, fmt.Errorf("queuetest: creating a batch: %w", err)
	}
	bc, err := batches.New(q).ClaimBatch(ctx, bid)
	if err != nil {
		return "", nil, fmt.Errorf("queuetest: claiming batch %s: %w", bid, err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		return "", nil, fmt.Errorf("queuetest: batch %s to Processing: %w", bid, err)
	}
	jids, err = bc.CreateJobs(ctx, news)
	if err != nil {
		return "", nil, fmt.Errorf("queuetest: creating the jobs of batch %s: %w", bid, err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		return "", nil, fmt.Errorf("queuetest: letting batch %s go: %w", bid, err)
	}
	return bid, jids, nil
}

// Open connects to the test ZooKeeper (see zktest.Main) under a root of its
// own, for Examples, which have no testing.T: ids count from zero there
// whatever else the server holds. The caller closes the client. A service
// connects the same way with its INGESTQ_ZK_SERVERS and INGESTQ_ZK_ROOT.
func Open(ctx context.Context) (*session.Session, error) {
	servers := os.Getenv(zktest.EnvServers)
	if servers == "" {
		return nil, fmt.Errorf("queuetest: %s is not set: call zktest.Main from TestMain", zktest.EnvServers)
	}
	return session.Connect(ctx, session.Options{
		Servers: strings.Split(servers, ","),
		Root:    fmt.Sprintf("/examples/%d", time.Now().UnixNano()),
	})
}

// pathTo is the states a new job commits to on its way to state to: the
// successful path after Pending.
func pathTo(t testing.TB, to queue.JobState) []queue.JobState {
	t.Helper()
	if to == queue.Pending {
		return nil
	}
	path := append(queue.StageStates()[1:], queue.Completed)
	for i, s := range path {
		if s == to {
			return path[:i+1]
		}
	}
	t.Fatalf("queuetest: a new job cannot be walked to %s: it is not on the successful path", queue.JobStateName(to))
	return nil
}

// WithProducts adds to a step what the pipeline's step writes with it:
// processing's store on the move to Storing, storing's inventory on the
// move to Recording (what a requeue to those states, and fsck, look for).
func WithProducts(ch jobs.Change) jobs.Change {
	switch ch.To {
	case queue.Storing:
		if ch.Store == nil {
			ch.Store = &v1.Store{ManifestUrl: "file:///store/manifest.checkm", Mode: "add"}
		}
	case queue.Recording:
		if ch.Inventory == nil {
			ch.Inventory = &v1.Inventory{ManifestUrl: "file:///store/manifest.checkm", Mode: "add", Version: 1}
		}
	}
	return ch
}

// Move claims a job by id, as an admin would, and commits ch.
func Move(t testing.TB, q *session.Session, jid string, ch jobs.Change) {
	t.Helper()
	ctx := context.Background()
	cl := Claim(t, q, jid)
	if err := cl.Commit(ctx, ch); err != nil {
		t.Fatalf("moving %s to %s: %v", jid, queue.JobStateName(ch.To), err)
	}
}

// Claim takes the job by id with all of its data, as a stage would; the
// test commits or releases it.
func Claim(t testing.TB, q *session.Session, jid string) *jobs.Claim {
	t.Helper()
	cl, err := jobs.New(q).ClaimJob(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Status reads a job's status.
func Status(t testing.TB, q *session.Session, jid string) *v1.JobStatus {
	t.Helper()
	st, err := jobs.NewReader(q).JobStatus(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Eventually waits until cond holds, failing the test with what after
// Wait.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waittest.True(t, Wait, what, cond)
}

// WaitState waits until the job is in state and returns it with all of its
// data; after Wait the test fails naming the state and message the job is
// in instead.
func WaitState(t testing.TB, q *session.Session, jid string, state queue.JobState) *v1.Job {
	t.Helper()
	var job *v1.Job
	waittest.Until(t, Wait, func() error {
		var err error
		if job, err = jobs.NewReader(q).GetJob(context.Background(), jid); err != nil {
			t.Fatal(err)
		}
		if job.GetStatus().GetStatus() != state {
			return fmt.Errorf("%s is %s (%q), never %s", jid, queue.JobStateName(job.GetStatus().GetStatus()),
				job.GetStatus().GetMessage(), queue.JobStateName(state))
		}
		return nil
	})
	return job
}

// CompleteBatch takes a batch whose jobs have all ended through Reporting
// to Completed, as the batcher would.
func CompleteBatch(t testing.TB, q *session.Session, bid string) {
	t.Helper()
	ctx := context.Background()
	bc, err := batches.New(q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true}, {To: queue.BatchCompleted}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatalf("batch %s to %s: %v", bid, queue.BatchStateName(ch.To), err)
		}
	}
}

// ClaimedBatch creates a batch (a manifest of manifests), claims it and
// commits ch, as the batcher does before its jobs are made. It returns the
// batch's id and the claim.
func ClaimedBatch(t testing.TB, q *session.Session, ch batches.BatchChange) (string, *batches.BatchClaim) {
	t.Helper()
	ctx := context.Background()
	bid, err := batches.New(q).CreateBatch(ctx, &v1.Submission{ProfileName: "demo_profile", Submitter: "dana",
		PayloadUrl: "http://127.0.0.1:1/manifest.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := batches.New(q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, ch); err != nil {
		t.Fatal(err)
	}
	return bid, bc
}

// SpawningBatch makes a batch whose jobs are being spawned (claimed, in
// Processing), and n jobs for it, not yet created.
func SpawningBatch(t testing.TB, q *session.Session, n int) (*batches.BatchClaim, []batches.NewJob) {
	t.Helper()
	_, bc := ClaimedBatch(t, q, batches.BatchChange{To: queue.BatchProcessing})
	news := make([]batches.NewJob, n)
	for i := range news {
		news[i] = batches.NewJob{Priority: queue.DefaultPriority, Configuration: &v1.JobConfiguration{
			ProfileName: "demo_profile", Submitter: "dana", PayloadUrl: "http://127.0.0.1:1/f.checkm",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
			BatchEntry: int32(i)}}
	}
	return bc, news
}

// SampleSubmission is a deposit as a depositor makes it: a manifest of
// manifests of the demo profile, with its ERC metadata.
func SampleSubmission() *v1.Submission {
	return &v1.Submission{
		ProfileName:    "demo_profile",
		Submitter:      "dana",
		PayloadUrl:     "http://127.0.0.1:1/manifest.checkm",
		Type:           v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
		Metadata:       &v1.Metadata{Who: "Dana", What: "Letters", When: "1921", Where: ""},
	}
}

// SpawnBatch makes a batch of SampleSubmission with n Pending object
// manifests of the given priority, fully spawned, as the batcher would. It
// returns the batch's id and the jobs' ids, in order.
func SpawnBatch(t testing.TB, q *session.Session, n int, priority int32) (string, []string) {
	t.Helper()
	news := make([]batches.NewJob, n)
	for i := range news {
		news[i] = batches.NewJob{Priority: priority, Configuration: &v1.JobConfiguration{
			ProfileName: "demo_profile", Submitter: "dana", PayloadUrl: "http://127.0.0.1:1/f.checkm",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
			WorkingDir: "/tmp/work", BatchEntry: int32(i)}}
	}
	return spawnBatch(t, q, SampleSubmission(), news)
}

// SpawnWithUUID makes a batch submitted under the depositor's uuid with one
// Pending file, fully spawned. It returns the batch's id and the job's.
func SpawnWithUUID(t testing.TB, q *session.Session, uuid string) (string, string) {
	t.Helper()
	sub := SampleSubmission()
	sub.BatchId = uuid
	bid, jids := spawnBatch(t, q, sub, []batches.NewJob{{Priority: 5, Configuration: &v1.JobConfiguration{ProfileName: "demo_profile",
		PayloadUrl: "http://127.0.0.1:1/a.txt", PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE, WorkingDir: "/tmp/work/x"}}})
	return bid, jids[0]
}

// spawnBatch creates a batch of sub, takes it to Processing, creates news
// in it and finishes spawning.
func spawnBatch(t testing.TB, q *session.Session, sub *v1.Submission, news []batches.NewJob) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	c := batches.New(q)
	bid, err := c.CreateBatch(ctx, sub)
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
	jids, err := bc.CreateJobs(ctx, news)
	if err != nil {
		t.Fatalf("create jobs: %v", err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatalf("finish spawning: %v", err)
	}
	return bid, jids
}

// NodeData reads the node at the absolute path p.
func NodeData(t testing.TB, q *session.Session, p string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	data, _, err := q.Nodes().Get(ctx, p)
	if err != nil {
		t.Fatalf("get %s: %v", p, err)
	}
	return string(data)
}

// JSONField reads one field of a JSON node as raw JSON text, failing the
// test when the node is not JSON or has no such field.
func JSONField(t testing.TB, data, field string) string {
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

// RequestCounts is what s sent to ZooKeeper by operation and node, and in
// all: a multi or a multiRead is one request, whatever it holds.
func RequestCounts(s *session.Session) (map[string]int64, int64) {
	byOp, sent := map[string]int64{}, int64(0)
	for _, r := range s.Requests() {
		byOp[r.Op+" "+r.Node] += r.Count
		if !strings.Contains(r.Op, ".") {
			sent += r.Count
		}
	}
	return byOp, sent
}
