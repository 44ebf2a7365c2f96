package callback

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
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
