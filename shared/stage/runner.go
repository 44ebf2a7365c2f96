// Package stage runs a pipeline stage: it takes jobs of one state from the
// queue (woken by watches), runs up to N handlers at once, and commits each
// handler's outcome as one fenced transition. A stage service only writes
// its Handler.
package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/telemetry"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Handler does one stage's work on one claimed job. ctx ends when the job's
// lock or session is lost, or when a drain runs out of time; the handler
// should stop then (its outcome will not be committed). It also ends once
// the step is over, after its span. The job's data is
// claim.Data(); claim.Update writes data that must land before the step
// ends (an ARK, say).
type Handler func(ctx context.Context, claim Job) Outcome

// Job is what a handler uses of its claimed job (a *jobs.Claim, which the
// runner commits). A handler decides; the runner commits its Outcome,
// so committing and releasing are not here. Being an interface, a
// handler's logic can be tested without ZooKeeper.
type Job interface {
	// ID is the job's id.
	ID() string
	// State is the state the job was in when it was claimed.
	State() queue.JobState
	// Data is the job's data as read with the claim (the parts the
	// stage's consumer reads), and what Load and LoadManifest read since.
	Data() *v1.Job
	// Load reads the data nodes of parts not read yet; an unreadable
	// node is an error wrapping queue.ErrCorrupt.
	Load(ctx context.Context, parts queue.Parts) error
	// LoadManifest reads the job's file list (nil if it has none), once.
	LoadManifest(ctx context.Context) (*v1.Manifest, error)
	// WorkingDir is the job's working folder: the one its configuration
	// names, else its place under workRoot.
	WorkingDir(ctx context.Context, workRoot string) (string, error)
	// Update writes ch's data at once, keeping the job (ch.To is ignored).
	Update(ctx context.Context, ch jobs.Change) error
	// MintFromCounter makes the job's primary id from the next number of
	// a shared counter (the existing one, if the job has one).
	MintFromCounter(ctx context.Context, counter string, makeID func(n int64) string) (string, error)
}

var _ Job = (*jobs.Claim)(nil)

// Outcome is what a handler decided; build it with Next, To, Fail, Wait or Release.
type Outcome struct {
	kind      outcomeKind
	change    jobs.Change
	after     time.Duration
	committed func()
	ended     func(telemetry.StepEnd, error)
	over      func()
}

// OnCommitted returns the outcome with f to be called once its change is
// committed (not after a release, a lost job or a failed commit).
func (o Outcome) OnCommitted(f func()) Outcome {
	o.committed = f
	return o
}

// OnEnd returns the outcome with f to be called once the runner is done
// with it, however that went, so that the handler can tell someone how its
// decision ended: f gets how the step ended, as the stage's metrics count
// it, and the error that kept the outcome from being written as decided
// (nil when it was): the commit's or the release's error, an error
// wrapping queue.ErrFenced when the job was lost first, ErrDrainDeadline
// when a drain ran out of time first. f runs after the step was counted
// and left the jobs in flight, and before the step's span (the handler's
// context's) ends, so f may add to the span what it learned.
func (o Outcome) OnEnd(f func(step telemetry.StepEnd, err error)) Outcome {
	o.ended = f
	return o
}

// AfterEnd returns the outcome with f to be called once the step is over
// entirely: after OnEnd's function, and after the step's span ended, so
// that whoever f tells finds the step's trace complete. (The handler's
// context may end before: it ends with the job's lock, which a commit can
// release.)
func (o Outcome) AfterEnd(f func()) Outcome {
	o.over = f
	return o
}

// Change is the change the outcome writes (its To is the handler's
// state for To and Fail, and zero for Next, whose state is the stage's).
func (o Outcome) Change() jobs.Change { return o.change }

