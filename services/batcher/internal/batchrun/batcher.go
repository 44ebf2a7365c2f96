// Package batchrun drives batches through the batcher's states: it takes
// pending batches (holding those of a held collection) and creates their
// jobs, moves a batch whose last job ended to Reporting, and sends and
// stores its report, first or update. It is woken by the queue's batch
// feed (watches), never by scanning every batch.
package batchrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/internal/mail"
	"github.com/ingestq/ingestq/services/batcher/internal/report"
	"github.com/ingestq/ingestq/services/batcher/internal/spawn"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"
)

// DefaultChunk is how many jobs one CreateJobs call creates.
const DefaultChunk = 1000

// Config is what a Batcher works with.
type Config struct {
	// Session is the batcher's ZooKeeper session.
	Session  *session.Session
	Profiles *profile.Set
	Planner  *spawn.Planner
	Mail     mail.Sender
	Logger   *slog.Logger
	Tracer   trace.Tracer // default: no spans
	// Metrics, if set, counts the mails sent and failed.
	Metrics *telemetry.Metrics
	// Concurrency is how many batches are worked on at once (default 4).
	Concurrency int
	// Chunk is how many jobs one CreateJobs call creates (default 1000).
	Chunk int
	// MailRetry is the first wait before a report that could not be mailed
	// is sent again, doubled after each failure up to ten minutes (default
	// 10s). The batch stays claimed meanwhile.
	MailRetry time.Duration
	// MaxQueuedJobs bounds the jobs the queue holds, ended ones included
	// until their batch is cleaned up (0: no bound). ZooKeeper keeps every
	// job in its heap: a pending batch whose jobs would pass the bound waits
	// in Pending, saying so, and one larger than the bound fails.
	MaxQueuedJobs int
	// RoomRetry is how soon a batch waiting for room looks again (default
	// 30s).
	RoomRetry time.Duration
}

// Batcher works on batches until stopped.
type Batcher struct {
	cfg     Config
	log     *slog.Logger
	batches *batches.Client
	jobs    *jobs.Client // the queue's pause and the held collections
	reader  *jobs.Reader
	abort   context.CancelFunc
	work    context.Context

	mu       sync.Mutex
	inFlight map[string]bool
	// retryAt holds back a batch whose last attempt failed (a mail server
	// down, say); the feed brings it up again at its next look.
	retryAt  map[string]time.Time
	failures map[string]int
	// waiting holds the number of jobs of each batch waiting for room, so
	// that its payload is fetched again only once there may be room; the
	// oldest of them is admitted first.
	waiting map[string]waitingBatch
	// admitting serializes admissions; reserved counts the jobs of the
	// batches admitted here and still spawning (some of them counted twice
	// once created, which errs on the side of the bound).
	admitting sync.Mutex
	reserved  int
	// again brings a batch waiting for room back after RoomRetry: nothing
	// about the batch itself changes when room is made elsewhere.
	again chan batches.BatchWork
}

// Backoff after a failed attempt on a batch: doubled per failure, capped.
const (
	firstBackoff = 10 * time.Second
	maxBackoff   = 10 * time.Minute
)

