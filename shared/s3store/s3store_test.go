package s3store

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/retry"
)

// parse registers the store settings and parses env as the environment.
func parse(t *testing.T, env map[string]string) (*StoreSettings, *config.Registry, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := config.New(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	s := RegisterStore(r)
	return s, r, r.Parse(nil)
}

// TestTheS3RetrySettingsHaveTheShapeOfEveryRetrySetting: S3's retries are
// set as every other retry policy is (INGESTQ_S3_ATTEMPTS, _BACKOFF,
// _BACKOFF_MAX, _JITTER), and the variable of the old name still sets the
// attempts.
func TestTheS3RetrySettingsHaveTheShapeOfEveryRetrySetting(t *testing.T) {
	s, _, err := parse(t, nil)
	if err != nil || s.S3.Retry != DefaultRetry {
		t.Errorf("no variables: %+v, %v; want DefaultRetry %+v", s.S3.Retry, err, DefaultRetry)
	}
	s, _, err = parse(t, map[string]string{"INGESTQ_S3_ATTEMPTS": "2", "INGESTQ_S3_BACKOFF": "5ms",
		"INGESTQ_S3_BACKOFF_MAX": "40ms", "INGESTQ_S3_JITTER": "0.25"})
	want := retry.Policy{Attempts: 2, Backoff: 5 * time.Millisecond, Max: 40 * time.Millisecond, Jitter: 0.25}
	if err != nil || s.S3.Retry != want {
		t.Errorf("INGESTQ_S3_ATTEMPTS and the rest: %+v, %v; want %+v", s.S3.Retry, err, want)
	}
	s, r, err := parse(t, map[string]string{"INGESTQ_S3_MAX_ATTEMPTS": "3"})
	if err != nil || s.S3.Retry.Attempts != 3 || len(r.Deprecated()) != 1 {
		t.Errorf("INGESTQ_S3_MAX_ATTEMPTS=3: %+v, %v, deprecated %q; want 3 attempts, the old name reported", s.S3.Retry, err, r.Deprecated())
	}
	if _, _, err := parse(t, map[string]string{"INGESTQ_S3_BACKOFF": "2s", "INGESTQ_S3_BACKOFF_MAX": "1s"}); err == nil ||
		!strings.Contains(err.Error(), "INGESTQ_S3_ATTEMPTS") {
		t.Errorf("a maximum below the backoff: %v; want an error naming the variables", err)
	}
}

// TestTheResponseTimeoutIsSetByItsVariable: INGESTQ_S3_RESPONSE_TIMEOUT
// (or -s3-response-timeout) bounds the client's waits, so a slow store
// completing a large multipart upload can be given longer; a bound of zero
// or less would cut every request, so it is refused.
func TestTheResponseTimeoutIsSetByItsVariable(t *testing.T) {
	s, _, err := parse(t, nil)
	if err != nil || s.S3.ResponseTimeout != DefaultResponseTimeout {
		t.Errorf("no variable: %s, %v; want DefaultResponseTimeout %s", s.S3.ResponseTimeout, err, DefaultResponseTimeout)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	env := map[string]string{"INGESTQ_S3_RESPONSE_TIMEOUT": "1m"}
	r := config.New(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	flagged := RegisterStore(r)
	if err := r.Parse([]string{"-s3-response-timeout=90m"}); err != nil || flagged.S3.ResponseTimeout != 90*time.Minute {
		t.Errorf("-s3-response-timeout=90m over the variable's 1m: %s, %v; want 1h30m0s", flagged.S3.ResponseTimeout, err)
	}
	for _, bad := range []string{"0", "0s", "-1s", "soon"} {
		if _, _, err := parse(t, map[string]string{"INGESTQ_S3_RESPONSE_TIMEOUT": bad}); err == nil ||
			!strings.Contains(err.Error(), "INGESTQ_S3_RESPONSE_TIMEOUT") {
			t.Errorf("INGESTQ_S3_RESPONSE_TIMEOUT=%s: %v; want an error naming the variable", bad, err)
		}
	}

	// A store that never answers, and a client built from the parsed
	// settings: the variable's bound cuts the wait, not the default's five
	// minutes.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-t.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	s, _, err = parse(t, map[string]string{"INGESTQ_STORE": "s3", "INGESTQ_S3_ENDPOINT": srv.URL, "INGESTQ_S3_BUCKET": "b",
		"INGESTQ_S3_ATTEMPTS": "1", "INGESTQ_S3_RESPONSE_TIMEOUT": "200ms"})
	if err != nil {
		t.Fatal(err)
	}
	settings := *s.S3
	settings.Credentials = credentials.NewStaticCredentialsProvider("key", "secret", "")
	c, err := Client(context.Background(), settings)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		// The caller's context has no deadline.
		_, err := c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
		got <- err
	}()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("HeadObject succeeded; want an error")
		}
		t.Logf("HeadObject: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("HeadObject still waiting after a minute: INGESTQ_S3_RESPONSE_TIMEOUT does not reach the client")
	}
}

// TestAFailingRequestIsSentAsOftenAsItsPolicySays: a server in trouble (503
// to everything, on loopback) gets each request as many times as the
// policy's attempts, and the client's error is the server's answer.
func TestAFailingRequestIsSentAsOftenAsItsPolicySays(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for _, attempts := range []int{1, 3} {
		requests.Store(0)
		c, err := Client(context.Background(), Settings{Endpoint: srv.URL, Region: "us-east-1", Bucket: "b", PathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider("key", "secret", ""),
			Retry:       retry.Policy{Attempts: attempts, Backoff: time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
		if err == nil || !strings.Contains(err.Error(), "503") {
			t.Errorf("%d attempts: HeadObject error %v, want the server's 503", attempts, err)
		}
		if got := requests.Load(); got != int64(attempts) {
			t.Errorf("%d attempts: the server got %d requests", attempts, got)
		}
	}
}