// String says what the outcome does: "next", "to Held", "wait 30s" or
// "release", and the change's message after a colon.
func (o Outcome) String() string {
	var s string
	switch o.kind {
	case kindNext:
		s = "next"
	case kindTo:
		s = "to " + queue.JobStateName(o.change.To)
	case kindWait:
		s = "wait " + o.after.String()
	case kindRelease:
		s = "release"
	}
	if o.change.Message != "" {
		s += ": " + o.change.Message
	}
	return s
}

type outcomeKind int

const (
	kindNext outcomeKind = iota
	kindTo
	kindWait
	kindRelease
)

// Next moves the job to the stage's next state, writing ch's data in the
// same transition (ch.To is ignored).
func Next(ch jobs.Change) Outcome { return Outcome{kind: kindNext, change: ch} }

// To moves the job to a state of the handler's choosing (Held, say).
func To(state queue.JobState, ch jobs.Change) Outcome {
	ch.To = state
	return Outcome{kind: kindTo, change: ch}
}

// Fail moves the job to Failed; message says what failed.
func Fail(message string) Outcome {
	return Outcome{kind: kindTo, change: jobs.Change{To: queue.Failed, Message: message}}
}

// Failf is Fail with formatting.
func Failf(format string, args ...any) Outcome { return Fail(fmt.Sprintf(format, args...)) }

// Wait leaves the job in its state to be tried again after d. When the
// state allows staying (Provisioning, Storing do) and ch says why (a
// Message), the stay is committed with ch's data, an entry of the job's
// history; otherwise the job is only released.
func Wait(d time.Duration, ch jobs.Change) Outcome {
	return Outcome{kind: kindWait, change: ch, after: d}
}

// Release gives the job back untouched, for another consumer to take.
func Release() Outcome { return Outcome{kind: kindRelease} }

// Config describes a stage.
type Config struct {
	// Service names the stage's service ("estimator").
	Service string
	// Name is the stage as a verb in spans and metrics ("estimating").
	Name string
	// From is the state the stage takes jobs from; To the state success leads to.
	From, To queue.JobState
	// Concurrency is how many jobs run at once (default 4).
	Concurrency int
	// Parts are the job's data nodes to read with each claim (default all
	// but the manifest). The trace context comes with the status, so a stage
	// that needs nothing else may ask for queue.PartsStatusOnly.
	Parts queue.Parts
	// HoldCollections moves a job of a held collection to Held instead of
	// handling it (the spec's rule for Pending jobs).
	HoldCollections bool
	// Spread is how many jobs at the head of the queue a take picks from at
	// random (jobs.ConsumerOptions.Spread; default 8). 1 takes jobs in
	// strict priority order, as the provisioner wants.
	Spread int
	// InOrder hands jobs to the handler one at a time, in the order they
	// were picked from the queue (the provisioner weighs jobs in queue
	// order); their claims and commits still overlap, Concurrency at once.
	InOrder bool
	// OnDemand makes a stage that takes a job only when asked, one for
	// each Runner.Take call (the recorder's, for the inventories that ask
	// for jobs): it runs no workers of its own, so Concurrency must be 0,
	// and its registry entry says 0, and Handler may be nil. Take serves a
	// stage with workers too, beside them.
	OnDemand bool

	Handler Handler
	Logger  *slog.Logger
	Tracer  trace.Tracer       // default: no spans
	Metrics *telemetry.Metrics // default: none
	Version string
	// Address is where other processes reach this replica's StageService,
	// written to its registry entry ("": not known).
	Address string
	// ProgressInterval is how often the progress of the jobs in flight is
	// measured and, when it changed, written to the registry entry
	// (default DefaultProgressInterval).
	ProgressInterval time.Duration
}