// New prepares a Batcher; Run starts it.
func New(cfg Config) *Batcher {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.Chunk <= 0 {
		cfg.Chunk = DefaultChunk
	}
	if cfg.MailRetry <= 0 {
		cfg.MailRetry = firstBackoff
	}
	if cfg.RoomRetry <= 0 {
		cfg.RoomRetry = 30 * time.Second
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Batcher{cfg: cfg, log: cfg.Logger, batches: batches.New(cfg.Session), jobs: jobs.New(cfg.Session),
		reader: jobs.NewReader(cfg.Session), inFlight: map[string]bool{},
		retryAt: map[string]time.Time{}, failures: map[string]int{}, waiting: map[string]waitingBatch{},
		again: make(chan batches.BatchWork, 64)}
	r.work, r.abort = context.WithCancel(context.Background())
	return r
}

// Run takes batches from the feed until ctx ends, then waits for the
// batches in flight. Abort cuts those short.
func (r *Batcher) Run(ctx context.Context) {
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	feed := r.batches.WatchBatches(ctx)
	for {
		var w batches.BatchWork
		select {
		case bw, ok := <-feed:
			if !ok {
				return
			}
			w = bw
		case w = <-r.again:
		}
		// A paused queue takes no new batch; the feed reports it again.
		if err := r.jobs.WaitUnpaused(ctx); err != nil {
			return
		}
		r.mu.Lock()
		skip := r.inFlight[w.Bid] || time.Now().Before(r.retryAt[w.Bid])
		r.mu.Unlock()
		if skip {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		r.mu.Lock()
		r.inFlight[w.Bid] = true
		r.mu.Unlock()
		wg.Add(1)
		go func() {
			defer func() {
				r.mu.Lock()
				delete(r.inFlight, w.Bid)
				r.mu.Unlock()
				<-sem
				wg.Done()
			}()
			r.settle(w.Bid, r.handle(w))
		}()
	}
}

// Abort ends the work on every batch in flight: their claims are released
// or lost, and the batches are finished by the next batcher that takes them.
func (r *Batcher) Abort() { r.abort() }

// errNoRoom: the batch waits in Pending for room in the queue.
var errNoRoom = errors.New("no room in the queue for the batch's jobs")

// settle records how an attempt on a batch ended.
func (r *Batcher) settle(bid string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(err, errNoRoom) {
		r.retryAt[bid] = time.Now().Add(r.cfg.RoomRetry)
		time.AfterFunc(r.cfg.RoomRetry, func() {
			select {
			case r.again <- batches.BatchWork{Bid: bid, Status: queue.BatchPending}:
			default: // the feed's own periodic look brings it back
			}
		})
		return
	}
	delete(r.waiting, bid)
	if err == nil {
		delete(r.retryAt, bid)
		delete(r.failures, bid)
		return
	}
	r.failures[bid]++
	r.retryAt[bid] = time.Now().Add(retry.Policy{Backoff: firstBackoff, Max: maxBackoff}.Wait(r.failures[bid]))
}

// handle claims one batch and does what its state asks. An error means the
// attempt failed and the batch is left for a later one.
func (r *Batcher) handle(w batches.BatchWork) error {
	// A batch that moved on since the feed saw it (Failed, Held,
	// Completed) is left unlocked: an operator's DeleteBatch or
	// UpdateReport on it must not meet a batcher's passing claim.
	bc, err := r.batches.ClaimBatch(r.work, w.Bid, queue.BatchPending, queue.BatchProcessing, queue.BatchReporting, queue.BatchUpdateReporting)
	switch {
	case errors.Is(err, queue.ErrLocked), errors.Is(err, queue.ErrNotFound), errors.Is(err, queue.ErrWrongState):
		return nil
	case err != nil:
		r.log.Warn("claiming batch", "batch_id", w.Bid, "error", err.Error())
		return err
	}
	// Work stops when the claim's session is lost or the Batcher aborts.
	ctx, cancel := context.WithCancel(r.work)
	defer cancel()
	stop := context.AfterFunc(bc.Context(), cancel)
	defer stop()

	sub := bc.Batch.GetSubmission()
	ctx = telemetry.WithJob(telemetry.Extract(ctx, sub.GetTraceparent()), "", bc.ID())
	state := queue.BatchStateName(bc.State())
	ctx, span := r.cfg.Tracer.Start(ctx, "batch "+bc.ID(), trace.WithAttributes(
		telemetry.AttrBatchID.String(bc.ID()), attribute.String("ingestq.batch.state", state)))
	defer span.End()

	b := &batch{r: r, bc: bc, log: r.log}
	switch bc.State() {
	case queue.BatchPending:
		err = b.take(ctx)
	case queue.BatchProcessing:
		err = b.resume(ctx)
	case queue.BatchReporting, queue.BatchUpdateReporting:
		err = b.report(ctx)
	default:
		// Not a state claimed for above.
		err = bc.Release(context.WithoutCancel(ctx))
	}
	if err != nil && !errors.Is(err, errNoRoom) {
		span.SetStatus(codes.Error, err.Error())
		r.log.WarnContext(ctx, "batch left for a later attempt", "state", state, "error", err.Error())
		// A claim that is still held goes back; a finished one says so.
		bc.Release(context.WithoutCancel(ctx))
	}
	return err
}

// batch is the work on one claimed batch.
type batch struct {
	r   *Batcher
	bc  *batches.BatchClaim
	log *slog.Logger
}

func (b *batch) profile() (*profile.Profile, bool) {
	return b.r.cfg.Profiles.Get(b.bc.Batch.GetSubmission().GetProfileName())
}

// take acts on a pending batch: Held if its collection is held, otherwise
// Processing and its jobs created.
func (b *batch) take(ctx context.Context) error {
	bc := b.bc
	if bc.LoadErr != nil {
		// Read again it would say the same: it fails now, saying why.
		return b.takeAndFail(ctx, fmt.Sprintf("the submission cannot be used: %v; no job was created", bc.LoadErr))
	}
	name := bc.Batch.GetSubmission().GetProfileName()
	prof, ok := b.profile()
	if !ok {
		// Pending can only go on to Processing: fail from there.
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing, Message: "taken by the batcher"}); err != nil {
			return err
		}
		return b.fail(ctx, fmt.Sprintf("profile %q is not configured on the batcher (INGESTQ_PROFILES_DIR); no job was created", name))
	}
	held, err := b.r.jobs.CollectionHeld(ctx, prof.Collection)
	if err != nil {
		return err
	}
	if held {
		msg := fmt.Sprintf("collection %s is held; release the collection to process this batch", prof.Collection)
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchHeld, Message: msg}); err != nil {
			return err
		}
		b.log.InfoContext(ctx, "batch held", "collection", prof.Collection)
		return nil
	}
	bound := b.r.cfg.MaxQueuedJobs
	if need, ok := b.r.waitingFor(bc.ID()); ok && bound > 0 {
		// Nothing fetched until there may be room.
		wait, err := b.r.noRoom(ctx, bc.ID(), need)
		if err != nil {
			return err
		}
		if wait != "" {
			return b.waitForRoom(ctx, wait, need)
		}
	}
	jobs, reading, err := b.r.cfg.Planner.Plan(ctx, bc.ID(), bc.Batch.GetSubmission(), bc.Merritt, prof)
	var perr *spawn.PayloadError
	if errors.As(err, &perr) {
		return b.takeAndFail(ctx, perr.Msg)
	}
	if err != nil {
		return err
	}
	if bound > 0 {
		if len(jobs) > bound {
			return b.takeAndFail(ctx, fmt.Sprintf("the batch has %d jobs, more than the queue holds at once (at most %d, INGESTQ_MAX_QUEUED_JOBS): "+
				"split it into batches of at most %d jobs, or raise the bound with the ZooKeeper servers' heap (docs/sizing.md)", len(jobs), bound, bound))
		}
		b.r.admitting.Lock()
		wait, err := b.r.noRoom(ctx, bc.ID(), len(jobs))
		if err == nil && wait == "" {
			b.r.reserve(len(jobs))
			defer b.r.reserve(-len(jobs))
		}
		b.r.admitting.Unlock()
		if err != nil {
			return err
		}
		if wait != "" {
			return b.waitForRoom(ctx, wait, len(jobs))
		}
	}
	// The reading is kept, and recorded with the move to Processing, before
	// any job exists: every job of the batch is made from it, whoever
	// finishes a half-spawned batch.
	var record *queue.PayloadRecord
	if reading != nil {
		if err := b.r.cfg.Planner.Keep(ctx, bc.ID(), reading); err != nil {
			return err
		}
		record = reading.Record()
	}
	// gofail: var batcherPayloadKept struct{}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing, Message: "taken by a batcher: its jobs are created from the payload",
		Payload: record}); err != nil {
		return err
	}
	return b.spawn(ctx, prof, jobs)
}

