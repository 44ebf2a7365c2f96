// Package lease hands jobs in Recording to recorders for a limited time: a
// lease holds the job's lock and the object's inventory lock until it is
// completed, failed, or expires, when both are released and the job goes
// to the next caller. The RecordingService and the built-in recorder share
// one Manager.
//
// A lease is a step of the recording stage: the Manager is the handler of
// one stage.Runner (Recording → Notify), which takes the jobs, fails those
// whose data is unreadable, starts each step's span in the job's trace,
// keeps the jobs in flight in the worker registry and commits what the
// lease ends with. The runner takes a job for each Lease call (on demand),
// and, with the built-in recorder on, for the built-in recorder, as many
// at once as its concurrency. The Manager is the replica's stage.Worker:
// StageService pauses, resumes and drains it as any stage runner.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/telemetry"
)

// Errors of lease operations; each returned error also names the lease.
var (
	// ErrUnknown: no such lease was ever handed out here (or it ended
	// long ago).
	ErrUnknown = errors.New("unknown lease")
	// ErrEnded: the lease expired, lost its job, or was completed or failed.
	ErrEnded = errors.New("lease has ended")
	// ErrStopping: the recorder is stopping and hands out no lease.
	ErrStopping = errors.New("recorder is stopping")
)

// Lease is a job leased to a recorder.
type Lease struct {
	ID          string
	Expires     time.Time
	JobID       string
	BatchID     string
	ARK         string
	ManifestURL string
	// Version is the number of the stored version, 0 when the job does not
	// say (a peer processed it).
	Version  int
	Mode     string
	LocalIDs []string
	// Traceparent is the lease's span in the job's trace, for the caller
	// to continue (see LeaseResponse).
	Traceparent string
	// What the job says of the object, for an inventory to record.
	Collection string
	Profile    string
	ERC        *v1.Metadata
}

// Recorder records leased versions itself: the built-in recorder.
type Recorder interface {
	// LeaseLength is how long its leases last before it renews them.
	LeaseLength() time.Duration
	// Record records l's version and ends l with m.Complete or m.Fail,
	// renewing it meanwhile. ctx ends when the lease's job is given back.
	Record(ctx context.Context, m *Manager, l *Lease)
}

// Options tune a Manager.
type Options struct {
	// DefaultDuration is a lease's duration when the caller gives none
	// (default 5 min).
	DefaultDuration time.Duration
	// MaxWait caps how long Lease waits for a job (default 60 s).
	MaxWait time.Duration
	// LockRetry is how long a job whose object another recorder is
	// recording is left alone (default 2 s).
	LockRetry time.Duration
	Logger    *slog.Logger
	// Tracer, if set, gives each lease a "recording" span in its job's
	// trace, from lease to completion; Metrics counts leases like a stage's steps.
	Tracer  trace.Tracer
	Metrics *telemetry.Metrics
	// Recorder, if set, records jobs without being asked: the manager
	// takes jobs for it, Concurrency at once (default 4), besides those
	// Lease calls ask for. Without it the manager takes a job only for a
	// Lease call, and its worker entry says concurrency 0.
	Recorder    Recorder
	Concurrency int
	// Address is where the manager's StageService is reached, for its
	// worker entry.
	Address string
	// Version is the recorder's build version, for its registry entry.
	Version string
}

// Manager hands out leases on the jobs of one queue client.
type Manager struct {
	q      *jobs.Client
	runner *stage.Runner // takes the jobs and commits how their leases end
	opts   Options
	log    *slog.Logger

	mu     sync.Mutex
	leases map[string]*held
	ended  map[string]tombstone // why recent leases ended
}

var _ stage.Worker = (*Manager)(nil)

// held is a live lease with what it holds.
type held struct {
	Lease
	ctx   context.Context // the job's step: its span; ends when the job is lost or the drain runs out of time
	lock  *jobs.ObjectLock
	timer *time.Timer
	// end receives how the lease ended, once, from whoever took it out of
	// the table (endLease); the step's handler waits for it.
	end chan ending
}

// ending is how a lease ended: what the runner commits, and who waits for
// the commit.
type ending struct {
	outcome stage.Outcome
	why     string // the tombstone's
	expired bool
	// Complete and Fail wait on reply for the commit's result (nil: no
	// one waits), intended being how the step ends if it succeeds.
	reply    chan error
	intended telemetry.StepEnd
}