// Runner runs a stage against one queue client.
type Runner struct {
	q        *jobs.Client
	cfg      Config
	consumer *jobs.Consumer
	log      *slog.Logger
	state    *WorkerState // paused, draining, jobs in flight, outcomes

	// then is the runner of the next stage in this process, if any: a job
	// this stage moves on goes straight to it, its lock kept (chain).
	then *Runner

	taking     context.Context    // ends when the runner takes no more jobs (Drain, Run's end)
	stopTaking context.CancelFunc // ends taking, and the waits for the next job

	mu       sync.Mutex
	stopped  bool               // Run waits for the jobs in flight: Take adds none
	abort    context.CancelFunc // ends every job in flight
	abortCtx context.Context
	wg       sync.WaitGroup
	done     chan struct{}
}

// New prepares a runner; Run starts it.
func New(q *jobs.Client, cfg Config) (*Runner, error) {
	if (cfg.Handler == nil && !cfg.OnDemand) || cfg.From == 0 || cfg.To == 0 || cfg.Name == "" || cfg.Service == "" {
		return nil, errors.New("stage: Config needs Service, Name, From, To and Handler")
	}
	switch {
	case cfg.OnDemand && cfg.Concurrency != 0:
		return nil, fmt.Errorf("stage %s: a stage that takes jobs on demand has no workers of its own (Concurrency %d)", cfg.Name, cfg.Concurrency)
	case cfg.OnDemand && cfg.InOrder:
		return nil, fmt.Errorf("stage %s: a stage that takes jobs on demand hands them over as they are asked for, not InOrder", cfg.Name)
	case cfg.Concurrency <= 0 && !cfg.OnDemand:
		cfg.Concurrency = 4
	}
	if cfg.HoldCollections {
		// The hold key (collection) is in the configuration.
		if cfg.Parts == queue.PartsStatusOnly {
			cfg.Parts = 0
		}
		if cfg.Parts != 0 {
			cfg.Parts |= queue.PartConfiguration
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	r := &Runner{
		q:        q,
		cfg:      cfg,
		consumer: q.NewConsumer(cfg.From, jobs.ConsumerOptions{Parts: cfg.Parts, Spread: cfg.Spread, InOrder: cfg.InOrder}),
		log:      cfg.Logger.With("stage", cfg.Name),
		state: NewWorkerState(&v1.WorkerInfo{Id: q.NewWorkerID(cfg.Service), Service: cfg.Service, Stage: queue.JobStateName(cfg.From),
			Version: cfg.Version, Concurrency: int32(cfg.Concurrency), Address: cfg.Address}, cfg.Name, cfg.Metrics),
		done: make(chan struct{}),
	}
	r.abortCtx, r.abort = context.WithCancel(context.Background())
	r.taking, r.stopTaking = context.WithCancel(context.Background())
	return r, nil
}

// WorkerID is this replica's id in the worker registry.
func (r *Runner) WorkerID() string { return r.state.ID() }

// Run registers the replica, takes and handles jobs until Drain (or ctx
// ending) stops it, and returns when every job it took has been committed
// or released.
func (r *Runner) Run(ctx context.Context) error {
	defer close(r.done)
	// Taking ends with ctx, or at Drain; the workers' waits with it.
	defer r.stopTaking()
	if err := r.state.Register(ctx, r.q); err != nil {
		return fmt.Errorf("stage %s: %w", r.cfg.Name, err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		r.state.Unregister(closeCtx)
	}()
	measureCtx, stopMeasuring := context.WithCancel(ctx)
	defer stopMeasuring()
	go r.state.MeasureProgress(measureCtx, r.cfg.ProgressInterval)
	stopWithCtx := context.AfterFunc(ctx, r.stopTaking)
	defer stopWithCtx()
	takeCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	stopWithTaking := context.AfterFunc(r.taking, stopWork)
	defer stopWithTaking()
	r.log.Info("stage running", "worker", r.state.ID(), "from", queue.JobStateName(r.cfg.From), "to", queue.JobStateName(r.cfg.To),
		"concurrency", r.cfg.Concurrency, "on_demand", r.cfg.OnDemand)

	// Each of Concurrency workers takes a job and handles it, then the
	// next: claims overlap (a claim is two round trips to ZooKeeper), so a
	// stage takes jobs as fast as it finishes them.
	for range r.cfg.Concurrency {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.work(takeCtx)
		}()
	}
	// The workers stop taking when takeCtx ends; so do Take calls, whose
	// jobs are waited for with the workers'.
	<-r.taking.Done()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.wg.Wait()
	r.log.Info("stage stopped", "worker", r.state.ID())
	return nil
}

// work takes and handles jobs one at a time until takeCtx ends.
func (r *Runner) work(takeCtx context.Context) {
	for {
		if err := r.state.WaitRunnable(takeCtx); err != nil || r.state.Draining() {
			return
		}
		claim, err := r.next(takeCtx)
		switch {
		case takeCtx.Err() != nil:
			if err == nil {
				r.handle(claim, r.cfg.Handler) // taken as the drain began: finish it
			}
			return
		case errors.Is(err, errPaused):
			continue
		case err != nil:
			r.log.Warn("taking a job", "error", err)
			select {
			case <-time.After(time.Second):
			case <-takeCtx.Done():
			}
			continue
		}
		r.handle(claim, r.cfg.Handler)
	}
}

var errPaused = errors.New("replica paused")

// next waits for a job, giving up when the replica is paused meanwhile (a
// pause must stop a replica that is already waiting, not only the next wait).
func (r *Runner) next(ctx context.Context) (*jobs.Claim, error) {
	ctx, cancel := r.state.UntilChanged(ctx)
	defer cancel()
	claim, err := r.consumer.Next(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrStateChanged) {
		return nil, errPaused
	}
	return claim, err
}

// ErrNotRunning: Take was called while the runner takes no jobs: it
// drains, or it has stopped.
var ErrNotRunning = errors.New("stage not running")

// Take takes one job on demand, for its caller: beside the runner's own
// workers, if it has any, it waits for a job as they do, and hands the job
// it takes to h, which stands for the stage's Handler for that job (h
// learns whom the job is for from what it was made with, and may hand the
// job on to them). The runner's rules, span, in-flight count and commit
// are around h as around the stage's Handler.
//
// Take waits up to wait for a job (0: it takes one only if one is free
// now), and returns true as soon as h has the job; false and no error when
// no job came in time or the runner stayed paused (Pause) for the whole
// wait; ErrNotRunning when the runner does not take jobs; ctx's error when
// ctx ended. A job the runner's rules decide without a handler (unreadable
// data fails it; a held collection holds it) is not h's: Take goes on
// waiting for another.
func (r *Runner) Take(ctx context.Context, wait time.Duration, h Handler) (bool, error) {
	r.mu.Lock()
	if r.stopped || r.taking.Err() != nil || r.state.Draining() {
		r.mu.Unlock()
		return false, ErrNotRunning
	}
	// Counted from here, so that Run, which stops taking before it waits,
	// waits for this call and its job.
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()

	callCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.taking, cancel)
	defer stop()
	waitCtx := ctx
	if wait > 0 {
		var cancelWait context.CancelFunc
		waitCtx, cancelWait = context.WithTimeout(ctx, wait)
		defer cancelWait()
	}
	for {
		claim, err := r.takeOne(waitCtx, wait > 0)
		switch {
		case claim != nil && r.state.Draining():
			// Taken as the drain began: the job stays free.
			r.releaseUntouched(claim)
			return false, ErrNotRunning
		case claim != nil:
			if r.handOver(claim, h) {
				return true, nil
			}
		case r.taking.Err() != nil || r.state.Draining():
			return false, ErrNotRunning
		case callCtx.Err() != nil:
			return false, context.Cause(callCtx)
		case err == nil || waitCtx.Err() != nil:
			return false, nil
		default:
			return false, err
		}
	}
}

// takeOne waits for a job until ctx ends, as a worker does, or only
// tries to take one now (wait false). It returns no job and no error when
// the runner is paused or draining for the whole wait.
func (r *Runner) takeOne(ctx context.Context, wait bool) (*jobs.Claim, error) {
	if !wait {
		if !r.state.Taking() {
			return nil, nil
		}
		if paused, err := r.q.Paused(ctx); err != nil || paused {
			return nil, err
		}
		claim, _, err := r.consumer.TryNext(ctx)
		return claim, err
	}
	for {
		if err := r.state.WaitRunnable(ctx); err != nil || r.state.Draining() {
			return nil, nil
		}
		claim, err := r.next(ctx)
		if !errors.Is(err, errPaused) {
			return claim, err
		}
	}
}

// handOver handles a job taken for Take with h in a job slot of its own,
// and reports whether h got the job (false: the runner's rules decided).
func (r *Runner) handOver(claim *jobs.Claim, h Handler) bool {
	started, ended := make(chan struct{}), make(chan struct{})
	r.wg.Add(1) // Take's own count keeps the group above zero meanwhile
	go func() {
		defer r.wg.Done()
		defer close(ended)
		r.handle(claim, func(ctx context.Context, cl Job) Outcome {
			close(started)
			return h(ctx, cl)
		})
	}()
	select {
	case <-started:
	case <-ended:
	}
	select {
	case <-started:
		return true
	default:
		return false
	}
}

// releaseUntouched gives back a job no handler has seen.
func (r *Runner) releaseUntouched(claim *jobs.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := claim.Release(ctx); err != nil {
		r.log.Warn("giving back a job taken as the drain began", "job", claim.ID(), "error", err)
	}
}

// handle runs h (the stage's Handler, or a Take call's) on one claim and
// commits its outcome.
func (r *Runner) handle(claim *jobs.Claim, h Handler) {
	if !r.cfg.InOrder {
		r.finish(r.handleOnly(claim, h))
		return
	}
	// A job lost while it waits is dealt with as any lost job: its
	// handler sees its context ended and nothing is committed.
	r.consumer.WaitTurn(claim.Context(), claim)
	handled := r.handleOnly(claim, h)
	r.consumer.PassTurn(claim)
	r.finish(handled)
}

// handled is a job whose handler has returned and whose outcome is not
// committed yet.
type handled struct {
	claim   *jobs.Claim
	ctx     context.Context
	outcome Outcome
	end     func(telemetry.StepEnd, error) // ends the step's span, metrics and tracking
}

// handleOnly runs handler on one claim; finish commits its outcome.
func (r *Runner) handleOnly(claim *jobs.Claim, handler Handler) handled {
	job := claim.Job
	jid, bid := job.GetId(), job.GetBid()
	if bid == "" {
		bid = job.GetConfiguration().GetBatchId()
	}
	// The job's context ends with its lock or session, or on an aborted drain.
	jobCtx, cancel := context.WithCancelCause(claim.Context())
	stopAbort := context.AfterFunc(r.abortCtx, func() { cancel(ErrDrainDeadline) })
	jobCtx = telemetry.WithJob(jobCtx, jid, bid)
	traceparent := job.GetStatus().GetTraceparent()
	if traceparent == "" {
		traceparent = job.GetConfiguration().GetTraceparent()
	}
	jobCtx, span := telemetry.StartJobSpan(jobCtx, r.cfg.Tracer, r.cfg.Name, jid, bid, traceparent)
	flight := r.state.Begin(jobCtx, jid, bid)
	jobCtx = WithMeter(jobCtx, flight.Meter())
	h := handled{claim: claim, ctx: jobCtx}
	h.outcome = r.decide(jobCtx, claim, handler)
	h.end = func(result telemetry.StepEnd, err error) {
		flight.End(jobCtx, result)
		if result == telemetry.EndFailed {
			span.SetStatus(codes.Error, h.outcome.change.Message)
		}
		if h.outcome.ended != nil {
			h.outcome.ended(result, err)
		}
		span.End()
		stopAbort()
		cancel(nil)
		if h.outcome.over != nil {
			h.outcome.over()
		}
	}
	return h
}

// finish commits a handled job's outcome, and hands the job to the next
// stage's runner when it took it over.
func (r *Runner) finish(h handled) {
	result, next, err := r.commit(h.ctx, h.claim, h.outcome)
	h.end(result, err)
	if next != nil {
		next.handle(h.claim, next.cfg.Handler)
	}
}

// Chain makes the runner hand each job it moves on to next, when next
// takes jobs from the state this runner moves them to: the job is
// committed with its lock kept and next's handler works on it at once,
// without a claim or a watch in between. A job goes on alone, lock
// released, while next is paused or either runner drains, and always to a
// runner that takes jobs InOrder. A chained job runs in this runner's
// slot, beside next's own Concurrency.
func (r *Runner) Chain(next *Runner) error {
	if next.cfg.From != r.cfg.To || next.q != r.q {
		return fmt.Errorf("stage: %s cannot hand jobs to %s: it moves them to %s, %s takes %s (or another client)",
			r.cfg.Name, next.cfg.Name, queue.JobStateName(r.cfg.To), next.cfg.Name, queue.JobStateName(next.cfg.From))
	}
	r.then = next
	return nil
}

// takesHandOver reports whether the runner takes a job handed over now.
func (r *Runner) takesHandOver() bool {
	return r != nil && !r.cfg.InOrder && !r.cfg.OnDemand && r.state.Taking()
}

// decide runs the rules that come before the handler, then the handler.
func (r *Runner) decide(ctx context.Context, claim *jobs.Claim, handler Handler) (out Outcome) {
	if claim.LoadErr != nil {
		r.log.ErrorContext(ctx, "job data unreadable", "error", claim.LoadErr)
		return Failf("job data unreadable: %v", claim.LoadErr)
	}
	if r.cfg.HoldCollections {
		if coll := collectionOf(claim.Job); coll != "" {
			held, err := r.q.CollectionHeld(ctx, coll)
			if err != nil {
				return Release()
			}
			if held {
				return To(queue.Held, jobs.Change{Message: fmt.Sprintf("collection %s is held", coll)})
			}
		}
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.ErrorContext(ctx, "handler panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			out = Failf("internal error in %s: %v", r.cfg.Name, p)
		}
	}()
	return handler(ctx, claim)
}

// collectionOf is the hold key of a job: the collection written by the
// batcher, or the profile name for jobs a peer created.
func collectionOf(job *v1.Job) string {
	if c := job.GetConfiguration().GetCollection(); c != "" {
		return c
	}
	return job.GetConfiguration().GetProfileName()
}

// ErrDrainDeadline is the cause of a handler's context ended because a
// drain ran out of time: the job is given back untouched.
var ErrDrainDeadline = errors.New("stage draining: out of time")

// commit applies an outcome (apply) and says how it ended, which runner
// took the job over (nil: none), and what kept it from being written as
// decided (nil: nothing). The object locks the outcome names
// (Change.Unlock) are released by the commit, or after it when it did not
// happen. A job lost while its handler worked is the claim's to refuse:
// it sends nothing for it.
func (r *Runner) commit(ctx context.Context, claim *jobs.Claim, out Outcome) (_ telemetry.StepEnd, next *Runner, _ error) {
	// Commits must go through even if the drain deadline passed while the
	// handler returned; only a lost lock (claim context) stops them.
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	defer func() {
		for _, l := range out.change.Unlock {
			if l == nil {
				continue
			}
			if err := l.Unlock(commitCtx); err != nil {
				r.log.WarnContext(ctx, "releasing an object lock", "error", err)
			}
		}
	}()
	if ctx.Err() != nil && claim.Context().Err() == nil {
		// Aborted by a drain: give the job back untouched.
		if err := claim.Release(commitCtx); err != nil {
			r.log.WarnContext(ctx, "releasing job at drain", "error", err)
		}
		r.log.InfoContext(ctx, "job released untouched: drain ran out of time")
		return telemetry.EndReleased, nil, context.Cause(ctx)
	}
	// A claim lost already refuses the outcome without sending it.
	lost := claim.Context().Err() != nil
	result, next, wrote, err := r.apply(commitCtx, claim, out)
	if err == nil {
		if out.committed != nil && wrote {
			out.committed()
		}
		return result, next, nil
	}
	switch result = CommitOutcome(err, result); {
	case result == telemetry.EndFenced && lost:
		cause := context.Cause(claim.Context())
		r.log.WarnContext(ctx, "job lost while working on it; not committing", "cause", cause)
		err = fmt.Errorf("%w: the job was lost before its outcome was committed: %v", queue.ErrFenced, cause)
	case result == telemetry.EndFenced:
		r.log.WarnContext(ctx, "commit refused: the job was lost", "error", err)
	case result == telemetry.EndFailed:
		// Retrying would fail every time: the job was failed instead.
		r.log.ErrorContext(ctx, "job failed: its batch does not exist", "error", err)
	default:
		r.log.ErrorContext(ctx, "commit failed; releasing the job", "error", err)
		claim.Release(commitCtx)
	}
	return result, nil, err
}

// apply makes the claim's call an outcome stands for: a commit of its
// change (handed to the next runner when it takes the job over), or a
// release. It says how the step ended if the call succeeds, and whether
// the outcome's change was written (not a release).
func (r *Runner) apply(ctx context.Context, claim *jobs.Claim, out Outcome) (result telemetry.StepEnd, next *Runner, wrote bool, err error) {
	ch := out.change
	ch.By = r.state.ID()
	switch out.kind {
	case kindRelease:
		return telemetry.EndReleased, nil, false, claim.Release(ctx)
	case kindWait:
		defer r.consumer.Defer(claim.ID(), time.Now().Add(out.after))
		if !queue.CanMoveJob(claim.State(), claim.State()) || ch.Message == "" {
			return telemetry.EndRetried, nil, false, claim.Release(ctx)
		}
		ch.To = claim.State()
		return telemetry.EndRetried, nil, true, claim.Commit(ctx, ch)
	case kindNext:
		ch.To = r.cfg.To
	}
	if out.kind == kindNext && !r.state.Draining() && r.then.takesHandOver() {
		var kept bool
		if kept, err = r.then.consumer.TakeOver(ctx, claim, ch); kept {
			next = r.then
		}
	} else {
		err = claim.Commit(ctx, ch)
	}
	result = telemetry.EndAdvanced
	if ch.To == queue.Failed {
		result = telemetry.EndFailed
		r.log.WarnContext(ctx, "job failed", "message", ch.Message)
	} else if ch.To != r.cfg.To {
		r.log.InfoContext(ctx, "job moved", "to", queue.JobStateName(ch.To), "message", ch.Message)
	}
	return result, next, true, err
}

// Status reports this replica.
func (r *Runner) Status() *v1.WorkerInfo { return r.state.Status() }

// Pause stops taking new jobs; jobs in flight finish.
func (r *Runner) Pause() { r.state.Pause() }

// Resume takes jobs again after Pause.
func (r *Runner) Resume() { r.state.Resume() }

// Drain stops taking jobs for good and waits for the jobs in flight until
// ctx ends; then it cancels them, gives their jobs back untouched, and waits
// for the handlers to return. It returns how many jobs were still running
// when ctx ended (0: all finished in time).
func (r *Runner) Drain(ctx context.Context) int {
	r.state.SetDraining()
	r.stopTaking()
	select {
	case <-r.done:
		return 0
	case <-ctx.Done():
	}
	left := r.state.InFlight()
	r.abort()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.log.Error("handlers ignored cancellation; their locks go with the session", "in_flight", left)
	}
	return left
}

// Done is closed when Run has returned.
func (r *Runner) Done() <-chan struct{} { return r.done }
