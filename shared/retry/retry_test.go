package retry

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/config"
)

func TestWaitDoublesUpToTheMaximum(t *testing.T) {
	p := Policy{Backoff: time.Second, Max: 5 * time.Second}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := p.Wait(i + 1); got != w {
			t.Errorf("wait after failure %d: %v, want %v", i+1, got, w)
		}
	}
	if got := (Policy{Backoff: time.Second}).Wait(200); got <= 0 {
		t.Errorf("uncapped wait after 200 failures overflowed to %v", got)
	}
}

func TestJitterDrawsWithinItsShareOfTheWait(t *testing.T) {
	p := Policy{Backoff: 8 * time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := p.Wait(1)
		if d < 4*time.Second || d > 8*time.Second {
			t.Fatalf("wait %v outside 4s..8s", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Errorf("200 jittered waits were all %v", seen)
	}
}

func TestDoStopsAtTheAttemptsAndReturnsTheLastError(t *testing.T) {
	var calls []int
	n, err := Policy{Attempts: 3}.Do(context.Background(), nil, func(attempt int) error {
		calls = append(calls, attempt)
		return errors.New("failure " + string(rune('0'+attempt)))
	})
	if n != 3 || err == nil || err.Error() != "failure 3" || len(calls) != 3 || calls[2] != 3 {
		t.Errorf("Do = %d, %v after calls %v; want 3, failure 3", n, err, calls)
	}
}

func TestDoStopsAtAnErrorThatWillNotPass(t *testing.T) {
	final := errors.New("refused")
	n, err := Policy{Attempts: 5}.Do(context.Background(), func(err error) bool { return !errors.Is(err, final) },
		func(attempt int) error {
			if attempt == 2 {
				return final
			}
			return errors.New("may pass")
		})
	if n != 2 || !errors.Is(err, final) {
		t.Errorf("Do = %d, %v; want 2, refused", n, err)
	}
}

func TestDoSucceedsAfterFailuresThatPass(t *testing.T) {
	n, err := Policy{}.Do(context.Background(), nil, func(attempt int) error {
		if attempt < 4 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 4 || err != nil {
		t.Errorf("Do = %d, %v; want 4, nil", n, err)
	}
}

func TestDoEndsWithTheContextsCauseWhileWaiting(t *testing.T) {
	cause := errors.New("stage stopping")
	ctx, cancel := context.WithCancelCause(context.Background())
	n, err := Policy{Backoff: time.Hour}.Do(ctx, nil, func(int) error {
		cancel(cause)
		return errors.New("failed")
	})
	if n != 1 || !errors.Is(err, cause) {
		t.Errorf("Do = %d, %v; want 1, the cause", n, err)
	}
}

func parse(t *testing.T, env map[string]string, args ...string) (*Policy, *config.Registry, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := config.New(fs, func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	p := Register(r, "download", "a file is fetched", Policy{Attempts: 4, Backoff: time.Second, Max: 30 * time.Second, Jitter: 0.5})
	r.Renamed("download-retries", "INGESTQ_DOWNLOAD_RETRIES", "download-attempts", RetriesToAttempts)
	return p, r, r.Parse(args)
}

func TestSettingsHaveOneShapeAndDefaults(t *testing.T) {
	p, r, err := parse(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Policy{Attempts: 4, Backoff: time.Second, Max: 30 * time.Second, Jitter: 0.5}); *p != want {
		t.Errorf("defaults %+v, want %+v", *p, want)
	}
	var names []string
	for _, v := range r.Variables() {
		names = append(names, v.Env)
	}
	if got := strings.Join(names, " "); got != "INGESTQ_DOWNLOAD_ATTEMPTS INGESTQ_DOWNLOAD_BACKOFF INGESTQ_DOWNLOAD_BACKOFF_MAX INGESTQ_DOWNLOAD_JITTER" {
		t.Errorf("variables %s", got)
	}
	p, _, err = parse(t, map[string]string{"INGESTQ_DOWNLOAD_ATTEMPTS": "2", "INGESTQ_DOWNLOAD_BACKOFF_MAX": "0s", "INGESTQ_DOWNLOAD_JITTER": "0"},
		"-download-backoff", "100ms")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Policy{Attempts: 2, Backoff: 100 * time.Millisecond}); *p != want {
		t.Errorf("set %+v, want %+v", *p, want)
	}
}

func TestTheOldRetriesVariableCountsOneAttemptMore(t *testing.T) {
	p, r, err := parse(t, map[string]string{"INGESTQ_DOWNLOAD_RETRIES": "1"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Attempts != 2 {
		t.Errorf("INGESTQ_DOWNLOAD_RETRIES=1 gave %d attempts, want 2", p.Attempts)
	}
	if d := r.Deprecated(); len(d) != 1 || !strings.Contains(d[0], "INGESTQ_DOWNLOAD_ATTEMPTS") {
		t.Errorf("deprecations %q", d)
	}
	if p, _, err = parse(t, nil, "-download-retries", "0"); err != nil || p.Attempts != 1 {
		t.Errorf("-download-retries 0: %+v, %v; want 1 attempt", p, err)
	}
	_, _, err = parse(t, map[string]string{"INGESTQ_DOWNLOAD_RETRIES": "1", "INGESTQ_DOWNLOAD_ATTEMPTS": "3"})
	if err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("old and new both set: %v", err)
	}
}

func TestBadPoliciesAreRefusedNamingTheVariable(t *testing.T) {
	for _, env := range []map[string]string{
		{"INGESTQ_DOWNLOAD_ATTEMPTS": "0"},
		{"INGESTQ_DOWNLOAD_BACKOFF": "-1s"},
		{"INGESTQ_DOWNLOAD_JITTER": "1.5"},
		{"INGESTQ_DOWNLOAD_BACKOFF": "1m", "INGESTQ_DOWNLOAD_BACKOFF_MAX": "30s"},
	} {
		if _, _, err := parse(t, env); err == nil || !strings.Contains(err.Error(), "INGESTQ_DOWNLOAD_") {
			t.Errorf("%v: %v", env, err)
		}
	}
}
