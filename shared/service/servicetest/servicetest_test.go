package servicetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/zktest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// errorsOf is a testing.TB that keeps the errors reported to it instead of
// failing the test, so that a test can check what Start reports.
type errorsOf struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (e *errorsOf) Errorf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func (e *errorsOf) reported() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.errs
}

func TestStartedServiceServesUntilStoppedAndExitsZero(t *testing.T) {
	bin := Build(t, "testdata/drainhook")
	p := Start(t, bin, zktest.Root(t))
	conn := Dial(t, p.Addr)
	WaitHealth(t, conn, healthpb.HealthCheckResponse_SERVING, time.Second)
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v, want a clean exit", err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("second Stop: %v, want the first result (nil)", err)
	}
	if !strings.Contains(p.Output(), `"msg":"stopped"`) {
		t.Errorf("output has no \"stopped\" line:\n%s", p.Output())
	}
	if out, code := probeHealth(t, bin, p.Env); code != 1 {
		t.Errorf("-check-health after Stop: exit %d, printed %q; want 1 (nothing listening)", code, out)
	}
}

func TestAServiceThatExitsBadlyFailsTheTestThatStartedIt(t *testing.T) {
	bin := Build(t, "testdata/drainhook")
	root := zktest.Root(t)
	var stopErr error
	inner := &errorsOf{}
	t.Run("service", func(t *testing.T) {
		inner.TB = t
		p := Start(inner, bin, root, "INGESTQ_TEST_DRAIN_ERROR=the drain went wrong")
		stopErr = p.Stop()
		if !strings.Contains(p.Output(), "the drain went wrong") {
			t.Errorf("output does not carry the service's error:\n%s", p.Output())
		}
	})
	if stopErr == nil || !strings.Contains(stopErr.Error(), "exit after SIGTERM: exit status 1, want 0") {
		t.Errorf("Stop: %v; want the exit status named", stopErr)
	}
	want := fmt.Sprintf("drainhook: %v", stopErr)
	if got := inner.reported(); len(got) != 1 || got[0] != want {
		t.Errorf("reported to the test %q; want only %q", got, want)
	}
}
