// Package lease hands jobs in Recording to recorders for a limited time: a
// lease holds the job's lock and the object's inventory lock until it is
// completed, failed, or expires, when both are released and the job goes
// to the next caller. The RecordingService and the built-in recorder share
// one Manager.
//
// The Manager is the recorder's stage.Worker: its leases are its jobs in
// flight, in the worker registry and in StageService (stage.NewService),
// which pauses, resumes and drains it as it does a stage runner, with the
// same bookkeeping (stage.WorkerState).
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
	// Concurrency and Address are the manager's in its worker entry: how
	// many leases the built-in recorder holds at once (0: it is off), and
	// where its StageService is reached.
	Concurrency int
	Address     string
	// Version is the recorder's build version, for its registry entry.
	Version string
}

// Manager hands out leases on the jobs of one queue client.
type Manager struct {
	q        *jobs.Client
	consumer *jobs.Consumer
	opts     Options
	log      *slog.Logger
	// state is paused, draining, the leases out (from lease to commit)
	// and how they ended, as the worker registry and StageService show them.
	state *stage.WorkerState

	mu     sync.Mutex
	leases map[string]*held
	ended  map[string]tombstone // why recent leases ended
}

var _ stage.Worker = (*Manager)(nil)

// held is a live lease with what it holds.
type held struct {
	Lease
	claim     *jobs.Claim
	lock      *jobs.ObjectLock
	timer     *time.Timer
	stopWatch func() bool // stops watching the claim's context
	span      trace.Span
	flight    *stage.Flight
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

// New returns a Manager taking jobs in Recording from q.
func New(q *jobs.Client, opts Options) *Manager {
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
	return &Manager{
		q: q,
		consumer: q.NewConsumer(queue.Recording, jobs.ConsumerOptions{
			Parts: queue.PartConfiguration | queue.PartIdentifiers | queue.PartInventory | queue.PartBid | queue.PartMetadata}),
		opts: opts,
		log:  opts.Logger,
		state: stage.NewWorkerState(&v1.WorkerInfo{Id: q.NewWorkerID("recorder"), Service: "recorder",
			Stage: queue.JobStateName(queue.Recording), Concurrency: int32(opts.Concurrency), Address: opts.Address, Version: opts.Version}, "recording", opts.Metrics),
		leases: map[string]*held{},
		ended:  map[string]tombstone{},
	}
}

// Register creates the manager's entry in the worker registry, kept
// current until Unregister.
func (m *Manager) Register(ctx context.Context) error { return m.state.Register(ctx, m.q) }

// Unregister removes the manager's registry entry.
func (m *Manager) Unregister(ctx context.Context) error { return m.state.Unregister(ctx) }

// Status reports the manager as a worker: its leases out, the leases ended
// since start by outcome, paused and draining.
func (m *Manager) Status() *v1.WorkerInfo { return m.state.Status() }

// Lease waits up to wait (capped by MaxWait and ctx) for a job in Recording
// and leases it for d (0: the default). With no job in time it returns nil
// and no error; so it does while the manager is paused, as when the whole
// queue is.
func (m *Manager) Lease(ctx context.Context, wait, d time.Duration) (*Lease, error) {
	if d <= 0 {
		d = m.opts.DefaultDuration
	}
	waitCtx, cancel := context.WithTimeout(ctx, min(wait, m.opts.MaxWait))
	defer cancel()
	for {
		m.state.WaitRunnable(waitCtx)
		if m.state.Draining() {
			return nil, ErrStopping
		}
		if m.state.Paused() {
			return nil, nil // paused for the whole wait: nothing to record
		}
		// A pause or drain ends the wait for a job at once.
		nextCtx, stopNext := m.state.UntilChanged(waitCtx)
		claim, err := m.next(nextCtx, wait)
		changed := errors.Is(context.Cause(nextCtx), stage.ErrStateChanged)
		stopNext()
		if m.state.Draining() {
			if claim != nil {
				claim.Release(context.WithoutCancel(ctx))
			}
			return nil, ErrStopping
		}
		if claim != nil && m.state.Paused() {
			// Paused as this call took a job: the job stays free.
			claim.Release(context.WithoutCancel(ctx))
			continue
		}
		if claim == nil {
			if changed && waitCtx.Err() == nil {
				continue
			}
			if err == nil || (waitCtx.Err() != nil && ctx.Err() == nil) {
				return nil, nil // nothing to record within the wait
			}
			return nil, err
		}
		l, err := m.hold(ctx, claim, d)
		if errors.Is(err, errSkipped) {
			continue
		}
		return l, err
	}
}

// next claims a job: waiting for one, or, with no wait, only if one is
// free now and the queue is not paused.
func (m *Manager) next(ctx context.Context, wait time.Duration) (*jobs.Claim, error) {
	if wait > 0 {
		return m.consumer.Next(ctx)
	}
	if paused, err := m.q.Paused(ctx); err != nil || paused {
		return nil, err
	}
	claim, _, err := m.consumer.TryNext(ctx)
	return claim, err
}

// errSkipped: the claimed job was not leased (failed or left for later).
var errSkipped = errors.New("job skipped")

// hold turns a claim into a lease: the object's inventory lock is taken
// and the expiry armed.
func (m *Manager) hold(ctx context.Context, claim *jobs.Claim, d time.Duration) (*Lease, error) {
	job := claim.Job
	logCtx := telemetry.WithJob(ctx, claim.ID(), job.GetBid())
	ark, manifest := job.GetIdentifiers().GetPrimaryId(), job.GetInventory().GetManifestUrl()
	var problem string
	switch {
	case claim.LoadErr != nil:
		problem = fmt.Sprintf("job data unreadable: %v", claim.LoadErr)
	case ark == "":
		problem = "cannot record: the job has no ARK (identifiers.primary_id); processing did not finish"
	case manifest == "":
		problem = "cannot record: the job has no inventory manifest_url; processing did not finish"
	}
	if problem != "" {
		// The recorder's step of the job, though no lease: counted as any.
		flight := m.state.Begin(logCtx, claim.ID(), job.GetBid())
		m.log.WarnContext(logCtx, "job cannot be recorded", "message", problem)
		err := claim.Commit(ctx, jobs.Change{To: queue.Failed, Message: problem})
		if err != nil {
			m.log.WarnContext(logCtx, "failing the job", "error", err)
			claim.Release(context.WithoutCancel(ctx))
		}
		flight.End(logCtx, stage.CommitOutcome(err, telemetry.OutcomeFailed))
		return nil, errSkipped
	}
	lock, err := m.q.LockInventory(ctx, ark)
	if err != nil {
		claim.Release(context.WithoutCancel(ctx))
		if errors.Is(err, queue.ErrLocked) {
			// Another recorder (ours or a Merritt Inventory) is recording
			// this object; other jobs go first meanwhile.
			m.consumer.Defer(claim.ID(), time.Now().Add(m.opts.LockRetry))
			return nil, errSkipped
		}
		return nil, fmt.Errorf("locking the inventory of %s: %w", ark, err)
	}
	id, err := newID()
	if err != nil {
		unlockAndRelease(ctx, claim, lock)
		return nil, err
	}
	h := &held{
		Lease: Lease{ID: id, Expires: time.Now().Add(d), JobID: claim.ID(), BatchID: job.GetBid(), ARK: ark,
			ManifestURL: manifest, Version: int(job.GetInventory().GetVersion()), Mode: job.GetInventory().GetMode(),
			LocalIDs: job.GetIdentifiers().GetLocalId(), Collection: job.GetConfiguration().GetCollection(),
			Profile: job.GetConfiguration().GetProfileName(), ERC: job.GetMetadata()},
		claim: claim,
		lock:  lock,
	}
	// Drain sets draining under m.mu, then waits for the leases in flight:
	// a lease begins before that, or not at all.
	m.mu.Lock()
	if m.state.Draining() {
		m.mu.Unlock()
		unlockAndRelease(ctx, claim, lock)
		return nil, ErrStopping
	}
	// The lease is the recording stage's step of the job: its span joins the
	// job's trace (the trace context rides in the status).
	traceparent := job.GetStatus().GetTraceparent()
	if traceparent == "" {
		traceparent = job.GetConfiguration().GetTraceparent()
	}
	var spanCtx context.Context
	spanCtx, h.span = telemetry.StartJobSpan(context.WithoutCancel(ctx), m.opts.Tracer, "recording", claim.ID(), job.GetBid(), traceparent)
	h.span.SetAttributes(attribute.String("ingestq.lease.id", id), attribute.String("ingestq.ark", ark))
	// The Lease call's own span (the caller's trace) is linked, not parent.
	h.span.AddLink(trace.LinkFromContext(ctx))
	h.Traceparent = telemetry.Inject(spanCtx)
	h.flight = m.state.Begin(spanCtx, claim.ID(), job.GetBid())
	m.leases[id] = h
	h.timer = time.AfterFunc(d, func() { m.expire(id) })
	h.stopWatch = context.AfterFunc(claim.Context(), func() {
		m.end(id, lostReason, telemetry.OutcomeFenced)
	})
	out := h.Lease
	m.mu.Unlock()
	// gofail: var recorderLeased struct{}
	m.log.InfoContext(logCtx, "job leased", "lease", id, "ark", ark, "expires", out.Expires)
	return &out, nil
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
	why := fmt.Sprintf("it expired at %s", h.Expires.UTC().Format(time.RFC3339))
	m.removeLocked(id, h, why)
	m.mu.Unlock()
	m.giveBack(h, why)
	m.settle(h, why, telemetry.OutcomeReleased, "expired")
}

// end ends a live lease for the reason given, giving its job back.
func (m *Manager) end(id, why string, outcome telemetry.Outcome) {
	if h := m.take(id, why); h != nil {
		m.giveBack(h, why)
		m.settle(h, why, outcome, leaseOutcome(outcome))
	}
}

// giveBack returns what an ended lease held: the job to the queue, the
// object to other recorders.
func (m *Manager) giveBack(h *held, why string) {
	m.log.InfoContext(telemetry.WithJob(context.Background(), h.JobID, h.BatchID), "lease ended; job given back", "lease", h.ID, "reason", why)
	unlockAndRelease(context.Background(), h.claim, h.lock)
}

// take removes a live lease from the table, leaving a tombstone saying
// why; its job is in flight until settle.
func (m *Manager) take(id, why string) *held {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.leases[id]
	if ok {
		m.removeLocked(id, h, why)
	}
	return h
}

// leaseOutcome names how a lease ended that did not expire, for
// ingestq_leases_total.
func leaseOutcome(o telemetry.Outcome) string {
	switch o {
	case telemetry.OutcomeAdvanced:
		return "completed"
	case telemetry.OutcomeFailed:
		return "failed"
	case telemetry.OutcomeFenced:
		return "lost"
	}
	return "released" // given back: the recorder stopped
}

// removeLocked takes lease id out of the table: no call acts on it from
// here on.
func (m *Manager) removeLocked(id string, h *held, why string) {
	delete(m.leases, id)
	h.timer.Stop()
	h.stopWatch()
	m.buryLocked(id, why)
}

// settle counts an ended lease, once its job is committed or given back:
// outcome is how the job's step ended, result how the lease did, for
// ingestq_leases_total (completed, failed, expired, lost, released).
func (m *Manager) settle(h *held, why string, outcome telemetry.Outcome, result string) {
	ctx := trace.ContextWithSpan(context.Background(), h.span)
	if m.opts.Metrics != nil {
		m.opts.Metrics.Lease(ctx, result)
	}
	if outcome != telemetry.OutcomeAdvanced {
		h.span.SetStatus(codes.Error, why)
	}
	h.span.SetAttributes(attribute.String("ingestq.outcome", string(outcome)))
	h.span.End()
	h.flight.End(ctx, outcome)
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

// unlockAndRelease gives back what a lease held, whatever the caller's
// context: the job to the queue, the object to other recorders.
func unlockAndRelease(ctx context.Context, claim *jobs.Claim, lock *jobs.ObjectLock) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	claim.Release(ctx) // refused harmlessly if the claim was lost or committed
	if lock != nil {
		lock.Unlock(ctx)
	}
}

// lostReason is why a lease whose claim's context ended is over.
const lostReason = "the job's lock was lost (ZooKeeper session or lock node gone)"

// live finds a lease that may still be acted on, or says why not.
func (m *Manager) live(id string) (*held, error) {
	for {
		m.mu.Lock()
		h, ok := m.leases[id]
		t, dead := m.ended[id]
		expired := ok && !time.Now().Before(h.Expires)
		m.mu.Unlock()
		switch {
		case ok && h.claim.Context().Err() != nil:
			m.end(id, lostReason, telemetry.OutcomeFenced)
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
	parent := trace.ContextWithSpan(telemetry.WithJob(context.WithoutCancel(ctx), h.JobID, h.BatchID), h.span)
	opts := []trace.SpanStartOption{trace.WithAttributes(telemetry.AttrJobID.String(h.JobID), telemetry.AttrBatchID.String(h.BatchID),
		telemetry.AttrStage.String("recording"), attribute.String("ingestq.lease.id", h.ID))}
	if caller := trace.SpanContextFromContext(ctx); caller.IsValid() && caller.TraceID() != h.span.SpanContext().TraceID() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
	}
	return m.opts.Tracer.Start(parent, name+" "+h.JobID, opts...)
}

// Complete ends a lease with success: the job goes to Notify.
func (m *Manager) Complete(ctx context.Context, id string) error {
	return m.finish(ctx, id, jobs.Change{To: queue.Notify}, "completed")
}

// Fail ends a lease with failure: the job goes to Failed with message.
func (m *Manager) Fail(ctx context.Context, id, message string) error {
	return m.finish(ctx, id, jobs.Change{To: queue.Failed, Message: message}, "failed: "+message)
}

func (m *Manager) finish(ctx context.Context, id string, ch jobs.Change, why string) error {
	h, err := m.live(id)
	if err != nil {
		return err
	}
	intended, name := telemetry.OutcomeAdvanced, "complete"
	if ch.To == queue.Failed {
		intended, name = telemetry.OutcomeFailed, "fail"
	}
	var span trace.Span
	ctx, span = m.callSpan(ctx, h, name)
	defer span.End()
	if m.take(id, why) != h {
		return fmt.Errorf("lease %s: %w: %s", id, ErrEnded, m.whyEnded(id))
	}
	logCtx := telemetry.WithJob(ctx, h.JobID, h.BatchID)
	if ch.To == queue.Notify {
		ch.Message = fmt.Sprintf("recorded %s (%s)", h.ARK, h.ManifestURL)
	}
	// A commit the caller gave up on midway would leave it unsure what
	// happened: once started, it runs to its end.
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ch.Unlock = []*jobs.ObjectLock{h.lock} // released with the commit
	err = h.claim.Commit(commitCtx, ch)
	unlockAndRelease(ctx, h.claim, h.lock) // what the commit did not
	// Counted as the commit ended, as a stage runner counts its steps.
	outcome := stage.CommitOutcome(err, intended)
	switch outcome {
	case telemetry.OutcomeFenced:
		why = "the job's lock was lost before it was " + why
		m.settle(h, why, outcome, leaseOutcome(outcome))
		m.bury(id, why)
		return fmt.Errorf("lease %s: %w: the job's lock was lost: %w", id, ErrEnded, err)
	case intended:
	case telemetry.OutcomeFailed:
		why = fmt.Sprintf("the job was failed: %v", err)
	default:
		why = "the job was given back: committing it failed"
	}
	m.settle(h, why, outcome, leaseOutcome(outcome))
	if err != nil {
		m.bury(id, why)
		return fmt.Errorf("lease %s: committing job %s: %w", id, h.JobID, err)
	}
	m.log.InfoContext(logCtx, "lease "+why, "lease", id, "to", queue.JobStateName(ch.To))
	return nil
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
func (m *Manager) Pause() { m.state.Pause() }

// Resume ends a pause: waiting Lease calls take jobs again.
func (m *Manager) Resume() { m.state.Resume() }

// Drain hands out no more leases (Lease answers ErrStopping, waiting calls
// at once) and waits, until ctx ends, for the leases out to be completed,
// failed or to expire, their commits included; then it gives back the jobs
// of those left. It returns how many were given back. Resume does not undo
// it; the manager's entry says it is draining until Unregister.
func (m *Manager) Drain(ctx context.Context) int {
	m.mu.Lock()
	m.state.SetDraining()
	m.mu.Unlock()
	select {
	case <-m.state.Idle():
		return 0
	case <-ctx.Done():
	}
	m.mu.Lock()
	ids := make([]string, 0, len(m.leases))
	for id := range m.leases {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.end(id, "the recorder stopped", telemetry.OutcomeReleased)
	}
	return len(ids)
}
