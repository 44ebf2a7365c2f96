package stage

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/telemetry"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// WorkerState is what a worker reports and is told: whether it is paused
// or draining, the jobs it has in flight and how the jobs it finished
// ended. It is the worker's entry in the worker registry (kept current
// once Register is called), its StageService status, and its step
// metrics. A Runner keeps one. Its methods are safe for concurrent use.
type WorkerState struct {
	base    *v1.WorkerInfo // what does not change: id, host, service, stage, started...
	step    string         // the stage in metrics ("estimating")
	metrics *telemetry.Metrics

	mu       sync.Mutex
	paused   bool
	draining bool
	changed  chan struct{} // closed when paused or draining changes
	inFlight map[*Flight]struct{}
	idle     chan struct{} // closed when no job is in flight (nil: none asked)
	outcomes map[string]int64
	reg      *jobs.WorkerRegistration
}

// NewWorkerState returns the state of the worker info describes (its id,
// service, stage, version, concurrency and address; the host and start
// time are filled when missing). step names the stage in metrics; with
// metrics nil none are recorded.
func NewWorkerState(info *v1.WorkerInfo, step string, metrics *telemetry.Metrics) *WorkerState {
	base := proto.Clone(info).(*v1.WorkerInfo)
	if base.Host == "" {
		base.Host, _ = os.Hostname()
	}
	if base.Started == nil {
		base.Started = timestamppb.Now()
	}
	return &WorkerState{
		base: base, step: step, metrics: metrics,
		changed:  make(chan struct{}),
		inFlight: map[*Flight]struct{}{},
		outcomes: map[string]int64{},
	}
}

// ID is the worker's id in the registry.
func (s *WorkerState) ID() string { return s.base.GetId() }

// Register creates the worker's registry entry; from then on every change
// of the state is written to it (at most once a second) until Unregister.
func (s *WorkerState) Register(ctx context.Context, q *jobs.Client) error {
	registered := s.Status()
	reg, err := q.RegisterWorker(ctx, registered)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.reg = reg
	s.mu.Unlock()
	// A change made while the entry was being created is written now.
	if !proto.Equal(registered, s.Status()) {
		s.update()
	}
	return nil
}

// Unregister removes the worker's registry entry.
func (s *WorkerState) Unregister(ctx context.Context) error {
	s.mu.Lock()
	reg := s.reg
	s.reg = nil
	s.mu.Unlock()
	if reg == nil {
		return nil
	}
	return reg.Close(ctx)
}

// Status is the worker's entry now.
func (s *WorkerState) Status() *v1.WorkerInfo {
	w := proto.Clone(s.base).(*v1.WorkerInfo)
	s.fill(w)
	return w
}

// fill copies the live state into w.
func (s *WorkerState) fill(w *v1.WorkerInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Paused, w.Draining = s.paused, s.draining
	w.InFlight = w.InFlight[:0]
	for f := range s.inFlight {
		j := &v1.InFlightJob{JobId: f.jid, BatchId: f.bid, Since: timestamppb.New(f.since)}
		if f.gauge != nil {
			j.Progress = f.gauge.progress
		}
		w.InFlight = append(w.InFlight, j)
	}
	w.Outcomes = make(map[string]int64, len(s.outcomes))
	for k, v := range s.outcomes {
		w.Outcomes[k] = v
	}
}

// update says the registry entry changed. It is called without s.mu held:
// the registration calls fill under its own lock.
func (s *WorkerState) update() {
	s.mu.Lock()
	reg := s.reg
	s.mu.Unlock()
	if reg != nil {
		reg.Update(s.fill)
	}
}

// Pause makes the worker take no new job until Resume.
func (s *WorkerState) Pause() { s.set(func() { s.paused = true }) }

// Resume ends a pause.
func (s *WorkerState) Resume() { s.set(func() { s.paused = false }) }

// SetDraining makes the worker take no job for good (Resume does not undo it).
func (s *WorkerState) SetDraining() { s.set(func() { s.draining = true }) }

func (s *WorkerState) set(fn func()) {
	s.mu.Lock()
	fn()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.update()
}

// Paused reports whether the worker is paused.
func (s *WorkerState) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Draining reports whether the worker is draining.
func (s *WorkerState) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Taking reports whether the worker takes jobs now: neither paused nor draining.
func (s *WorkerState) Taking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.paused && !s.draining
}

