package stage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/zktest"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func newTestState(metrics *telemetry.Metrics) *WorkerState {
	return NewWorkerState(&v1.WorkerInfo{Id: "test-worker-1", Service: "test", Stage: "Estimating", Concurrency: 3,
		Address: "127.0.0.1:7401"}, "estimating", metrics)
}

func TestWorkerStateReportsWhatDescribesTheWorkerAndItsState(t *testing.T) {
	s := newTestState(nil)
	w := s.Status()
	if w.GetId() != "test-worker-1" || w.GetService() != "test" || w.GetStage() != "Estimating" || w.GetConcurrency() != 3 ||
		w.GetAddress() != "127.0.0.1:7401" || w.GetHost() == "" || w.GetStarted() == nil || w.GetPaused() || w.GetDraining() {
		t.Fatalf("a new worker's status: %v", w)
	}
	s.Pause()
	if w := s.Status(); !w.GetPaused() || s.Taking() {
		t.Errorf("after Pause: %v, taking %v", w, s.Taking())
	}
	s.Resume()
	if w := s.Status(); w.GetPaused() || !s.Taking() {
		t.Errorf("after Resume: %v, taking %v", w, s.Taking())
	}
	s.SetDraining()
	s.Resume()
	if w := s.Status(); !w.GetDraining() || !s.Draining() || s.Taking() {
		t.Errorf("after SetDraining and Resume: %v; want it draining for good", w)
	}
}

// TestAJobBegunTwiceIsInFlightUntilItsLastStepEnds: a job given back and
// taken again by the same worker before its first step's end is counted
// has two steps in flight; the end of the first leaves the second.
func TestAJobBegunTwiceIsInFlightUntilItsLastStepEnds(t *testing.T) {
	s := newTestState(nil)
	ctx := context.Background()
	first := s.Begin(ctx, "j1", "b1")
	second := s.Begin(ctx, "j1", "b1")
	other := s.Begin(ctx, "j2", "b1")
	first.End(ctx, telemetry.EndReleased)
	first.End(ctx, telemetry.EndAdvanced) // counted once
	w := s.Status()
	var ids []string
	for _, f := range w.GetInFlight() {
		ids = append(ids, f.GetJobId())
		if f.GetBatchId() != "b1" || f.GetSince() == nil {
			t.Errorf("in flight: %v", f)
		}
	}
	if len(ids) != 2 || !strings.Contains(strings.Join(ids, ","), "j1") || s.InFlight() != 2 {
		t.Errorf("in flight %v (%d), want j1 and j2", ids, s.InFlight())
	}
	if o := w.GetOutcomes(); len(o) != 1 || o["released"] != 1 {
		t.Errorf("outcomes %v, want one released", o)
	}
	idle := s.Idle()
	second.End(ctx, telemetry.EndAdvanced)
	select {
	case <-idle:
		t.Fatal("idle with a job in flight")
	default:
	}
	other.End(ctx, telemetry.EndFenced)
	<-idle
	<-s.Idle()
	if o := s.Status().GetOutcomes(); o["released"] != 1 || o["advanced"] != 1 || o["fenced"] != 1 || s.InFlight() != 0 {
		t.Errorf("outcomes %v, %d in flight", o, s.InFlight())
	}
}

func TestWaitRunnableWaitsWhilePausedAndNotDraining(t *testing.T) {
	s := newTestState(nil)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitRunnable(ended); err != nil {
		t.Errorf("not paused: %v", err)
	}
	s.Pause()
	if err := s.WaitRunnable(ended); !errors.Is(err, context.Canceled) {
		t.Errorf("paused, ctx ended: %v, want it waiting until ctx ended", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitRunnable(context.Background()) }()
	s.Resume()
	if err := <-done; err != nil {
		t.Errorf("waiting across Resume: %v", err)
	}
	s.Pause()
	go func() { done <- s.WaitRunnable(context.Background()) }()
	s.SetDraining()
	if err := <-done; err != nil || !s.Draining() {
		t.Errorf("waiting across SetDraining: %v", err)
	}
}

func TestUntilChangedEndsAtThePauseWithItsCause(t *testing.T) {
	s := newTestState(nil)
	ctx, cancel := s.UntilChanged(context.Background())
	defer cancel()
	s.Pause()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrStateChanged) {
		t.Errorf("cause %v, want ErrStateChanged", context.Cause(ctx))
	}
	ctx2, cancel2 := s.UntilChanged(context.Background())
	cancel2()
	cancel2()
	if !errors.Is(context.Cause(ctx2), context.Canceled) {
		t.Errorf("cancelled: cause %v", context.Cause(ctx2))
	}
}

