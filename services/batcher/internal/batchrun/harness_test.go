package batchrun

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/internal/mail"
	"github.com/ingestq/ingestq/services/batcher/internal/smtptest"
	"github.com/ingestq/ingestq/services/batcher/internal/spawn"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// The profiles every test uses: "demo" mails on queueing, "quiet" does not.
const profilesYAML = `name: demo
collection: demo_coll
owner: ark:/99999/fk4owner
notification_addresses: [depositor@example.org]
priority: 7
notify_on_queue: true
storage_target: local
`

const quietYAML = `name: quiet
collection: quiet_coll
owner: ark:/99999/fk4owner
notification_addresses: [quiet@example.org]
priority: 5
notify_on_queue: false
storage_target: local
`

// depositor serves manifests and files on loopback; "{{base}}" in a
// document is replaced by the server's URL.
type depositor struct {
	srv   *httptest.Server
	mu    sync.Mutex
	docs  map[string]string
	gets  map[string]int
	fails map[string]int // path → status to answer instead
}

func newDepositor(t *testing.T) *depositor {
	d := &depositor{docs: map[string]string{}, gets: map[string]int{}, fails: map[string]int{}}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		doc, ok := d.docs[r.URL.Path]
		code := d.fails[r.URL.Path]
		d.gets[r.URL.Path]++
		d.mu.Unlock()
		switch {
		case code != 0:
			http.Error(w, "failing on purpose", code)
		case !ok:
			http.NotFound(w, r)
		default:
			w.Write([]byte(doc))
		}
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *depositor) put(path, doc string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.docs[path] = strings.ReplaceAll(doc, "{{base}}", d.srv.URL)
	return d.srv.URL + path
}

func (d *depositor) url(path string) string { return d.srv.URL + path }

func (d *depositor) fetches(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gets[path]
}

