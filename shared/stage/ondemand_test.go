package stage

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// startOnDemand runs a runner that takes Estimating jobs only when asked.
func startOnDemand(t *testing.T, c *session.Session) *Runner {
	t.Helper()
	r := startRunner(t, c, Config{OnDemand: true})
	queuetest.Eventually(t, "the runner running", func() bool {
		ws, err := admin.New(c).Queue.ListWorkers(context.Background())
		return err == nil && len(ws) == 1
	})
	return r
}

// locksTaken is how many job locks c's session has created: one a claim.
func locksTaken(c *session.Session) int64 {
	n := int64(0)
	for _, r := range c.Requests() {
		if r.Node == "jobs/*/lock" && strings.HasSuffix(r.Op, "create") {
			n += r.Count
		}
	}
	return n
}

func TestAStageOnDemandTakesAJobForEachTakeAndNoneOnItsOwn(t *testing.T) {
	root := zktest.Root(t)
	operator := queuetest.Connect(t, root)
	c := queuetest.Connect(t, root)
	r := startOnDemand(t, c)
	if w := r.Status(); w.GetConcurrency() != 0 {
		t.Errorf("registry entry says concurrency %d, want 0: the stage has no workers of its own", w.GetConcurrency())
	}
	jids := queuetest.SpawnN(t, operator, newJobs(2), queue.Estimating)
	got := make(chan string, 2)
	handler := func(_ context.Context, cl Job) Outcome {
		got <- cl.ID()
		return Next(jobs.Change{SpaceNeeded: ptr(int64(1))})
	}
	took, err := r.Take(context.Background(), 10*time.Second, handler)
	if err != nil || !took {
		t.Fatalf("Take = %v, %v; want a job", took, err)
	}
	first := <-got
	queuetest.WaitState(t, operator, first, queue.Provisioning)
	if n := locksTaken(c); n != 1 {
		t.Errorf("%d jobs claimed for one Take", n)
	}
	// The other job was left free for the next Take, which does not wait.
	took, err = r.Take(context.Background(), 0, handler)
	if err != nil || !took {
		t.Fatalf("Take without waiting = %v, %v; want the job left free", took, err)
	}
	if second := <-got; second == first || (second != jids[0] && second != jids[1]) {
		t.Errorf("second Take handled %s, want the other of %v", second, jids)
	}
	queuetest.Eventually(t, "both jobs in Provisioning", func() bool {
		counts, _ := admin.New(operator).Jobs.Counts(context.Background())
		return counts[queue.Provisioning] == 2
	})
	if o := r.Status().GetOutcomes(); o["advanced"] != 2 {
		t.Errorf("outcomes %v, want the two steps counted as any", o)
	}
}

func TestTakeWaitsForAJobUntilItsWaitEndsAndNotWhilePaused(t *testing.T) {
	root := zktest.Root(t)
	operator := queuetest.Connect(t, root)
	r := startOnDemand(t, queuetest.Connect(t, root))
	var handled atomic.Int64
	handler := func(context.Context, Job) Outcome {
		handled.Add(1)
		return Next(jobs.Change{SpaceNeeded: ptr(int64(1))})
	}
	if took, err := r.Take(context.Background(), 200*time.Millisecond, handler); took || err != nil {
		t.Errorf("Take on an empty queue = %v, %v; want nothing after the wait", took, err)
	}
	r.Pause()
	jid := queuetest.SpawnN(t, operator, newJobs(1), queue.Estimating)[0]
	for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
		if took, err := r.Take(context.Background(), wait, handler); took || err != nil {
			t.Errorf("Take waiting %s while paused = %v, %v; want nothing", wait, took, err)
		}
	}
	if s := queuetest.Status(t, operator, jid).GetStatus(); s != queue.Estimating || handled.Load() != 0 {
		t.Fatalf("a paused stage handled the job (%s)", queue.JobStateName(s))
	}
	// A Take waiting when the pause ends takes the job.
	took := make(chan error, 1)
	go func() {
		ok, err := r.Take(context.Background(), 20*time.Second, handler)
		if err == nil && !ok {
			err = errors.New("no job")
		}
		took <- err
	}()
	waittest.Stays(t, 200*time.Millisecond, func() error {
		if len(took) > 0 {
			return errors.New("a Take came back while the stage was paused")
		}
		return nil
	})
	r.Resume()
	if err := <-took; err != nil {
		t.Fatalf("Take across the resume: %v", err)
	}
	queuetest.WaitState(t, operator, jid, queue.Provisioning)
}