// takeAndFail ends a pending batch as Failed with msg, by way of
// Processing (Pending can only go on to Processing), before any job exists.
func (b *batch) takeAndFail(ctx context.Context, msg string) error {
	if err := b.bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing, Message: "taken by the batcher"}); err != nil {
		return err
	}
	return b.fail(ctx, msg)
}

// noRoom says why a batch of need jobs cannot be admitted now ("" when it
// can): the queue holds too many jobs, or an older batch waits for room
// first (so that a large batch is not passed by smaller ones for ever).
func (r *Batcher) noRoom(ctx context.Context, bid string, need int) (string, error) {
	bound := r.cfg.MaxQueuedJobs
	r.mu.Lock()
	older := ""
	for w, wb := range r.waiting {
		if time.Since(wb.at) > 3*r.cfg.RoomRetry {
			delete(r.waiting, w) // not looked at again here: gone, or taken elsewhere
			continue
		}
		if w < bid && (older == "" || w < older) {
			older = w
		}
	}
	reserved := r.reserved
	r.mu.Unlock()
	if older != "" {
		return fmt.Sprintf("waiting for room in the queue behind the older batch %s", older), nil
	}
	total, err := r.reader.JobTotal(ctx)
	if err != nil {
		return "", err
	}
	if total+reserved+need <= bound {
		return "", nil
	}
	return fmt.Sprintf("waiting for room in the queue: it holds %d jobs, this batch has %d, at most %d at once (INGESTQ_MAX_QUEUED_JOBS); "+
		"completed batches make room when they are cleaned up (after INGESTQ_RETENTION, or now by AdminService/CleanupBatches), "+
		"failed ones when their jobs are requeued and complete or the batch is deleted",
		total+reserved, need, bound), nil
}

