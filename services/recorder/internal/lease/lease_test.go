package lease

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/zktest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func recordingJob(t *testing.T, q *session.Session, ark string, inventory *v1.Inventory) string {
	t.Helper()
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: ark}}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording, Inventory: inventory})
	return jid
}

// leaseOne puts a job in Recording and leases it from m for a minute,
// failing the test unless m leases that job.
func leaseOne(t *testing.T, m *Manager, q *session.Session) *Lease {
	t.Helper()
	jid := recordingJob(t, q, "ark:/99999/fk4x", &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"})
	l, err := m.Lease(context.Background(), 10*time.Second, time.Minute)
	if err != nil || l == nil || l.JobID != jid {
		t.Fatalf("Lease = %v, %v", l, err)
	}
	return l
}

// start runs a manager on q until the test ends.
func start(t testing.TB, q *session.Session, opts Options) *Manager {
	t.Helper()
	m, err := New(jobs.New(q), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	t.Cleanup(func() {
		drainCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		m.Drain(drainCtx)
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return m
}

// meteredManager is a manager on q whose metrics the test reads with
// metricsText; its spans stay in memory.
func meteredManager(t *testing.T, q *session.Session) (*Manager, *telemetry.Telemetry) {
	t.Helper()
	tel, err := telemetry.Setup(context.Background(), "recorder-test", "v0", telemetry.WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	return start(t, q, Options{Metrics: tel.Metrics}), tel
}

func TestDrainEndsWaitingCallsAndGivesBackLeasesAtTheDeadline(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	m := start(t, q, Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x", &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"})
	l, err := m.Lease(context.Background(), 10*time.Second, time.Hour)
	if err != nil || l == nil || l.JobID != jid {
		t.Fatalf("Lease = %v, %v", l, err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := m.Lease(context.Background(), time.Minute, time.Hour)
		waiting <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if left := m.Drain(ctx); left != 1 {
		t.Errorf("Drain gave back %d leases, want 1", left)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrStopping) {
			t.Errorf("a waiting Lease ended with %v, want ErrStopping", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting Lease did not end when the manager drained")
	}
	if err := m.Complete(context.Background(), l.ID); !errors.Is(err, ErrEnded) {
		t.Errorf("Complete after Drain: %v, want ErrEnded", err)
	}
	if job, _ := jobs.NewReader(q).GetJob(context.Background(), jid); job.GetLocked() || job.GetStatus().GetStatus() != queue.Recording {
		t.Errorf("job after Drain: locked=%v %s; want free in Recording", job.GetLocked(), queue.JobStateName(job.GetStatus().GetStatus()))
	}
	if _, err := m.Lease(context.Background(), 0, 0); !errors.Is(err, ErrStopping) {
		t.Errorf("Lease after Drain: %v", err)
	}
	if w := m.Status(); len(w.GetInFlight()) != 0 || w.GetOutcomes()["released"] != 1 || !w.GetDraining() {
		t.Errorf("status after Drain: %v", w)
	}
}

func TestALeaseThatDoesNotWaitTakesAJobFreeNow(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	m := start(t, q, Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x", &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"})
	l, err := m.Lease(context.Background(), 0, time.Minute)
	if err != nil || l == nil || l.JobID != jid {
		t.Fatalf("Lease without waiting = %v, %v; want the free job %s", l, err, jid)
	}
	if l, err := m.Lease(context.Background(), 0, time.Minute); err != nil || l != nil {
		t.Errorf("Lease without waiting on a queue with no free job = %v, %v; want none at once", l, err)
	}
}

func TestAJobProcessingDidNotFinishIsFailedNotLeased(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	m := start(t, q, Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x", nil)
	l, err := m.Lease(context.Background(), 500*time.Millisecond, time.Minute)
	if err != nil || l != nil {
		t.Fatalf("Lease = %v, %v; want none", l, err)
	}
	st := queuetest.Status(t, q, jid)
	if st.GetStatus() != queue.Failed || st.GetMessage() != "cannot record: the job has no inventory manifest_url; processing did not finish" {
		t.Errorf("job %s %q", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	// The recorder failed the job: a step of the stage, counted as any.
	if w := m.Status(); w.GetOutcomes()["failed"] != 1 || len(w.GetInFlight()) != 0 {
		t.Errorf("status after failing the job: %v, want one failed", w)
	}
}

// TestALeaseIsCountedAsItsCommitEnded: a completed lease whose job's batch
// was deleted meanwhile fails the job (the queue will not move it on): the
// lease and the step count as failed, as a stage runner counts such a
// commit, not as completed.
func TestALeaseIsCountedAsItsCommitEnded(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	m, tel := meteredManager(t, q)
	l := leaseOne(t, m, q)
	jid := l.JobID
	zktest.DeleteTree(t, zktest.RawConn(t), root+"/batches/"+l.BatchID)

	var nb *queue.NoBatchError
	if err := m.Complete(context.Background(), l.ID); !errors.As(err, &nb) || !nb.Failed {
		t.Fatalf("Complete of a job whose batch is gone: %v, want the job failed instead", err)
	}
	if st := queuetest.Status(t, q, jid); st.GetStatus() != queue.Failed {
		t.Errorf("job %s %q, want Failed", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if o := m.Status().GetOutcomes(); o["failed"] != 1 || o["advanced"] != 0 {
		t.Errorf("outcomes %v, want the lease counted as failed", o)
	}
	text := metricsText(t, tel)
	for _, want := range []string{`ingestq_leases_total{outcome="failed"} 1`, `ingestq_jobs_handled_total{outcome="failed",stage="recording"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in\n%s", want, text)
		}
	}
	if strings.Contains(text, `outcome="completed"`) || strings.Contains(text, `outcome="advanced"`) {
		t.Errorf("the failed job counted as completed:\n%s", text)
	}
	if err := m.Complete(context.Background(), l.ID); !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "the job was failed") {
		t.Errorf("Complete again: %v, want ErrEnded saying the job was failed", err)
	}
}

// TestALeaseIsTheRecordingSpanOfItsJobsTrace: the lease's span continues
// the trace the job carries, and says how the lease ended.
func TestALeaseIsTheRecordingSpanOfItsJobsTrace(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	m := start(t, q, Options{Tracer: tp.Tracer("test")})
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4t"},
		Configuration: &v1.JobConfiguration{Traceparent: traceparent}}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"}})
	l, err := m.Lease(context.Background(), 10*time.Second, time.Minute)
	if err != nil || l == nil {
		t.Fatalf("Lease = %v, %v", l, err)
	}
	if got := telemetry.TraceID(l.Traceparent); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("lease traceparent %q is not in the job's trace", l.Traceparent)
	}
	// The caller's calls are spans of a trace of its own: the lease's
	// calls still join the job's.
	_, caller := tp.Tracer("caller").Start(context.Background(), "caller")
	callerCtx := trace.ContextWithSpan(context.Background(), caller)
	if _, err := m.Renew(callerCtx, l.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := m.Complete(callerCtx, l.ID); err != nil {
		t.Fatal(err)
	}
	caller.End()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	sp, ok := byName["recording "+jid]
	if !ok {
		t.Fatalf("no recording span among %v", byName)
	}
	for _, call := range []string{"renew ", "complete "} {
		c, ok := byName[call+jid]
		if !ok {
			t.Errorf("no %s span among %v", call+jid, byName)
			continue
		}
		if c.Parent.SpanID() != sp.SpanContext.SpanID() || c.SpanContext.TraceID() != sp.SpanContext.TraceID() {
			t.Errorf("%s span: parent %s in trace %s, want the lease's span %s", call, c.Parent.SpanID(), c.SpanContext.TraceID(), sp.SpanContext.SpanID())
		}
		if len(c.Links) != 1 || c.Links[0].SpanContext.SpanID() != caller.SpanContext().SpanID() {
			t.Errorf("%s span links %v, want the caller's span", call, c.Links)
		}
	}
	if l.Traceparent != telemetry.Inject(trace.ContextWithSpanContext(context.Background(), sp.SpanContext)) {
		t.Errorf("lease traceparent %q is not the lease span's", l.Traceparent)
	}
	if sp.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sp.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span in trace %s with parent %s, want the job's", sp.SpanContext.TraceID(), sp.Parent.SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range sp.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["ingestq.stage"] != "recording" || attrs["ingestq.job.id"] != jid || attrs["ingestq.outcome"] != "advanced" {
		t.Errorf("span attributes %v", attrs)
	}
}

// metricsText is what a scrape of tel's /metrics answers.
func metricsText(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

func TestLeasesAreCountedByHowTheyEnded(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	m, tel := meteredManager(t, q)
	for _, ark := range []string{"ark:/99999/fk4a", "ark:/99999/fk4b"} {
		jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: ark}, Configuration: &v1.JobConfiguration{}}, queue.Storing)
		queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"}})
	}
	done, err := m.Lease(context.Background(), 10*time.Second, time.Minute)
	if err != nil || done == nil {
		t.Fatalf("Lease = %v, %v", done, err)
	}
	if err := m.Complete(context.Background(), done.ID); err != nil {
		t.Fatal(err)
	}
	short, err := m.Lease(context.Background(), 10*time.Second, 50*time.Millisecond)
	if err != nil || short == nil {
		t.Fatalf("Lease = %v, %v", short, err)
	}
	queuetest.Eventually(t, "the short lease expires and is counted", func() bool {
		return strings.Contains(metricsText(t, tel), `ingestq_leases_total{outcome="expired"} 1`)
	})
	if text := metricsText(t, tel); !strings.Contains(text, `ingestq_leases_total{outcome="completed"} 1`) {
		t.Errorf("no completed lease counted:\n%s", text)
	}
}

// TestALeaseWhoseCommitIsFencedCountsAsLost: a writer that ignores locks
// (a peer's admin failing the job) changes the job under its lease; the
// Complete that follows is refused, and the lease counts as lost, its step
// as fenced, not as completed.
func TestALeaseWhoseCommitIsFencedCountsAsLost(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	m, tel := meteredManager(t, q)
	l := leaseOne(t, m, q)
	jid := l.JobID
	failed := `{"status":"Failed","last_modified":"2026-11-22 03:51:07 +0000","message":"failed by an administrator","last_successful_status":"Storing","retry_count":0}`
	zktest.WriteNode(t, zktest.RawConn(t), root+"/jobs/"+jid+"/status", failed)
	if err := m.Complete(context.Background(), l.ID); !errors.Is(err, ErrEnded) {
		t.Fatalf("Complete after the peer's write: %v, want ErrEnded", err)
	}
	if o := m.Status().GetOutcomes(); o["fenced"] != 1 || o["advanced"] != 0 {
		t.Errorf("outcomes %v, want the lease counted as fenced", o)
	}
	text := metricsText(t, tel)
	if !strings.Contains(text, `ingestq_leases_total{outcome="lost"} 1`) || strings.Contains(text, `outcome="completed"`) {
		t.Errorf("the lease is not counted as lost:\n%s", text)
	}
}

// TestDrainWaitsForTheCommitOfACompletedLease: a lease being completed is
// in flight until its commit ends, so a drain that answers "none left"
// answers after the job moved on (the manager's ZooKeeper traffic is slowed
// so that the commit is still on its way when the drain begins).
func TestDrainWaitsForTheCommitOfACompletedLease(t *testing.T) {
	root := zktest.Root(t)
	slow, proxy := queuetest.ConnectThroughProxy(t, root, 10*time.Second)
	q := queuetest.Connect(t, root)
	m := start(t, slow, Options{})
	l := leaseOne(t, m, q)
	jid := l.JobID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proxy.SetDelay(zktest.Delay{Min: time.Second}, zktest.Delay{})
	completed := make(chan error, 1)
	go func() { completed <- m.Complete(ctx, l.ID) }()
	queuetest.Eventually(t, "Complete takes the lease", func() bool {
		_, err := m.Renew(ctx, l.ID, time.Minute)
		return errors.Is(err, ErrEnded)
	})
	if left := m.Drain(ctx); left != 0 {
		t.Errorf("Drain left %d leases, want none", left)
	}
	if st := queuetest.Status(t, q, jid); st.GetStatus() != queue.Notify {
		t.Errorf("job %s when the drain answered, want Notify: the drain did not wait for the commit", queue.JobStateName(st.GetStatus()))
	}
	if err := <-completed; err != nil {
		t.Fatal(err)
	}
}
