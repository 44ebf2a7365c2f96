package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/notifier/internal/callback"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// receiver is a depositor's callback endpoint on loopback: it answers each
// POST with the next code of its script (the last one repeats).
type receiver struct {
	mu     sync.Mutex
	script []int
	bodies []map[string]any
	types  []string
	keys   []string // Idempotency-Key of each POST
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data, _ := io.ReadAll(req.Body)
	var body map[string]any
	if req.Method != http.MethodPost || json.Unmarshal(data, &body) != nil {
		http.Error(w, "want a JSON POST", http.StatusBadRequest)
		return
	}
	r.bodies = append(r.bodies, body)
	r.types = append(r.types, req.Header.Get("Content-Type"))
	r.keys = append(r.keys, req.Header.Get("Idempotency-Key"))
	code := r.script[min(len(r.bodies), len(r.script))-1]
	w.WriteHeader(code)
}

func (r *receiver) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

type env struct {
	q        *session.Session
	workRoot string
}

// start runs the notify stage with one profile, "demo", whose callback is
// callbackURL ("" for none), allowed to call back on loopback.
func start(t *testing.T, callbackURL string) *env {
	t.Helper()
	e := newEnv(t)
	e.run(t, callbackURL)
	return e
}

// newEnv is a queue and a work root, with no stage running yet.
func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{q: queuetest.Connect(t, zktest.Root(t)), workRoot: t.TempDir()}
}

// newNotifier is the notifier of one profile, "demo", whose callback is
// callbackURL ("" for none), allowed to call back on loopback, over the
// work root workRoot.
func newNotifier(t *testing.T, workRoot, callbackURL string) *Notifier {
	t.Helper()
	dir := t.TempDir()
	yaml := "name: demo\ncollection: demo\n"
	if callbackURL != "" {
		yaml += "callback_url: " + callbackURL + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "demo.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &Notifier{Profiles: set, WorkRoot: mustRoot(t, workRoot), Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		Callback:   callback.Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 3, Backoff: 10 * time.Millisecond, Max: time.Minute}, Timeout: 5 * time.Second},
		Redelivery: Redelivery{For: time.Hour, Backoff: 200 * time.Millisecond, Max: time.Second}}
}

// run runs the notify stage (see start).
func (e *env) run(t *testing.T, callbackURL string) {
	t.Helper()
	n := newNotifier(t, e.workRoot, callbackURL)
	r, err := stage.New(jobs.New(e.q), stage.Config{Service: "notifier", Name: "notifying", From: queue.Notify, To: queue.Completed, Handler: n.Handle})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Run(ctx)
	t.Cleanup(func() { cancel(); <-r.Done() })
}

const manifestURL = "file:///store/ark_99999_fk4x/v2/manifest.checkm"

// spawn puts a recorded job in Notify, with a working folder holding a file.
func (e *env) spawn(t *testing.T, profileName string) (jid, wd string) {
	t.Helper()
	wd = filepath.Join(e.workRoot, "bid", fmt.Sprint(time.Now().UnixNano()))
	if err := os.MkdirAll(filepath.Join(wd, "producer"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(wd, "producer", "a.txt"), []byte("a"), 0o644)
	jid = queuetest.Spawn(t, e.q, batches.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: profileName, WorkingDir: wd},
		Identifiers:   &v1.Identifiers{PrimaryId: "ark:/99999/fk4x", LocalId: []string{"loc001", "loc002"}},
	}, queue.Storing)
	queuetest.Move(t, e.q, jid, jobs.Change{To: queue.Recording,
		Store:     &v1.Store{ManifestUrl: manifestURL, Mode: "update", Version: 2},
		Inventory: &v1.Inventory{ManifestUrl: manifestURL, Mode: "update", Version: 2}})
	queuetest.Move(t, e.q, jid, jobs.Change{To: queue.Notify})
	return jid, wd
}

func (e *env) ended(t *testing.T, jid string) *v1.JobStatus {
	t.Helper()
	var st *v1.JobStatus
	queuetest.Eventually(t, jid+" leaves Notify", func() bool {
		st = queuetest.Status(t, e.q, jid)
		return st.GetStatus() != queue.Notify
	})
	return st
}