func TestCommitOutcomeSaysHowAStepEnded(t *testing.T) {
	for _, tt := range []struct {
		err      error
		intended telemetry.StepEnd
		want     telemetry.StepEnd
	}{
		{nil, telemetry.EndAdvanced, telemetry.EndAdvanced},
		{nil, telemetry.EndRetried, telemetry.EndRetried},
		{fmt.Errorf("commit: %w", queue.ErrFenced), telemetry.EndAdvanced, telemetry.EndFenced},
		{&queue.NoBatchError{Job: "j", Batch: "b", Failed: true}, telemetry.EndAdvanced, telemetry.EndFailed},
		{&queue.NoBatchError{Job: "j", Batch: "b"}, telemetry.EndAdvanced, telemetry.EndReleased},
		{errors.New("connection closed"), telemetry.EndFailed, telemetry.EndReleased},
	} {
		if got := CommitOutcome(tt.err, tt.intended); got != tt.want {
			t.Errorf("CommitOutcome(%v, %s) = %s, want %s", tt.err, tt.intended, got, tt.want)
		}
	}
}

func TestStepsAreCountedInTheStagesMetrics(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "stage-test", "v0", telemetry.WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	s := newTestState(tel.Metrics)
	ctx := context.Background()
	s.Begin(ctx, "j1", "b1").End(ctx, telemetry.EndAdvanced)
	f := s.Begin(ctx, "j2", "b1")
	// The bytes a step moves, and its resumes, are the stage's too.
	f.Meter().Add(1000)
	f.Meter().Advance(5) // not moved: not counted
	f.Meter().Resumed(ctx)
	f.Meter().Restarted(ctx)
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{`ingestq_jobs_handled_total{outcome="advanced",stage="estimating"} 1`, `ingestq_jobs_in_flight{stage="estimating"} 1`,
		`ingestq_download_bytes_total{stage="estimating"} 1000`, `ingestq_download_resumes_total{outcome="resumed",stage="estimating"} 1`,
		`ingestq_download_resumes_total{outcome="restarted",stage="estimating"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in\n%s", want, text)
		}
	}
}

func TestTheRegistryEntryFollowsTheState(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	s := newTestState(nil)
	ctx := context.Background()
	s.Pause()
	if err := s.Register(ctx, jobs.New(q)); err != nil {
		t.Fatal(err)
	}
	entry := func() *v1.WorkerInfo {
		ws, err := admin.New(q).Queue.ListWorkers(ctx)
		if err != nil || len(ws) != 1 {
			return nil
		}
		return ws[0]
	}
	if w := entry(); w.GetId() != "test-worker-1" || !w.GetPaused() || w.GetAddress() != "127.0.0.1:7401" {
		t.Fatalf("entry as registered: %v", w)
	}
	s.Resume()
	f := s.Begin(ctx, "j1", "b1")
	queuetest.Eventually(t, "the entry shows the job in flight", func() bool {
		w := entry()
		return !w.GetPaused() && len(w.GetInFlight()) == 1 && w.GetInFlight()[0].GetJobId() == "j1"
	})
	f.End(ctx, telemetry.EndFailed)
	s.SetDraining()
	queuetest.Eventually(t, "the entry shows the outcome and the drain", func() bool {
		w := entry()
		return w.GetDraining() && len(w.GetInFlight()) == 0 && w.GetOutcomes()["failed"] == 1
	})
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Unregister(closeCtx); err != nil {
		t.Fatal(err)
	}
	if ws, err := admin.New(q).Queue.ListWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("after Unregister: %v, %v", ws, err)
	}
}

func TestAPauseWhileTheEntryIsBeingCreatedReachesTheEntry(t *testing.T) {
	root := zktest.Root(t)
	slow, proxy := queuetest.ConnectThroughProxy(t, root, 10*time.Second)
	q := queuetest.Connect(t, root)
	s := newTestState(nil)
	ctx := context.Background()
	proxy.SetDelay(zktest.Delay{Min: 500 * time.Millisecond}, zktest.Delay{})
	registered := make(chan error, 1)
	go func() { registered <- s.Register(ctx, jobs.New(slow)) }()
	queuetest.Eventually(t, "the entry being written", func() bool {
		for _, r := range slow.Requests() {
			if r.Node == "workers/*" {
				return true
			}
		}
		return false
	})
	s.Pause()
	if err := <-registered; err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, "the entry shows the pause", func() bool {
		ws, err := admin.New(q).Queue.ListWorkers(ctx)
		return err == nil && len(ws) == 1 && ws[0].GetPaused()
	})
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s.Unregister(closeCtx)
}
