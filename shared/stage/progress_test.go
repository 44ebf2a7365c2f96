package stage

import (
	"context"
	"io"
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
)

// progressOf is the progress the worker's status shows for job jid.
func progressOf(w *v1.WorkerInfo, jid string) *v1.Progress {
	for _, j := range w.GetInFlight() {
		if j.GetJobId() == jid {
			return j.GetProgress()
		}
	}
	return nil
}

func TestProgressIsReportedOnlyForStepsThatLastAnIntervalAndMoveBytes(t *testing.T) {
	s := newTestState(nil)
	ctx := context.Background()
	every := 5 * time.Second
	mover := s.Begin(ctx, "mover", "b1")
	silent := s.Begin(ctx, "silent", "b1")
	defer silent.End(ctx, telemetry.EndAdvanced)
	mover.Meter().Expect(1000)
	mover.Meter().Add(100)
	start := time.Now()

	// Before the step has lasted an interval: nothing to write.
	if s.measure(start.Add(every/2), every) || progressOf(s.Status(), "mover") != nil {
		t.Fatal("a step younger than the interval is measured")
	}
	// A quick step that moved bytes and ended before the interval never
	// shows (nor costs a write).
	quick := s.Begin(ctx, "quick", "b1")
	quick.Meter().Add(10)
	quick.End(ctx, telemetry.EndAdvanced)

	t1 := start.Add(every)
	if !s.measure(t1, every) {
		t.Fatal("the first measure of a moving step is no change")
	}
	p := progressOf(s.Status(), "mover")
	if p.GetBytesDone() != 100 || p.GetBytesExpected() != 1000 || p.GetPhase() != "estimating" || !p.GetMoved().AsTime().Equal(t1) {
		t.Fatalf("first progress: %v", p)
	}
	if progressOf(s.Status(), "silent") != nil {
		t.Error("a step that moves no bytes shows progress")
	}

	// 400 more bytes over 2 s: 200 bytes/s, 500 left, 2.5 s at that rate.
	mover.Meter().Add(400)
	t2 := t1.Add(2 * time.Second)
	if !s.measure(t2, every) {
		t.Fatal("bytes moved, yet no change")
	}
	p = progressOf(s.Status(), "mover")
	if p.GetBytesDone() != 500 || p.GetBytesPerSecond() != 200 || p.GetRemaining().AsDuration() != 3*time.Second || !p.GetMoved().AsTime().Equal(t2) {
		t.Fatalf("second progress: %v", p)
	}

	// Nothing moves: the rate falls to 0 (a change, once), moved stays.
	t3 := t2.Add(every)
	if !s.measure(t3, every) {
		t.Fatal("the rate fell to 0, yet no change")
	}
	if s.measure(t3.Add(every), every) {
		t.Error("a step that still does not move rewrote its entry")
	}
	p = progressOf(s.Status(), "mover")
	if p.GetBytesPerSecond() != 0 || p.GetRemaining() != nil || !p.GetMoved().AsTime().Equal(t2) || !p.GetUpdated().AsTime().Equal(t3.Add(every)) {
		t.Fatalf("a step not moving: %v", p)
	}

	// A file started again: its bytes come off done, the rate counts what arrived.
	mover.Meter().Undo(500)
	mover.Meter().Restarted(ctx)
	mover.Meter().Add(50)
	mover.Meter().Resumed(ctx)
	mover.Meter().Phase("unpacking", 2000)
	mover.Meter().Advance(20)
	t4 := t3.Add(2 * every) // 5 s after the last measure: 70 bytes arrived, 14 bytes/s
	s.measure(t4, every)
	p = progressOf(s.Status(), "mover")
	if p.GetPhase() != "unpacking" || p.GetBytesDone() != 20 || p.GetBytesExpected() != 2000 || p.GetRestarts() != 1 || p.GetResumes() != 1 || p.GetBytesPerSecond() != 14 {
		t.Fatalf("after a restart and a new phase: %v", p)
	}
}

func TestAMeteredReaderCountsWhatIsReadThroughIt(t *testing.T) {
	m := NewMeter("storing", nil)
	m.Expect(11)
	if data, err := io.ReadAll(m.Reader(strings.NewReader("eleven byte"))); err != nil || len(data) != 11 || m.Done() != 11 {
		t.Errorf("read %q, %v; done %d", data, err, m.Done())
	}
}

func TestANilMeterIsAMeterNobodyReads(t *testing.T) {
	var m *Meter
	m.Expect(1)
	m.Add(1)
	m.Advance(1)
	m.Undo(1)
	m.Resumed(context.Background())
	m.Restarted(context.Background())
	m.Phase("x", 1)
	r := strings.NewReader("x")
	if MeterOf(context.Background()) != nil || m.Done() != 0 || m.Reader(r) != io.Reader(r) {
		t.Error("no meter outside a step")
	}
}

// TestAStepThatMovesBytesShowsItsProgressInItsWorkerEntry runs a handler
// that moves bytes for several progress intervals: the replica's
// registry entry shows them moving while the step lasts.
func TestAStepThatMovesBytesShowsItsProgressInItsWorkerEntry(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	release := make(chan struct{})
	startRunner(t, c, Config{ProgressInterval: 50 * time.Millisecond, Concurrency: 1,
		Handler: func(ctx context.Context, claim Job) Outcome {
			m := MeterOf(ctx)
			m.Expect(1 << 20)
			for {
				select {
				case <-release:
					return Next(jobs.Change{})
				case <-time.After(5 * time.Millisecond):
					if m.Done() < 1<<20-1024 {
						m.Add(1024)
					}
				}
			}
		}})
	jid := queuetest.Spawn(t, c, newJobs(1)[0], queue.Estimating)
	seen := map[int64]bool{}
	queuetest.Eventually(t, "the entry shows the bytes moving", func() bool {
		ws, err := admin.New(c).Queue.ListWorkers(context.Background())
		if err != nil || len(ws) != 1 {
			return false
		}
		p := progressOf(ws[0], jid)
		if p.GetBytesExpected() == 1<<20 && p.GetBytesPerSecond() > 0 {
			seen[p.GetBytesDone()] = true
		}
		return len(seen) >= 3
	})
	close(release)
	queuetest.WaitState(t, c, jid, queue.Provisioning)
}