// asker is whom a job is leased to: a Lease call, or the built-in
// recorder when answer is nil.
type asker struct {
	d    time.Duration
	link trace.Link // the Lease call's span
	// answer gets the lease, or, with none, why (nil: the job was not
	// leasable; the call takes another).
	answer chan leased
}

type leased struct {
	lease *Lease
	err   error
}

type tombstone struct {
	why string
	at  time.Time
}

// Tombstones are kept this long (and at most maxTombstones of them), so a
// late Complete learns why its lease ended instead of "unknown".
const (
	tombstoneTTL  = time.Hour
	maxTombstones = 10000
)

// Why a lease whose job's step ended under it is over.
const (
	lostReason    = "the job's lock was lost (ZooKeeper session or lock node gone)"
	stoppedReason = "the recorder stopped"
)

// New returns a Manager taking jobs in Recording from q; Run starts it.
func New(q *jobs.Client, opts Options) (*Manager, error) {
	if opts.DefaultDuration <= 0 {
		opts.DefaultDuration = 5 * time.Minute
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = time.Minute
	}
	if opts.LockRetry <= 0 {
		opts.LockRetry = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	m := &Manager{q: q, opts: opts, log: opts.Logger, leases: map[string]*held{}, ended: map[string]tombstone{}}
	cfg := stage.Config{Service: "recorder", Name: "recording", From: queue.Recording, To: queue.Notify,
		Parts:  queue.PartConfiguration | queue.PartIdentifiers | queue.PartInventory | queue.PartBid | queue.PartMetadata,
		Logger: opts.Logger, Tracer: opts.Tracer, Metrics: opts.Metrics, Version: opts.Version, Address: opts.Address}
	if opts.Recorder != nil {
		cfg.Concurrency = opts.Concurrency
		builtin := asker{d: opts.Recorder.LeaseLength()}
		cfg.Handler = func(ctx context.Context, claim stage.Job) stage.Outcome { return m.hold(ctx, claim, builtin) }
	} else {
		cfg.OnDemand = true
	}
	r, err := stage.New(q, cfg)
	if err != nil {
		return nil, err
	}
	m.runner = r
	return m, nil
}

// Run registers the manager in the worker registry and takes jobs, for the
// built-in recorder and for Lease calls, until Drain (or ctx ending) stops
// it; it returns when every lease has ended and its job is committed or
// given back.
func (m *Manager) Run(ctx context.Context) error { return m.runner.Run(ctx) }

// Status reports the manager as a worker: its leases out, the leases ended
// since start by outcome, paused and draining.
func (m *Manager) Status() *v1.WorkerInfo { return m.runner.Status() }

// Lease waits up to wait (capped by MaxWait and ctx) for a job in Recording
// and leases it for d (0: the default). With no job in time it returns nil
// and no error; so it does while the manager is paused, as when the whole
// queue is. With no wait it takes a job only if one is free now.
func (m *Manager) Lease(ctx context.Context, wait, d time.Duration) (*Lease, error) {
	if d <= 0 {
		d = m.opts.DefaultDuration
	}
	wait = min(wait, m.opts.MaxWait)
	deadline := time.Now().Add(wait)
	// The Lease call's own span (the caller's trace) is linked, not parent.
	a := asker{d: d, link: trace.LinkFromContext(ctx), answer: make(chan leased, 1)}
	handler := func(ctx context.Context, claim stage.Job) stage.Outcome { return m.hold(ctx, claim, a) }
	for {
		left := time.Until(deadline)
		if wait > 0 && left <= 0 {
			return nil, nil
		}
		took, err := m.runner.Take(ctx, max(left, 0), handler)
		switch {
		case errors.Is(err, stage.ErrNotRunning):
			return nil, ErrStopping
		case err != nil:
			return nil, err
		case !took:
			return nil, nil // nothing to record within the wait
		}
		select {
		case got := <-a.answer:
			if got.lease != nil || got.err != nil {
				return got.lease, got.err
			}
			// The job was failed or left for later: take another.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// hold is the stage's handler for a job taken for a: it leases the job,
// hands the lease to a, and waits for the lease to end; then it returns
// what the runner commits.
func (m *Manager) hold(ctx context.Context, claim stage.Job, a asker) stage.Outcome {
	job := claim.Data()
	ark, manifest := job.GetIdentifiers().GetPrimaryId(), job.GetInventory().GetManifestUrl()
	switch {
	case ark == "":
		return a.skipped(stage.Fail("cannot record: the job has no ARK (identifiers.primary_id); processing did not finish"), nil)
	case manifest == "":
		return a.skipped(stage.Fail("cannot record: the job has no inventory manifest_url; processing did not finish"), nil)
	}
	lock, err := m.q.LockInventory(ctx, ark)
	switch {
	case errors.Is(err, queue.ErrLocked):
		// Another recorder (ours or a Merritt Inventory) is recording
		// this object; other jobs go first meanwhile.
		return a.skipped(stage.Wait(m.opts.LockRetry, jobs.Change{}), nil)
	case err != nil:
		return a.skipped(stage.Release(), fmt.Errorf("locking the inventory of %s: %w", ark, err))
	}
	id, err := newID()
	if err != nil {
		unlock(ctx, lock)
		return a.skipped(stage.Release(), err)
	}
	h := &held{
		Lease: Lease{ID: id, Expires: time.Now().Add(a.d), JobID: claim.ID(), BatchID: job.GetBid(), ARK: ark,
			ManifestURL: manifest, Version: int(job.GetInventory().GetVersion()), Mode: job.GetInventory().GetMode(),
			LocalIDs: job.GetIdentifiers().GetLocalId(), Collection: job.GetConfiguration().GetCollection(),
			Profile: job.GetConfiguration().GetProfileName(), ERC: job.GetMetadata()},
		ctx:  ctx,
		lock: lock,
		end:  make(chan ending, 1),
	}
	// The lease is the step's span in the job's trace, which the runner
	// started.
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attribute.String("ingestq.lease.id", id), attribute.String("ingestq.ark", ark))
	if a.link.SpanContext.IsValid() {
		span.AddLink(a.link)
	}
	h.Traceparent = telemetry.Inject(ctx)
	m.mu.Lock()
	m.leases[id] = h
	h.timer = time.AfterFunc(a.d, func() { m.expire(id) })
	out := h.Lease
	m.mu.Unlock()
	// gofail: var recorderLeased struct{}
	m.log.InfoContext(ctx, "job leased", "lease", id, "ark", ark, "expires", out.Expires)

	recording, stopRecording := m.handOver(ctx, a, &out)
	var e ending
	select {
	case e = <-h.end:
	case <-ctx.Done():
		m.endLease(id, ending{outcome: stage.Release(), why: cutReason(ctx)})
		e = <-h.end // ours, or a Complete's that came first
	}
	if e.reply == nil {
		// Expired, lost or stopped: the job goes back (the runner gives it
		// back), the object to other recorders; the built-in recorder
		// stops recording it. A Complete or Fail releases the object with
		// its commit (Change.Unlock).
		m.log.InfoContext(ctx, "lease ended; job given back", "lease", id, "reason", e.why)
		unlock(ctx, lock)
		stopRecording()
		<-recording
	}
	var answer error
	ended := e.outcome.OnEnd(func(step telemetry.StepEnd, err error) { answer = m.settle(h, e, step, err) })
	if e.reply == nil {
		return ended
	}
	// A Complete or Fail is answered once the step is over, its span ended.
	return ended.AfterEnd(func() { e.reply <- answer })
}

// skipped is the outcome of a job not leased, told to a Lease call once
// the runner is done with the job, so that the call takes another job
// after it, or answers err.
func (a asker) skipped(out stage.Outcome, err error) stage.Outcome {
	if a.answer == nil {
		return out
	}
	return out.OnEnd(func(telemetry.StepEnd, error) { a.answer <- leased{err: err} })
}

// handOver gives lease l to a: a Lease call's answer, or the built-in
// recorder, which records under ctx in a goroutine of its own; recording
// is closed when it has returned (at once for a Lease call), stop cancels
// its ctx.
func (m *Manager) handOver(ctx context.Context, a asker, l *Lease) (recording <-chan struct{}, stop context.CancelFunc) {
	done := make(chan struct{})
	if a.answer != nil {
		a.answer <- leased{lease: l}
		close(done)
		return done, func() {}
	}
	ctx, stop = context.WithCancel(ctx)
	go func() {
		defer close(done)
		m.opts.Recorder.Record(ctx, m, l)
	}()
	return done, stop
}

// cutReason is why a lease is over whose job's step ctx ended under it.
func cutReason(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), stage.ErrDrainDeadline) {
		return stoppedReason
	}
	return lostReason
}

// unlock releases an object lock whatever ctx: the object goes to other
// recorders.
func unlock(ctx context.Context, lock *jobs.ObjectLock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	lock.Unlock(ctx)
}

func newID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lease id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// expire ends a lease whose time is up (unless it was renewed meanwhile).
func (m *Manager) expire(id string) {
	m.mu.Lock()
	h, ok := m.leases[id]
	if !ok || time.Now().Before(h.Expires) {
		m.mu.Unlock()
		return
	}
	e := ending{outcome: stage.Release(), why: fmt.Sprintf("it expired at %s", h.Expires.UTC().Format(time.RFC3339)), expired: true}
	m.removeLocked(id, h, e.why)
	m.mu.Unlock()
	h.end <- e
}

// endLease ends live lease id as e says; false if it is not live.
func (m *Manager) endLease(id string, e ending) bool {
	m.mu.Lock()
	h, ok := m.leases[id]
	if ok {
		m.removeLocked(id, h, e.why)
	}
	m.mu.Unlock()
	if ok {
		h.end <- e
	}
	return ok
}

// removeLocked takes lease id out of the table, leaving a tombstone
// saying why: no call acts on it from here on.
func (m *Manager) removeLocked(id string, h *held, why string) {
	delete(m.leases, id)
	h.timer.Stop()
	m.buryLocked(id, why)
}

// settle says how a lease ended once the runner is done with its job: step
// is how the job's step ended, err what kept the lease's outcome from
// being written. It counts the lease in ingestq_leases_total (completed,
// failed, expired, lost, released), marks its span, and returns the answer
// to the Complete or Fail that ended it.
func (m *Manager) settle(h *held, e ending, step telemetry.StepEnd, err error) error {
	why, result := e.why, leaseOutcome(step)
	if e.expired && step == telemetry.EndReleased {
		result = "expired"
	}
	var answer error
	if e.reply != nil {
		switch step {
		case e.intended:
		case telemetry.EndFenced:
			why = "the job's lock was lost before it was " + e.why
		case telemetry.EndFailed:
			why = fmt.Sprintf("the job was failed: %v", err)
		default:
			why = "the job was given back: committing it failed"
		}
		switch {
		case step == telemetry.EndFenced:
			answer = fmt.Errorf("lease %s: %w: the job's lock was lost: %w", h.ID, ErrEnded, err)
		case err != nil:
			answer = fmt.Errorf("lease %s: committing job %s: %w", h.ID, h.JobID, err)
		}
		if answer != nil {
			m.bury(h.ID, why)
		} else {
			m.log.InfoContext(h.ctx, "lease "+why, "lease", h.ID)
		}
	}
	if m.opts.Metrics != nil {
		m.opts.Metrics.Lease(h.ctx, result)
	}
	span := trace.SpanFromContext(h.ctx)
	if step != telemetry.EndAdvanced {
		span.SetStatus(codes.Error, why)
	}
	span.SetAttributes(attribute.String("ingestq.outcome", string(step)))
	return answer
}

// leaseOutcome names how a lease ended that did not expire, for
// ingestq_leases_total.
func leaseOutcome(o telemetry.StepEnd) string {
	switch o {
	case telemetry.EndAdvanced:
		return "completed"
	case telemetry.EndFailed:
		return "failed"
	case telemetry.EndFenced:
		return "lost"
	}
	return "released" // given back: the recorder stopped
}

// bury records why a lease ended.
func (m *Manager) bury(id, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buryLocked(id, why)
}

func (m *Manager) buryLocked(id, why string) {
	now := time.Now()
	if len(m.ended) >= maxTombstones {
		for k, t := range m.ended {
			if now.Sub(t.at) > tombstoneTTL || len(m.ended) >= maxTombstones {
				delete(m.ended, k)
			}
		}
	}
	m.ended[id] = tombstone{why: why, at: now}
}

// live finds a lease that may still be acted on, or says why not.
func (m *Manager) live(id string) (*held, error) {
	for {
		m.mu.Lock()
		h, ok := m.leases[id]
		t, dead := m.ended[id]
		expired := ok && !time.Now().Before(h.Expires)
		m.mu.Unlock()
		switch {
		case ok && h.ctx.Err() != nil:
			// The step's handler ends it too; whoever comes first.
			m.endLease(id, ending{outcome: stage.Release(), why: cutReason(h.ctx)})
		case expired:
			m.expire(id)
		case ok:
			return h, nil
		case dead:
			return nil, fmt.Errorf("lease %s: %w: %s", id, ErrEnded, t.why)
		default:
			return nil, fmt.Errorf("lease %s: %w", id, ErrUnknown)
		}
	}
}

// Renew extends a live lease to d from now (0: the default duration).
func (m *Manager) Renew(ctx context.Context, id string, d time.Duration) (time.Time, error) {
	if d <= 0 {
		d = m.opts.DefaultDuration
	}
	h, err := m.live(id)
	if err != nil {
		return time.Time{}, err
	}
	_, span := m.callSpan(ctx, h, "renew")
	defer span.End()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases[id] != h {
		return time.Time{}, fmt.Errorf("lease %s: %w: %s", id, ErrEnded, m.ended[id].why)
	}
	h.Expires = time.Now().Add(d)
	h.timer.Reset(d)
	return h.Expires, nil
}

// callSpan starts the span of a call on lease h (Renew, Complete, Fail) in
// the job's trace, as a child of the lease's span; the call's own span, when
// the caller did not continue the job's trace, is linked.
func (m *Manager) callSpan(ctx context.Context, h *held, name string) (context.Context, trace.Span) {
	leaseSpan := trace.SpanFromContext(h.ctx)
	parent := trace.ContextWithSpan(telemetry.WithJob(context.WithoutCancel(ctx), h.JobID, h.BatchID), leaseSpan)
	opts := []trace.SpanStartOption{trace.WithAttributes(telemetry.AttrJobID.String(h.JobID), telemetry.AttrBatchID.String(h.BatchID),
		telemetry.AttrStage.String("recording"), attribute.String("ingestq.lease.id", h.ID))}
	if caller := trace.SpanContextFromContext(ctx); caller.IsValid() && caller.TraceID() != leaseSpan.SpanContext().TraceID() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
	}
	return m.opts.Tracer.Start(parent, name+" "+h.JobID, opts...)
}