// WaitRunnable blocks while the worker is paused; it returns nil once it
// is not, or is draining (the caller checks Draining), and ctx's error if
// ctx ends first.
func (s *WorkerState) WaitRunnable(ctx context.Context) error {
	for {
		s.mu.Lock()
		wait, ch := s.paused && !s.draining, s.changed
		s.mu.Unlock()
		if !wait {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// ErrStateChanged is the cause of a context of UntilChanged that ended
// because the worker was paused, resumed or set draining.
var ErrStateChanged = errors.New("worker paused, resumed or draining")

// UntilChanged returns a context that ends with ctx, or, with cause
// ErrStateChanged, at the next Pause, Resume or SetDraining: a wait for a
// job must end when the worker is paused meanwhile, not only at the next
// wait.
func (s *WorkerState) UntilChanged(ctx context.Context) (context.Context, context.CancelFunc) {
	s.mu.Lock()
	changed := s.changed
	s.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-changed:
			cancel(ErrStateChanged)
		case <-stop:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() { close(stop) })
		cancel(nil)
	}
}

// Flight is a job in flight, from Begin to End.
type Flight struct {
	s        *WorkerState
	jid, bid string
	since    time.Time
	step     telemetry.Step
	ended    bool // under s.mu
	// meter counts the bytes the step moves; gauge is its last measure
	// (under s.mu), nil until the step has lasted a progress interval.
	meter *Meter
	gauge *gauge
}

// Meter is the meter of the job's step.
func (f *Flight) Meter() *Meter { return f.meter }

// Begin says the worker took job jid of batch bid: it is in flight, in the
// registry and in the step metrics (ctx is the job's) until End.
func (s *WorkerState) Begin(ctx context.Context, jid, bid string) *Flight {
	f := &Flight{s: s, jid: jid, bid: bid, since: time.Now(), meter: NewMeter(s.step, s.metrics)}
	if s.metrics != nil {
		f.step = s.metrics.StartStep(ctx, s.step)
	}
	s.mu.Lock()
	s.inFlight[f] = struct{}{}
	s.mu.Unlock()
	s.update()
	return f
}

// End says how the job's step ended: it is counted under outcome, its step
// metrics end, and it is no longer in flight. Only the first End counts.
func (f *Flight) End(ctx context.Context, outcome telemetry.StepEnd) {
	s := f.s
	s.mu.Lock()
	if f.ended {
		s.mu.Unlock()
		return
	}
	f.ended = true
	delete(s.inFlight, f)
	s.outcomes[string(outcome)]++
	if len(s.inFlight) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	if s.metrics != nil {
		f.step.End(ctx, outcome)
	}
	s.update()
}

// MeasureProgress measures the meters of the jobs in flight every
// interval until ctx ends, and has the registry entry written when the
// figures of a job in flight for an interval or longer changed: at most
// one write an interval, none for quick steps or steps that move no bytes.
func (s *WorkerState) MeasureProgress(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if s.measure(now, every) {
				s.update()
			}
		}
	}
}

// measure takes one measure of the meters of the jobs in flight for every
// or longer; it reports whether any figure changed.
func (s *WorkerState) measure(now time.Time, every time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for f := range s.inFlight {
		if now.Sub(f.since) < every || !f.meter.touched() {
			continue
		}
		g, moved := f.meter.measure(now, f.gauge)
		f.gauge = g
		changed = changed || moved
	}
	return changed
}

// InFlight is how many jobs are in flight.
func (s *WorkerState) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inFlight)
}

// Idle returns a channel closed once no job is in flight.
func (s *WorkerState) Idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inFlight) == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	return s.idle
}

// CommitOutcome is how a step ended whose commit (or release) of a change
// meant to end as intended returned err: as intended; fenced when the job
// was lost; failed when its batch is gone and the job was failed instead;
// released when the commit failed otherwise and the job is given back.
func CommitOutcome(err error, intended telemetry.StepEnd) telemetry.StepEnd {
	var noBatch *queue.NoBatchError
	switch {
	case err == nil:
		return intended
	case errors.Is(err, queue.ErrFenced):
		return telemetry.EndFenced
	case errors.As(err, &noBatch) && noBatch.Failed:
		return telemetry.EndFailed
	default:
		return telemetry.EndReleased
	}
}
