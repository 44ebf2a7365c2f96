package callback

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/waittest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestPostGivesUpOnAnUnreachableReceiverWithTheReason(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/cb"
	srv.Close() // nothing listens there any more
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 2, Backoff: time.Millisecond, Max: time.Minute}}
	err := p.Post(context.Background(), url, Result{JobID: "jid0000000001"})
	if err == nil || !strings.HasPrefix(err.Error(), "callback "+url+": ") || !strings.Contains(err.Error(), "connection refused") ||
		!strings.HasSuffix(err.Error(), "after 2 attempts") {
		t.Errorf("Post = %v", err)
	}
}

func TestPostTimesOutEachAttempt(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-release // a receiver that never answers
	}))
	defer srv.Close()
	defer close(release)
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 2, Backoff: time.Millisecond, Max: time.Minute}, Timeout: 200 * time.Millisecond}
	err := p.Post(context.Background(), srv.URL, Result{})
	// The server reads a request in a goroutine of its own, which may come
	// to the handler after the client gave up waiting: wait for it.
	waittest.True(t, 10*time.Second, "the receiver got both calls", func() bool { return calls.Load() >= 2 })
	if err == nil || !strings.Contains(err.Error(), "after 2 attempts") || calls.Load() != 2 {
		t.Errorf("Post = %v after %d calls, want a timeout after 2", err, calls.Load())
	}
}

func TestPostStopsWhenTheJobIsLost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 1001, Backoff: 10 * time.Millisecond, Max: time.Minute}}
	if err := p.Post(ctx, srv.URL, Result{}); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("Post after the context ended: %v", err)
	}
}

// TestACallbackIsASpanOfTheJobsTraceAndCarriesItsTraceparent: the receiver
// can continue the job's trace, and the request shows in it.
func TestACallbackIsASpanOfTheJobsTraceAndCarriesItsTraceparent(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	defer srv.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ctx, step := tp.Tracer("notifier").Start(context.Background(), "notifying jid0000000001")
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()})}
	if err := p.Post(ctx, srv.URL, Result{JobID: "jid0000000001"}); err != nil {
		t.Fatal(err)
	}
	step.End()
	header := <-got
	var post tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "callback POST" {
			post = s
		}
	}
	if post.Parent.SpanID() != step.SpanContext().SpanID() || post.SpanContext.TraceID() != step.SpanContext().TraceID() {
		t.Fatalf("callback span %+v is not a child of the step's span", post.SpanContext)
	}
	if want := "00-" + post.SpanContext.TraceID().String() + "-" + post.SpanContext.SpanID().String() + "-01"; header != want {
		t.Errorf("traceparent %q, want %q", header, want)
	}
}

func TestCallbacksAreCountedByOutcome(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "notifier-test", "v0", telemetry.WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	codes := map[string]int{"/ok": http.StatusOK, "/gone": http.StatusGone, "/busy": http.StatusServiceUnavailable}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(codes[r.URL.Path]) }))
	defer srv.Close()
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 2, Backoff: time.Millisecond, Max: time.Minute}, Metrics: tel.Metrics}
	for path := range codes {
		p.Post(context.Background(), srv.URL+path, Result{JobID: "jid0000000001"})
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, outcome := range []string{"delivered", "refused", "failed"} {
		if want := `ingestq_callbacks_total{outcome="` + outcome + `"} 1`; !strings.Contains(rec.Body.String(), want) {
			t.Errorf("no %s in\n%s", want, rec.Body.String())
		}
	}
}

// TestEveryAttemptCarriesTheJobsIdempotencyKey: a result posted again (an
// attempt retried, a notifier that stopped before its commit) carries the
// same Idempotency-Key, the job's id, for the receiver to deduplicate.
func TestEveryAttemptCarriesTheJobsIdempotencyKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 3, Backoff: time.Millisecond, Max: time.Minute}}
	for range 2 {
		if err := p.Post(context.Background(), srv.URL, Result{JobID: "jid0000000042"}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"jid0000000042", "jid0000000042", "jid0000000042"}; strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("Idempotency-Key of each post: %q, want %q", keys, want)
	}
}