func TestTakeSkipsAJobTheRunnersRulesDecideAndEndsWhenTheStageDrains(t *testing.T) {
	root := zktest.Root(t)
	operator := queuetest.Connect(t, root)
	r := startOnDemand(t, queuetest.Connect(t, root))
	jids := queuetest.SpawnN(t, operator, newJobs(2), queue.Estimating)
	plant(t, operator, jids[0], "configuration", "{broken")
	plant(t, operator, jids[1], "configuration", "{broken")
	waiting := make(chan error, 1)
	go func() {
		_, err := r.Take(context.Background(), time.Minute, func(context.Context, Job) Outcome {
			t.Error("the handler got a job whose data is unreadable")
			return Release()
		})
		waiting <- err
	}()
	for _, jid := range jids {
		queuetest.Eventually(t, jid+" failed", func() bool { return queuetest.Status(t, operator, jid).GetStatus() == queue.Failed })
		if msg := queuetest.Status(t, operator, jid).GetMessage(); !strings.Contains(msg, "job data unreadable") {
			t.Errorf("%s failed with %q", jid, msg)
		}
	}
	// The Take still waits: the jobs it took were not its handler's.
	select {
	case err := <-waiting:
		t.Fatalf("Take ended (%v) with no job for its handler", err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if left := r.Drain(ctx); left != 0 {
		t.Errorf("Drain left %d jobs", left)
	}
	if err := <-waiting; !errors.Is(err, ErrNotRunning) {
		t.Errorf("a Take waiting as the stage drained ended with %v, want ErrNotRunning", err)
	}
	if _, err := r.Take(context.Background(), 0, nil); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Take after the drain: %v, want ErrNotRunning", err)
	}
}

func TestADrainWaitsForTheJobsTakenOnDemandThenGivesThemBack(t *testing.T) {
	root := zktest.Root(t)
	operator := queuetest.Connect(t, root)
	r := startOnDemand(t, queuetest.Connect(t, root))
	jid := queuetest.SpawnN(t, operator, newJobs(1), queue.Estimating)[0]
	ended := make(chan error, 1)
	took, err := r.Take(context.Background(), 10*time.Second, func(ctx context.Context, _ Job) Outcome {
		<-ctx.Done() // too slow: cut off by the drain deadline
		return Next(jobs.Change{}).OnEnd(func(_ telemetry.StepEnd, err error) { ended <- err })
	})
	if err != nil || !took {
		t.Fatalf("Take = %v, %v", took, err)
	}
	if w := r.Status(); len(w.GetInFlight()) != 1 || w.GetInFlight()[0].GetJobId() != jid {
		t.Errorf("in flight %v, want the job taken on demand", w.GetInFlight())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if left := r.Drain(ctx); left != 1 {
		t.Errorf("Drain left %d jobs running, want 1", left)
	}
	if err := <-ended; !errors.Is(err, ErrDrainDeadline) {
		t.Errorf("the handler learned %v, want ErrDrainDeadline", err)
	}
	if job, _ := jobs.NewReader(operator).GetJob(context.Background(), jid); job.GetLocked() || job.GetStatus().GetStatus() != queue.Estimating {
		t.Errorf("job after the drain: locked %v in %s; want it given back", job.GetLocked(), queue.JobStateName(job.GetStatus().GetStatus()))
	}
}

func TestOnEndTellsTheHandlerHowItsOutcomeEndedAndAfterEndFindsItsSpanEnded(t *testing.T) {
	tests := []struct {
		name    string
		outcome Outcome
		// meddle changes the job under the handler before it returns.
		meddle  func(t *testing.T, root, jid, bid string)
		step    telemetry.StepEnd
		wantErr func(error) bool
		state   queue.JobState
	}{
		{name: "a step that goes on", outcome: Next(jobs.Change{SpaceNeeded: ptr(int64(1))}),
			step: telemetry.EndAdvanced, state: queue.Provisioning},
		{name: "a failure", outcome: Fail("no"), step: telemetry.EndFailed, state: queue.Failed},
		{name: "a release", outcome: Release(), step: telemetry.EndReleased, state: queue.Estimating},
		{name: "a commit of a job whose batch is gone", outcome: Next(jobs.Change{SpaceNeeded: ptr(int64(1))}),
			meddle: func(t *testing.T, root, _, bid string) { zktest.DeleteTree(t, zktest.RawConn(t), root+"/batches/"+bid) },
			step:   telemetry.EndFailed, state: queue.Failed,
			wantErr: func(err error) bool {
				var nb *queue.NoBatchError
				return errors.As(err, &nb) && nb.Failed
			}},
		{name: "a commit fenced by a peer's write", outcome: Next(jobs.Change{SpaceNeeded: ptr(int64(1))}),
			meddle: func(t *testing.T, root, jid, _ string) {
				zktest.WriteNode(t, zktest.RawConn(t), root+"/jobs/"+jid+"/status",
					`{"status":"Failed","last_modified":"2026-11-22 03:51:07 +0000","message":"failed by an administrator","last_successful_status":"Pending","retry_count":0}`)
			},
			step: telemetry.EndFenced, state: queue.Failed,
			wantErr: func(err error) bool { return errors.Is(err, queue.ErrFenced) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := zktest.Root(t)
			c := queuetest.Connect(t, root)
			jid := queuetest.SpawnN(t, c, newJobs(1), queue.Estimating)[0]
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			type end struct {
				step     telemetry.StepEnd
				err      error
				counted  int64
				inFlight int
			}
			ended := make(chan end, 1)
			spansWhenOver := make(chan int, 1)
			// The handler reads r: r is set before it runs.
			var r *Runner
			var first atomic.Bool
			r, err := New(jobs.New(c), Config{Service: "test", Name: "estimating", From: queue.Estimating, To: queue.Provisioning,
				Concurrency: 1, Tracer: tp.Tracer("stage"), Handler: func(ctx context.Context, cl Job) Outcome {
					if first.Swap(true) {
						return Release() // a released job taken again
					}
					if tt.meddle != nil {
						tt.meddle(t, root, cl.ID(), cl.Data().GetBid())
					}
					return tt.outcome.OnEnd(func(step telemetry.StepEnd, err error) {
						w := r.Status()
						ended <- end{step, err, w.GetOutcomes()[string(step)], len(w.GetInFlight())}
						trace.SpanFromContext(ctx).SetAttributes(attribute.String("test.learned", string(step)))
						if n := len(exp.GetSpans()); n != 0 {
							t.Errorf("%d spans exported when told how the step ended, want none: the step's span ends after", n)
						}
					}).AfterEnd(func() { spansWhenOver <- len(exp.GetSpans()) })
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go r.Run(ctx)
			t.Cleanup(func() {
				cancel()
				<-r.Done()
			})
			var e end
			select {
			case e = <-ended:
			case <-time.After(30 * time.Second):
				t.Fatal("the handler never learned how its outcome ended")
			}
			if e.step != tt.step {
				t.Errorf("step ended %s, want %s", e.step, tt.step)
			}
			if tt.wantErr == nil && e.err != nil || tt.wantErr != nil && !tt.wantErr(e.err) {
				t.Errorf("error %v", e.err)
			}
			if e.counted != 1 || e.inFlight != 0 {
				t.Errorf("when told, the step was counted %d times with %d jobs in flight; want it counted and ended", e.counted, e.inFlight)
			}
			if s := queuetest.Status(t, c, jid).GetStatus(); s != tt.state {
				t.Errorf("job in %s, want %s", queue.JobStateName(s), queue.JobStateName(tt.state))
			}
			if n := <-spansWhenOver; n != 1 {
				t.Errorf("%d spans exported when the step was over, want the step's", n)
			}
			found := false
			for _, kv := range exp.GetSpans()[0].Attributes {
				found = found || kv.Key == "test.learned" && kv.Value.AsString() == string(tt.step)
			}
			if !found {
				t.Errorf("the step's span lacks what the handler added when told: %v", exp.GetSpans()[0].Attributes)
			}
		})
	}
}
