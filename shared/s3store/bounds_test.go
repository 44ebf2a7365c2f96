package s3store_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/loopbacktest"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
)

// A store that stops answering cannot hold a caller that has no deadline
// (a processor storing a job, a recorder reading a manifest): waiting for
// the answer's headers, and for an error's body, is bounded by
// ResponseTimeout, and an error's body by its size.
func TestAStoreThatNeverFinishesAnsweringIsCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		answer  func(t *testing.T, w http.ResponseWriter, r *http.Request)
	}{
		{"no answer", 200 * time.Millisecond, func(t *testing.T, w http.ResponseWriter, r *http.Request) { wait(t, r) }},
		{"an error whose body then stalls", 200 * time.Millisecond, func(t *testing.T, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "<Error><Code>AccessDenied</Code>")
			w.(http.Flusher).Flush()
			wait(t, r)
		}},
		// Far larger than any error S3 sends, and then no end: the size
		// bound ends the read, as the ResponseTimeout is beyond the test's
		// patience.
		{"an error larger than any error", 10 * time.Minute, func(t *testing.T, w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "<Error><Code>AccessDenied</Code><Message>")
			chunk := strings.Repeat("x", 64<<10)
			for range 128 {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
			w.(http.Flusher).Flush()
			wait(t, r)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := s3test.StandIn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.answer(t, w, r) }))
			c := s3test.StandInClient(t, url, func(s *s3store.Settings) { s.ResponseTimeout = tc.timeout })
			got := make(chan error, 1)
			go func() {
				// The caller's context has no deadline.
				out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
				if err == nil {
					out.Body.Close()
				}
				got <- err
			}()
			select {
			case err := <-got:
				if err == nil {
					t.Fatal("GetObject succeeded; want an error")
				}
				t.Logf("GetObject: %v", err)
			case <-time.After(time.Minute):
				t.Fatal("GetObject still waiting after a minute: the answer is not bounded")
			}
		})
	}
}

// wait holds a request until its client or the test goes.
func wait(t *testing.T, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-t.Context().Done():
	}
}

// A stored object whose body stops coming cannot hold its reader either
// (the recorder reading a manifest, the audit reading a file): a read that
// gets nothing for ResponseTimeout fails.
func TestAnObjectWhoseBodyStallsFailsItsRead(t *testing.T) {
	url := s3test.StandIn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "the start")
		w.(http.Flusher).Flush()
		wait(t, r)
	}))
	// One bound covers the headers and the first bytes, which the server
	// sends at once, and the stall after them: it is long enough for a
	// loaded machine to deliver what was sent.
	c := s3test.StandInClient(t, url, func(s *s3store.Settings) { s.ResponseTimeout = 2 * time.Second })
	out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(out.Body)
		got <- result{data, err}
	}()
	select {
	case r := <-got:
		if r.err == nil || string(r.data) != "the start" {
			t.Fatalf("read %q, %v; want the start, then an error", r.data, r.err)
		}
		t.Logf("reading the body: %v", r.err)
	case <-time.After(time.Minute):
		t.Fatal("still reading the body after a minute: a stalled body is not cut")
	}
}

// A store that answers every page of a listing with the token that asked
// for it would be listed for ever: the listing is an error instead.
func TestAListingThatNeverMovesOnIsAnError(t *testing.T) {
	var pages atomic.Int64
	url := s3test.StandIn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pages.Add(1) > 100 {
			// A listing that gets this far would never end: refused, so
			// that the test ends (failing).
			http.Error(w, "listed for ever", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>`+
			`<IsTruncated>true</IsTruncated><NextContinuationToken>again</NextContinuationToken><Contents><Key>k</Key><Size>1</Size></Contents></ListBucketResult>`)
	}))
	c := s3test.StandInClient(t, url, nil)
	got := make(chan error, 1)
	go func() {
		for _, err := range s3store.ListObjects(t.Context(), c, s3.ListObjectsV2Input{Bucket: aws.String("b")}) {
			if err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if !errors.Is(err, s3store.ErrListingLoops) {
			t.Fatalf("ListObjects = %v; want ErrListingLoops", err)
		}
		t.Logf("after %d pages: %v", pages.Load(), err)
	case <-time.After(time.Minute):
		t.Fatalf("still listing after a minute (%d pages)", pages.Load())
	}
}

// A store that stops reading an upload cannot hold its writer: a write
// that cannot hand the connection anything for ResponseTimeout fails.
func TestAnUploadTheStoreStopsReadingFails(t *testing.T) {
	silent := loopbacktest.Silent(t) // held open, never read, until the test ends
	c := s3test.StandInClient(t, "http://"+silent, func(s *s3store.Settings) { s.ResponseTimeout = 200 * time.Millisecond })
	// Far more than the connection's buffers hold.
	body := make([]byte, 64<<20)
	got := make(chan error, 1)
	go func() {
		_, err := c.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("k"),
			Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body)))})
		got <- err
	}()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("PutObject succeeded; want an error")
		}
		t.Logf("PutObject: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("PutObject still writing after a minute: an upload nobody reads is not cut")
	}
}