func (r *Batcher) reserve(n int) {
	r.mu.Lock()
	r.reserved += n
	r.mu.Unlock()
}

// waitForRoom leaves a pending batch of need jobs in Pending, saying why
// (msg), to be looked at again after RoomRetry.
func (b *batch) waitForRoom(ctx context.Context, msg string, need int) error {
	b.r.mu.Lock()
	b.r.waiting[b.bc.ID()] = waitingBatch{jobs: need, at: time.Now()}
	b.r.mu.Unlock()
	if err := b.bc.ReleaseWithMessage(context.WithoutCancel(ctx), msg); err != nil {
		return err
	}
	b.log.InfoContext(ctx, "batch waits for room in the queue", "jobs", need, "why", msg)
	return errNoRoom
}

// waitingBatch is a batch waiting for room: its jobs, and when it last
// looked.
type waitingBatch struct {
	jobs int
	at   time.Time
}

// waitingFor says how many jobs a batch waiting for room has.
func (r *Batcher) waitingFor(bid string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wb, ok := r.waiting[bid]
	return wb.jobs, ok
}

// resume acts on a Processing batch: one left half-spawned gets the rest of
// its jobs; one whose jobs have all ended is reported.
func (b *batch) resume(ctx context.Context) error {
	bc := b.bc
	if bc.Spawning && bc.LoadErr != nil {
		return b.fail(ctx, fmt.Sprintf("the submission cannot be used: %v; its jobs cannot all be created", bc.LoadErr))
	}
	if bc.Spawning {
		prof, ok := b.profile()
		if !ok {
			return b.fail(ctx, fmt.Sprintf("profile %q is not configured on the batcher (INGESTQ_PROFILES_DIR); its jobs cannot all be created",
				bc.Batch.GetSubmission().GetProfileName()))
		}
		b.log.InfoContext(ctx, "finishing a half-spawned batch")
		jobs, err := b.r.cfg.Planner.Replan(ctx, bc.ID(), bc.Batch.GetSubmission(), bc.Merritt, prof, bc.Payload)
		var perr *spawn.PayloadError
		if errors.As(err, &perr) {
			return b.stop(ctx, perr.Msg)
		}
		if err != nil {
			return err
		}
		return b.spawn(ctx, prof, jobs)
	}
	counts, err := b.r.batches.BatchCounts(ctx, bc.ID())
	if err != nil {
		return err
	}
	if counts.GetProcessing() > 0 {
		// A job is live again (requeued): the feed reports the batch when it ends.
		return bc.Release(ctx)
	}
	msg := fmt.Sprintf("all jobs ended: %d completed, %d failed", counts.GetCompleted(), counts.GetFailed())
	if bc.Payload != nil && bc.Payload.SpawnStopped != "" && counts.GetCompleted()+counts.GetFailed()+counts.GetDeleted() == 0 {
		msg = "no job: the payload could not be used: " + bc.Payload.SpawnStopped
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, Message: msg, KeepLock: true}); err != nil {
		return err
	}
	return b.report(ctx)
}