// Complete ends a lease with success: the job goes to Notify.
func (m *Manager) Complete(ctx context.Context, id string) error {
	return m.finish(ctx, id, "complete", "completed")
}

// Fail ends a lease with failure: the job goes to Failed with message.
func (m *Manager) Fail(ctx context.Context, id, message string) error {
	return m.finish(ctx, id, "fail", message)
}

// finish ends a lease with the call name (complete or fail) and answers
// with the commit's result: a commit, once started, runs to its end
// whatever ctx, or the caller would not know what happened.
func (m *Manager) finish(ctx context.Context, id, name, message string) error {
	h, err := m.live(id)
	if err != nil {
		return err
	}
	_, span := m.callSpan(ctx, h, name)
	defer span.End()
	e := ending{why: "completed", reply: make(chan error, 1), intended: telemetry.EndAdvanced}
	// The object's lock is released with the commit.
	unlockWith := []*jobs.ObjectLock{h.lock}
	if name == "complete" {
		e.outcome = stage.Next(jobs.Change{Message: fmt.Sprintf("recorded %s (%s)", h.ARK, h.ManifestURL), Unlock: unlockWith})
	} else {
		e.why, e.intended = "failed: "+message, telemetry.EndFailed
		e.outcome = stage.To(queue.Failed, jobs.Change{Message: message, Unlock: unlockWith})
	}
	if !m.endLease(id, e) {
		return fmt.Errorf("lease %s: %w: %s", id, ErrEnded, m.whyEnded(id))
	}
	return <-e.reply
}

func (m *Manager) whyEnded(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended[id].why
}

// Pause makes Lease hand out nothing (the built-in recorder and external
// inventories alike) until Resume; the leases out go on. A Lease call
// answers empty after its wait, as it does when the whole queue is paused,
// so an inventory's loop keeps polling without taking the pause for a
// failure.
func (m *Manager) Pause() { m.runner.Pause() }

// Resume ends a pause: waiting Lease calls take jobs again.
func (m *Manager) Resume() { m.runner.Resume() }

// Drain hands out no more leases (Lease answers ErrStopping, waiting calls
// at once) and waits, until ctx ends, for the leases out to be completed,
// failed or to expire, their commits included; then it gives back the jobs
// of those left. It returns how many were given back. Resume does not undo
// it; Run returns once it is done, and the manager's registry entry goes.
func (m *Manager) Drain(ctx context.Context) int { return m.runner.Drain(ctx) }