// harness is one Batcher against a private ZooKeeper root, with a
// depositor's HTTP server and an SMTP server on loopback.
type harness struct {
	t        *testing.T
	servers  []string
	zkRoot   string
	q        *session.Session
	root     workdir.Root
	smtp     *smtptest.Server
	dep      *depositor
	profiles *profile.Set
	cfg      Config
	// spans holds every span the batchers ended.
	spans *tracetest.InMemoryExporter
	// tel holds the batchers' metrics.
	tel *telemetry.Telemetry
	// session is the session timeout of the sessions connect opens. The
	// client drops a connection that answers nothing for two thirds of
	// it, so a test that keeps ZooKeeper writing megabytes at a time on a
	// loaded machine sets a longer one, as a deployment under such load
	// would.
	session time.Duration
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, servers: zktest.Servers(t), zkRoot: zktest.Root(t), smtp: smtptest.Start(t), dep: newDepositor(t)}
	h.q = h.connect()
	dir := t.TempDir()
	for name, y := range map[string]string{"demo.yaml": profilesYAML, "quiet.yaml": quietYAML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if h.profiles, err = profile.Load(dir); err != nil {
		t.Fatal(err)
	}
	if h.root, err = workdir.Open(filepath.Join(t.TempDir(), "work")); err != nil {
		t.Fatal(err)
	}
	// The depositor's own address is allowed, as an operator would allow
	// one server; the other internal addresses stay denied.
	allow, err := fetch.ParseAllow("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	policy := fetch.Policy{Allow: allow, AllowSetting: "INGESTQ_FETCH_ALLOW"}
	h.cfg = Config{
		Profiles: h.profiles,
		Planner: &spawn.Planner{Fetcher: fetch.New(policy), Policy: policy, Limits: checkm.Limits{MaxBytes: 4 << 20},
			Root: h.root, Retry: retry.Policy{Attempts: 2, Backoff: 10 * time.Millisecond}},
		Mail:      &mail.SMTP{Addr: h.smtp.Addr, From: "ingestq <ingestq@localhost>"},
		Logger:    slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MailRetry: 50 * time.Millisecond,
	}
	h.spans = tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	h.cfg.Tracer = provider.Tracer("batcher")
	tel, err := telemetry.Setup(context.Background(), "batcher-test", "v0", telemetry.WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	h.tel, h.cfg.Metrics = tel, tel.Metrics
	return h
}

// connect opens a new session on the harness's root, with a session
// timeout of h.session (4 s when unset).
func (h *harness) connect() *session.Session {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sessionTimeout := cmp.Or(h.session, 4*time.Second)
	q, err := session.Connect(ctx, session.Options{Servers: h.servers, Root: h.zkRoot, SessionTimeout: sessionTimeout,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(q.Close)
	return q
}

// start runs a batcher on its own session until the test ends.
func (h *harness) start() *Batcher {
	h.t.Helper()
	cfg := h.cfg
	cfg.Session = h.connect()
	r := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	h.t.Cleanup(func() {
		cancel()
		r.Abort()
		<-done
	})
	return r
}

// submit writes a pending batch as BatchService would.
func (h *harness) submit(profileName, payloadURL string, t v1.PayloadType) string {
	h.t.Helper()
	bid, err := batches.New(h.q).CreateBatch(context.Background(), &v1.Submission{
		ProfileName: profileName, Submitter: "jdoe", PayloadUrl: payloadURL, Type: t,
		SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
		Metadata:       &v1.Metadata{Who: "Hale, Margaret", What: "Letters", When: "1921"},
		BatchId:        h.t.Name() + "-" + time.Now().Format("150405.000000000"),
		Traceparent:    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return bid
}

// waitForRoom waits until the batch waits in Pending for room in the queue,
// saying so, and returns it.
func (h *harness) waitForRoom(bid string) *v1.Batch {
	h.t.Helper()
	var b *v1.Batch
	waittest.Until(h.t, 30*time.Second, func() error {
		if b = h.waitBatch(bid, queue.BatchPending); !strings.Contains(b.GetStatus().GetMessage(), "waiting for room") {
			return fmt.Errorf("batch %s never said it waits for room: %v", bid, b.GetStatus())
		}
		return nil
	})
	return b
}

// waitBatch waits until the batch is in state (and unlocked) and returns it.
func (h *harness) waitBatch(bid string, state queue.BatchState) *v1.Batch {
	h.t.Helper()
	var b *v1.Batch
	waittest.Until(h.t, 30*time.Second, func() error {
		var err error
		if b, err = batches.New(h.q).GetBatch(context.Background(), bid); err != nil {
			h.t.Fatal(err)
		}
		if b.GetStatus().GetStatus() != state || b.GetLocked() {
			return fmt.Errorf("batch %s is %s (%q, locked %v), want %s", bid, queue.BatchStateName(b.GetStatus().GetStatus()),
				b.GetStatus().GetMessage(), b.GetLocked(), queue.BatchStateName(state))
		}
		return nil
	})
	return b
}

// jobs returns the batch's jobs in batch-entry order, with their manifests.
func (h *harness) jobs(bid string) []*v1.Job {
	h.t.Helper()
	ctx := context.Background()
	var out []*v1.Job
	token := ""
	for {
		page, next, err := jobs.NewReader(h.q).ListJobs(ctx, jobs.JobFilter{Batch: bid, PageSize: 1000, PageToken: token})
		if err != nil {
			h.t.Fatal(err)
		}
		for _, j := range page {
			if j.Manifest, err = jobs.NewReader(h.q).GetManifest(ctx, j.GetId()); err != nil {
				h.t.Fatal(err)
			}
		}
		out = append(out, page...)
		if token = next; token == "" {
			break
		}
	}
	byEntry := make([]*v1.Job, len(out))
	for _, j := range out {
		e := j.GetConfiguration().GetBatchEntry()
		if int(e) >= len(out) || byEntry[e] != nil {
			h.t.Fatalf("batch %s: job %s has batch_entry %d: entries are not 0..%d, each once", bid, j.GetId(), e, len(out)-1)
		}
		byEntry[e] = j
	}
	return byEntry
}

// finish drives a job from Pending to Completed (or to Failed with
// failMsg), standing in for the other stages, and gives it an ARK.
func (h *harness) finish(jid, ark, failMsg string) {
	h.t.Helper()
	ctx := context.Background()
	path := []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording,
		queue.Notify, queue.Completed}
	for _, to := range path {
		cl, err := jobs.New(h.q).ClaimJob(ctx, jid)
		if err != nil {
			h.t.Fatal(err)
		}
		if failMsg != "" && to == queue.Processing {
			if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: failMsg}); err != nil {
				h.t.Fatal(err)
			}
			return
		}
		ch := jobs.Change{To: to}
		if to == queue.Storing {
			ids := cl.Job.GetIdentifiers()
			if ids == nil {
				ids = &v1.Identifiers{}
			}
			ids.PrimaryId = ark
			ch.Identifiers = ids
		}
		if err := cl.Commit(ctx, ch); err != nil {
			h.t.Fatal(err)
		}
	}
}

// resume drives a requeued job (at Estimating) on to Completed.
func (h *harness) resume(jid, ark string) {
	h.t.Helper()
	ctx := context.Background()
	for {
		st, err := jobs.NewReader(h.q).JobStatus(ctx, jid)
		if err != nil {
			h.t.Fatal(err)
		}
		if st.GetStatus() == queue.Completed {
			return
		}
		next := map[queue.JobState]queue.JobState{queue.Pending: queue.Estimating, queue.Estimating: queue.Provisioning,
			queue.Provisioning: queue.Downloading, queue.Downloading: queue.Processing, queue.Processing: queue.Storing,
			queue.Storing: queue.Recording, queue.Recording: queue.Notify, queue.Notify: queue.Completed}[st.GetStatus()]
		cl, err := jobs.New(h.q).ClaimJob(ctx, jid)
		if err != nil {
			h.t.Fatal(err)
		}
		ch := jobs.Change{To: next}
		if next == queue.Storing {
			ch.Identifiers = &v1.Identifiers{PrimaryId: ark, LocalId: cl.Job.GetIdentifiers().GetLocalId()}
		}
		if err := cl.Commit(ctx, ch); err != nil {
			h.t.Fatal(err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