// fail ends the spawning of a Processing batch whose payload cannot be
// used (msg says why): no job (more) is created. Its payload record keeps
// msg, and the batch is reported to its depositor as any batch is, once
// the jobs it has (none, mostly) end: Reporting, then Failed, the report
// mailed naming msg and what to do.
func (b *batch) fail(ctx context.Context, msg string) error {
	b.log.WarnContext(ctx, "batch failed", "reason", msg)
	return b.bc.StopSpawning(ctx, msg, "the payload cannot be used: "+msg+"; the batch is reported to its depositor and fails")
}

// stop ends the spawning of a half-spawned batch whose remaining rows
// cannot be known (reason says why): none is created. A batch without jobs
// fails at once; one with jobs lets them run, each to its one end, and
// fails with reason when it is reported (the report lists them).
func (b *batch) stop(ctx context.Context, reason string) error {
	bc := b.bc
	counts, err := b.r.batches.BatchCounts(ctx, bc.ID())
	if err != nil {
		return err
	}
	made := counts.GetProcessing() + counts.GetCompleted() + counts.GetFailed() + counts.GetDeleted()
	if made == 0 {
		return b.fail(ctx, reason+"; no job was created")
	}
	msg := fmt.Sprintf("%s; %d job(s) had been created and go on, no other row becomes a job: the batch fails once they end "+
		"(submit the rows not created in a new batch)", reason, made)
	b.log.WarnContext(ctx, "batch spawning stopped", "reason", reason, "jobs", made)
	return bc.StopSpawning(ctx, reason, msg)
}

// spawn creates the jobs of a Processing batch that are not there yet and
// then releases the batch to its jobs. jobs is the batch's plan, entry i
// at index i, from the one reading of its payload. A job that exists
// already must be the one its entry plans (same payload URL): otherwise the
// plan is not the one the jobs came from (a batch taken before its reading
// was recorded, whose payload changed since) and spawning stops.
func (b *batch) spawn(ctx context.Context, prof *profile.Profile, jobs []batches.NewJob) error {
	bc := b.bc
	sub := bc.Batch.GetSubmission()
	existing, err := bc.SpawnedEntries(ctx)
	if err != nil {
		return err
	}
	for _, e := range slices.Sorted(maps.Keys(existing)) {
		had := existing[e].Configuration.GetPayloadUrl()
		if e < 0 || int(e) >= len(jobs) || jobs[e].Configuration.GetPayloadUrl() != had {
			now := "no such row"
			if e >= 0 && int(e) < len(jobs) {
				now = jobs[e].Configuration.GetPayloadUrl()
			}
			return b.stop(ctx, fmt.Sprintf("payload %s changed after the batch's jobs began to be created: job %s was made from row %d, %s, which is now %s",
				sub.GetPayloadUrl(), existing[e].ID, e, had, now))
		}
	}
	todo := jobs[:0:0]
	for _, j := range jobs {
		if _, ok := existing[j.Configuration.GetBatchEntry()]; !ok {
			todo = append(todo, j)
		}
	}
	for start := 0; start < len(todo); start += b.r.cfg.Chunk {
		chunk := todo[start:min(start+b.r.cfg.Chunk, len(todo))]
		spans := b.startJobTraces(ctx, chunk)
		ids, err := bc.CreateJobs(ctx, chunk)
		for i, span := range spans {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			} else {
				telemetry.NameJobTrace(span, ids[i])
			}
			span.End()
		}
		if err != nil {
			return fmt.Errorf("created %d of %d jobs: %w", len(existing)+start, len(jobs), err)
		}
	}
	// gofail: var batcherJobsCreated struct{}
	if prof.NotifyOnQueue && len(prof.NotificationAddresses) > 0 {
		// Sent before the batch is released: a crash in between sends it
		// again under the same Message-ID, never loses it.
		if err := b.r.sendMail(ctx, "queued", report.Queued(bc.ID(), sub, prof, len(jobs))); err != nil {
			b.log.WarnContext(ctx, "batch queued notice not sent", "error", err.Error())
		}
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		return err
	}
	b.log.InfoContext(ctx, "batch jobs created", "jobs", len(jobs), "created_now", len(todo))
	return nil
}

