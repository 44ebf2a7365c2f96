package callback

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
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

// A receiver's answer refusing the call as it is (4xx) is told apart from
// a failure that may pass: the first is not posted again.
func TestARefusalIsToldApartFromAFailureThatMayPass(t *testing.T) {
	codes := map[string]int{"/gone": http.StatusGone, "/busy": http.StatusServiceUnavailable}
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(codes[r.URL.Path])
	}))
	defer srv.Close()
	p := Poster{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 2, Backoff: time.Millisecond, Max: time.Minute}}
	err := p.Post(context.Background(), srv.URL+"/gone", Result{JobID: "jid0000000001"})
	if !errors.Is(err, ErrRefused) || err.Error() != "callback "+srv.URL+"/gone: HTTP 410 Gone (refused, not retried)" || calls.Load() != 1 {
		t.Errorf("a 410: %v after %d calls, want ErrRefused after 1", err, calls.Load())
	}
	calls.Store(0)
	err = p.Post(context.Background(), srv.URL+"/busy", Result{JobID: "jid0000000001"})
	if err == nil || errors.Is(err, ErrRefused) || calls.Load() != 2 {
		t.Errorf("a 503: %v after %d calls, want a failure that may pass after 2", err, calls.Load())
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