func TestACallbackIsDeliveredAndTheJobCompletes(t *testing.T) {
	rcv := &receiver{script: []int{200}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	e := start(t, srv.URL+"/ingest-callback")
	jid, wd := e.spawn(t, "demo")
	st := e.ended(t, jid)
	if st.GetStatus() != queue.Completed {
		t.Fatalf("job %s %q, want Completed", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if rcv.calls() != 1 || rcv.types[0] != "application/json" {
		t.Fatalf("%d callbacks (%v), want one JSON POST", rcv.calls(), rcv.types)
	}
	job, err := jobs.NewReader(e.q).GetJob(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"jid": jid, "bid": job.GetBid(), "ark": "ark:/99999/fk4x", "local_ids": []any{"loc001", "loc002"},
		"status": "completed", "version": float64(2), "manifest_url": manifestURL}
	got := rcv.bodies[0]
	if len(got) != len(want) {
		t.Errorf("callback body %v, want %v", got, want)
	}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("callback %s = %v, want %v", k, got[k], v)
		}
	}
	if _, err := os.Stat(wd); !os.IsNotExist(err) {
		t.Errorf("working folder still there: %v", err)
	}
	if !strings.Contains(st.GetMessage(), "working folder removed") {
		t.Errorf("message %q", st.GetMessage())
	}
	// The batch learns of it through its reference.
	counts, err := batches.New(e.q).BatchCounts(context.Background(), job.GetBid())
	if err != nil || counts.GetCompleted() != 1 || counts.GetProcessing() != 0 {
		t.Errorf("batch counts %v, %v; want one completed job", counts, err)
	}
}

func TestACallbackLeavesOutAVersionTheJobDoesNotSay(t *testing.T) {
	rcv := &receiver{script: []int{200}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	e := start(t, srv.URL+"/cb")
	// A peer processed the job and wrote no version: the manifest URL,
	// though it looks like the local store's, is not read for one.
	jid := queuetest.Spawn(t, e.q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"}}, queue.Recording)
	queuetest.Move(t, e.q, jid, jobs.Change{To: queue.Notify, Inventory: &v1.Inventory{ManifestUrl: manifestURL, Mode: "add"}})
	if st := e.ended(t, jid); st.GetStatus() != queue.Completed || rcv.calls() != 1 {
		t.Fatalf("job %s %q after %d calls, want Completed after 1", queue.JobStateName(st.GetStatus()), st.GetMessage(), rcv.calls())
	}
	if v, ok := rcv.bodies[0]["version"]; ok || rcv.bodies[0]["manifest_url"] != manifestURL {
		t.Errorf("callback body %v: want the manifest URL and no version (got %v)", rcv.bodies[0], v)
	}
}

// A receiver that fails (here three series of three attempts) leaves the
// job waiting in Notify, held by no notifier, its history saying why once;
// once the receiver answers, the callback is delivered under the job's key
// and the job completes.
func TestACallbackNotDeliveredYetWaitsInNotifyAndIsDeliveredOnceTheReceiverAnswers(t *testing.T) {
	rcv := &receiver{script: []int{500, 500, 500, 503, 503, 503, 500, 500, 500, 200}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	e := start(t, srv.URL+"/cb")
	jid, wd := e.spawn(t, "demo")
	st := e.ended(t, jid)
	if st.GetStatus() != queue.Completed || rcv.calls() != 10 {
		t.Fatalf("job %s %q after %d calls; want Completed after 10", queue.JobStateName(st.GetStatus()), st.GetMessage(), rcv.calls())
	}
	for _, k := range rcv.keys {
		if k != jid {
			t.Fatalf("Idempotency-Key of each post %v, want %s every time", rcv.keys, jid)
		}
	}
	// Its history: into Notify, a stay for each way the receiver failed
	// (500, then 503, then 500 again), none for an attempt that failed
	// as the one before, then Completed.
	var path []string
	for _, h := range st.GetHistory() {
		if h.GetFrom() == queue.Notify || h.GetTo() == queue.Notify {
			path = append(path, queue.JobStateName(h.GetFrom())+"→"+queue.JobStateName(h.GetTo())+": "+h.GetMessage())
		}
	}
	pending := "; pending: tried again for 1h0m0s from the first failure"
	want := []string{"Recording→Notify: ",
		"Notify→Notify: callback " + srv.URL + "/cb: HTTP 500 Internal Server Error after 3 attempts" + pending,
		"Notify→Notify: callback " + srv.URL + "/cb: HTTP 503 Service Unavailable after 3 attempts" + pending,
		"Notify→Notify: callback " + srv.URL + "/cb: HTTP 500 Internal Server Error after 3 attempts" + pending,
		"Notify→Completed: callback " + srv.URL + "/cb delivered; working folder removed"}
	if strings.Join(path, "\n") != strings.Join(want, "\n") {
		t.Errorf("history in and out of Notify:\n%s\nwant\n%s", strings.Join(path, "\n"), strings.Join(want, "\n"))
	}
	if _, err := os.Stat(wd); !os.IsNotExist(err) {
		t.Errorf("working folder still there: %v", err)
	}
}

// A receiver refusing the call as it is (a 4xx) fails the job; once the
// receiver is fixed, an operator requeues it to Notify.
func TestACallbackRefusedFailsTheJobAndAnAdminCanRetry(t *testing.T) {
	rcv := &receiver{script: []int{404}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	e := start(t, srv.URL+"/cb")
	jid, _ := e.spawn(t, "demo")
	st := e.ended(t, jid)
	want := "callback " + srv.URL + "/cb: HTTP 404 Not Found (refused, not retried)"
	if st.GetStatus() != queue.Failed || st.GetMessage() != want || rcv.calls() != 1 {
		t.Fatalf("job %s %q after %d calls; want Failed %q after 1", queue.JobStateName(st.GetStatus()), st.GetMessage(), rcv.calls(), want)
	}
	rcv.mu.Lock()
	rcv.script = []int{404, 200}
	rcv.mu.Unlock()
	if _, err := admin.New(e.q).Jobs.Requeue(context.Background(), jid, 0, "receiver fixed"); err != nil {
		t.Fatal(err)
	}
	st = e.ended(t, jid)
	if st.GetStatus() != queue.Completed || st.GetRetryCount() != 1 {
		t.Errorf("after the resume: %s retry_count %d, want Completed with 1", queue.JobStateName(st.GetStatus()), st.GetRetryCount())
	}
}

// TestAJobNamingABatchThatDoesNotExistIsFailedNotRetriedForEver: another
// writer put a job in Notify whose bid names no batch. Completing it would
// move its reference in that batch; the notifier fails it once, with a
// message naming the batch, instead of trying again every second, and fsck
// reports it.
func TestAJobNamingABatchThatDoesNotExistIsFailedNotRetriedForEver(t *testing.T) {
	e := newEnv(t)
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	acl := zk.WorldACL(zk.PermAll)
	jobs := e.q.Paths().Root() + "/jobs"
	created, err := conn.Create(jobs+"/jid", nil, zk.FlagSequence, acl)
	if err != nil {
		t.Fatal(err)
	}
	jid := path.Base(created)
	for node, data := range map[string]string{
		"bid":           "bid9999999999",
		"priority":      "5",
		"space_needed":  "0",
		"configuration": `{"profile_name":"demo","submitter":"jdoe","payload_url":"http://127.0.0.1/x","payload_type":"file"}`,
		"status":        `{"status":"Notify","last_modified":"2026-11-22 03:51:07 +0000","message":"","last_successful_status":"Recording","retry_count":0}`,
	} {
		if _, err := conn.Create(created+"/"+node, []byte(data), 0, acl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Create(jobs+"/states/notify/05-"+jid, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	e.run(t, "")
	st := e.ended(t, jid)
	if st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "its batch bid9999999999 does not exist") ||
		!strings.Contains(st.GetMessage(), "cannot go on to Completed") {
		t.Errorf("job %s %q", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	rep, err := admin.New(e.q).Queue.Fsck(context.Background(), admin.FsckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Damages) != 1 || rep.Damages[0].Kind != admin.DamageJobNoBatch || rep.Damages[0].Item != jid {
		t.Errorf("fsck: %+v", rep.Damages)
	}
}

func mustRoot(t *testing.T, dir string) workdir.Root {
	t.Helper()
	r, err := workdir.At(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