// startJobTraces starts each job's own trace, linked to the batch's span
// in ctx, and stores its traceparent with the job: every stage's span of
// the job joins that trace. The caller ends the spans.
func (b *batch) startJobTraces(ctx context.Context, jobs []batches.NewJob) []trace.Span {
	spans := make([]trace.Span, len(jobs))
	for i := range jobs {
		conf := proto.Clone(jobs[i].Configuration).(*v1.JobConfiguration)
		jobCtx, span := telemetry.StartJobTrace(ctx, b.r.cfg.Tracer, b.bc.ID(), int(conf.GetBatchEntry()))
		if tp := telemetry.Inject(jobCtx); tp != "" {
			conf.Traceparent = tp
		}
		jobs[i].Configuration = conf
		spans[i] = span
	}
	return spans
}

// report builds the batch's report, mails it, and stores it with the
// batch's final state. The mail goes first: if it cannot be sent the batch
// stays where it is and is tried again; if the batcher dies after sending,
// the next one sends the same message (same key) again.
func (b *batch) report(ctx context.Context) error {
	bc := b.bc
	sub := bc.Batch.GetSubmission()
	prev := bc.Batch.GetStatusReport()
	if bc.State() == queue.BatchReporting {
		prev = nil
	}
	rep, err := report.Build(ctx, report.Reads{Jobs: b.r.reader, Batches: b.r.batches}, bc.ID(), prev)
	if err != nil {
		return err
	}
	if bc.Payload != nil {
		rep.SpawnStopped = bc.Payload.SpawnStopped
	}
	msg := rep.Summary()
	prof, ok := b.profile()
	switch {
	case !ok:
		msg += fmt.Sprintf("; not mailed: profile %q is not configured", sub.GetProfileName())
	case len(prof.NotificationAddresses) == 0:
		msg += fmt.Sprintf("; not mailed: profile %q has no notification address", prof.Name)
	default:
		if err := b.mailReport(ctx, rep.Mail(sub, prof)); err != nil {
			return err
		}
	}
	// gofail: var batcherReportMailed struct{}
	if err := bc.Commit(ctx, batches.BatchChange{To: rep.Final(), Message: msg, Report: rep.Status}); err != nil {
		return err
	}
	b.log.InfoContext(ctx, "batch reported", "result", queue.BatchStateName(rep.Final()), "summary", msg, "mail", rep.Key)
	return nil
}

// sendMail sends m, a mail of kind (report, queued), counting the outcome.
func (r *Batcher) sendMail(ctx context.Context, kind string, m mail.Message) error {
	err := r.cfg.Mail.Send(ctx, m)
	if r.cfg.Metrics != nil {
		outcome := "sent"
		if err != nil {
			outcome = "failed"
		}
		r.cfg.Metrics.Mail(ctx, kind, outcome)
	}
	return err
}

// mailReport sends the report, trying again while the mail server fails,
// until it is sent or ctx ends (the claim is lost or the batcher stops).
func (b *batch) mailReport(ctx context.Context, m mail.Message) error {
	policy := retry.Policy{Backoff: b.r.cfg.MailRetry, Max: max(b.r.cfg.MailRetry, maxBackoff)}
	var last error
	_, err := policy.Do(ctx, nil, func(attempt int) error {
		last = b.r.sendMail(ctx, "report", m)
		if last != nil {
			b.log.WarnContext(ctx, "report not mailed; trying again", "mail", m.Key, "retry_in", policy.Wait(attempt).String(), "error", last.Error())
		}
		return last
	})
	if err != nil {
		return fmt.Errorf("mailing the report: %w", last)
	}
	return nil
}
