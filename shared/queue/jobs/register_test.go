package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// cancelOnLog ends a context with cause when a record whose message starts
// with prefix is logged.
type cancelOnLog struct {
	prefix string
	cancel context.CancelCauseFunc
	cause  error
}

func (h cancelOnLog) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOnLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h cancelOnLog) WithGroup(string) slog.Handler            { return h }
func (h cancelOnLog) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.cancel(h.cause)
	}
	return nil
}

// TestRegisterWorkerStopsWhenItsContextEnds: while ZooKeeper does not
// answer, RegisterWorker waits between attempts; a stop during that wait
// ends it with the stop's cause and the last error ZooKeeper gave.
func TestRegisterWorkerStopsWhenItsContextEnds(t *testing.T) {
	proxy, err := zktest.NewProxy(zktest.Servers(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	stopping := errors.New("service stopping")
	ctx, cancel := context.WithCancelCause(testCtx(t))
	defer cancel(nil)
	log := slog.New(cancelOnLog{prefix: "registering worker", cancel: cancel, cause: stopping})
	c := connect(t, session.Options{Servers: []string{proxy.Addr}, Root: zktest.Root(t), SessionTimeout: 2 * time.Second, Logger: log})
	// Every connection is refused: for a session timeout the client tries
	// the server quickly and a write waits for it; then each round of
	// attempts answers the writes waiting with ErrNoServer (or a write
	// fails with ErrConnectionClosed), and the first failure logs, which
	// stops ctx.
	proxy.Block()
	reg, err := c.RegisterWorker(ctx, &v1.WorkerInfo{Id: c.NewWorkerID("estimator"), Service: "estimator", Stage: "Estimating"})
	if err == nil {
		reg.Close(testCtx(t))
		t.Fatal("RegisterWorker succeeded with ZooKeeper unreachable")
	}
	if !errors.Is(err, stopping) {
		t.Errorf("RegisterWorker: %v; want the context's cause", err)
	}
	if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
		t.Errorf("RegisterWorker: %v; want ZooKeeper's last error kept", err)
	}
}

// TestRegisterWorkerBackoffIsBounded: the first write's waits double from
// 50 ms and never exceed 2 s, however long ZooKeeper is away, and are
// never given up on by count.
func TestRegisterWorkerBackoffIsBounded(t *testing.T) {
	p := jobs.RegisterRetry()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Attempts != 0 {
		t.Errorf("attempts %d, want 0 (until the context ends)", p.Attempts)
	}
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000}
	for i, w := range want {
		if got := p.Wait(i + 1); got != w*time.Millisecond {
			t.Errorf("wait after failure %d: %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := p.Wait(1000); got != 2*time.Second {
		t.Errorf("wait after failure 1000: %v, want 2s", got)
	}
}
