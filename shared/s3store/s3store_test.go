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
