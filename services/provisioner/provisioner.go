package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
)

// DiskUsage is the size of a filesystem and how much of it is used, in bytes.
type DiskUsage struct {
	Total, Used uint64
}

// Disk reports the usage of the filesystem that holds a directory. The
// service uses statfs; tests inject a disk of the size they need.
type Disk interface {
	Usage(ctx context.Context, dir string) (DiskUsage, error)
}

// statfsDisk reads filesystem statistics from the kernel
// (workdir.DiskUsage).
type statfsDisk struct{}

func (statfsDisk) Usage(ctx context.Context, dir string) (DiskUsage, error) {
	if err := ctx.Err(); err != nil {
		return DiskUsage{}, err
	}
	u, err := workdir.DiskUsage(dir)
	if err != nil {
		return DiskUsage{}, err
	}
	return DiskUsage{Total: u.Total, Used: u.Used}, nil
}

// QueueReader is what the provisioner reads of the queue: the jobs
// downloading, the status of a booked job, and the jobs already downloading
// with their sizes. *jobs.Reader is one.
type QueueReader interface {
	JobIDsIn(ctx context.Context, state queue.JobState) (map[string]bool, error)
	JobStatus(ctx context.Context, jid string) (*v1.JobStatus, error)
	ListJobs(ctx context.Context, f jobs.JobFilter) ([]*v1.Job, string, error)
	GetJobParts(ctx context.Context, jid string, parts queue.Parts) (*v1.Job, error)
}

// Limits are the provisioner's thresholds.
type Limits struct {
	// MaxUsage is the fraction of the working storage that may be used
	// (on disk or booked) once a job is let through.
	MaxUsage float64
	// UnestimatedMaxUsage is the usage above which jobs of unknown size
	// (space_needed 0) wait.
	UnestimatedMaxUsage float64
	// Retry is how long a job that cannot proceed waits before it is
	// evaluated again.
	Retry time.Duration
}

// Validate checks that the thresholds make sense together.
func (l Limits) Validate() error {
	switch {
	case l.MaxUsage <= 0 || l.MaxUsage > 1:
		return fmt.Errorf("provision max usage %v must be in (0, 1]", l.MaxUsage)
	case l.UnestimatedMaxUsage <= 0 || l.UnestimatedMaxUsage > l.MaxUsage:
		return fmt.Errorf("provision unestimated max usage %v must be in (0, max usage %v]", l.UnestimatedMaxUsage, l.MaxUsage)
	case l.Retry <= 0:
		return fmt.Errorf("provision retry %v must be positive", l.Retry)
	}
	return nil
}

// sweepEvery bounds how often bookings are checked against the queue when
// decisions go through; a refused decision always checks first.
const sweepEvery = time.Second

// sweepParallel bounds the status reads of one sweep.
const sweepParallel = 16

// Provisioner decides whether the working storage can take a job. It keeps
// a ledger of the space of jobs it let through (booked until their job
// leaves Downloading: the download writes that space meanwhile), so that
// two large jobs decided one after the other cannot both squeeze past.
// Decisions of one replica are serialized by the ledger's lock.
//
// Across replicas the ledger is only shared through the queue: at start a
// replica books every job already in Downloading, but two replicas deciding
// at the same moment can each let through a job that fits alone. Run one
// replica, or keep the thresholds with that margin.
type Provisioner struct {
	jobs   QueueReader
	disk   Disk
	root   string
	limits Limits
	log    *slog.Logger

	mu      sync.Mutex
	booked  ledger
	sweptAt time.Time
}

// ledger is the bookings and their running total: deciding a job costs
// the same however many jobs are booked (summing them per decision was a
// sixth of the provisioner's CPU with a few hundred jobs downloading).
type ledger struct {
	jobs  map[string]*booking
	total int64
}

func (l *ledger) book(jid string, b *booking) {
	l.drop(jid)
	l.jobs[jid] = b
	l.total += b.bytes
}

func (l *ledger) drop(jid string) {
	if b, ok := l.jobs[jid]; ok {
		l.total -= b.bytes
		delete(l.jobs, jid)
	}
}

// except is the bytes booked, leaving out one job (its own booking does
// not count against it when it is decided again).
func (l *ledger) except(jid string) int64 {
	if b, ok := l.jobs[jid]; ok {
		return l.total - b.bytes
	}
	return l.total
}

// booking is the space of a job let through.
type booking struct {
	bytes int64
	// container: the job unpacks a container, whose files' size its
	// downloader writes as the job's space_needed once the archive's
	// headers tell it (more than the archive's, which was booked first).
	container bool
	// committed: the job's move to Downloading was committed, so a job
	// no longer in Downloading has left it. Until then it may be on its way.
	committed bool
	at        time.Time
}

// NewProvisioner returns a provisioner for the working storage at root.
func NewProvisioner(jobs QueueReader, disk Disk, root string, limits Limits, log *slog.Logger) (*Provisioner, error) {
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	return &Provisioner{jobs: jobs, disk: disk, root: root, limits: limits, log: log, booked: ledger{jobs: map[string]*booking{}}}, nil
}

// StageConfig is the runner's configuration: Provisioning → Downloading.
// Jobs are decided one at a time in the order they are taken (InOrder):
// decisions are serialized by the ledger anyway; only their commits
// overlap (up to the service's concurrency).
func (p *Provisioner) StageConfig() stage.Config {
	return stage.Config{
		Name:    "provisioning",
		From:    queue.Provisioning,
		To:      queue.Downloading,
		InOrder: true,
		// Jobs are weighed in priority order: a waiting job is deferred, so
		// smaller ones behind it still get their turn.
		Spread:  1,
		Parts:   queue.PartSpaceNeeded | queue.PartConfiguration,
		Handler: p.Handle,
	}
}

// Seed books every job already in Downloading: after a restart, or beside
// another replica, their downloads are still writing.
func (p *Provisioner) Seed(ctx context.Context) error {
	seeded := map[string]*booking{}
	token := ""
	for {
		jobs, next, err := p.jobs.ListJobs(ctx, jobs.JobFilter{State: queue.Downloading, PageSize: 500, PageToken: token})
		if err != nil {
			return fmt.Errorf("booking jobs already downloading: %w", err)
		}
		for _, j := range jobs {
			seeded[j.GetId()] = bookingOf(j)
		}
		if next == "" {
			break
		}
		token = next
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for jid, b := range seeded {
		p.booked.book(jid, b)
	}
	p.log.InfoContext(ctx, "bookings seeded from jobs in Downloading", "jobs", len(seeded), "bytes", p.booked.total)
	return nil
}

// Booked returns the bytes booked now.
func (p *Provisioner) Booked() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.booked.total
}

// Handle decides one job: let it through (and book its space), make it
// wait, or fail it if it could not fit even on an empty disk.
func (p *Provisioner) Handle(ctx context.Context, claim stage.Job) stage.Outcome {
	jid, need := claim.ID(), claim.Data().GetSpaceNeeded()
	p.mu.Lock()
	defer p.mu.Unlock()
	swept := false
	if time.Since(p.sweptAt) > sweepEvery {
		p.sweepLocked(ctx)
		swept = true
	}
	d, err := p.decideLocked(ctx, jid, need)
	if err == nil && !d.proceed && !swept {
		// Space may have been freed since the last sweep: look before refusing.
		p.sweepLocked(ctx)
		d, err = p.decideLocked(ctx, jid, need)
	}
	switch {
	case err != nil:
		// The storage cannot be measured; nothing is known about the job.
		p.log.ErrorContext(ctx, "measuring the working storage", "root", p.root, "error", err)
		return stage.Wait(p.limits.Retry, jobs.Change{Message: fmt.Sprintf("waiting: cannot measure the working storage: %v", err)})
	case d.never:
		return stage.Fail(d.reason)
	case !d.proceed:
		p.log.InfoContext(ctx, "job waits for space", "space_needed", need, "reason", d.reason)
		return stage.Wait(p.limits.Retry, jobs.Change{Message: d.reason})
	}
	b := &booking{bytes: need, at: time.Now(), container: isContainer(claim.Data())}
	p.booked.book(jid, b)
	p.log.InfoContext(ctx, "job let through", "space_needed", need, "booked_total", p.booked.total)
	return stage.Next(jobs.Change{Message: d.reason}).OnCommitted(func() {
		p.mu.Lock()
		b.committed = true
		p.mu.Unlock()
	})
}

// decision is the verdict on one job.
type decision struct {
	proceed bool
	never   bool // cannot fit even on an empty disk
	reason  string
}

func (p *Provisioner) decideLocked(ctx context.Context, jid string, need int64) (decision, error) {
	u, err := p.disk.Usage(ctx, p.root)
	if err != nil {
		return decision{}, err
	}
	if u.Total == 0 {
		return decision{}, fmt.Errorf("filesystem of %s reports a size of 0", p.root)
	}
	total, used := float64(u.Total), float64(u.Used)
	booked := p.booked.except(jid)
	state := fmt.Sprintf("disk %s, used %s, booked %s", workdir.FormatBytes(int64(u.Total)), workdir.FormatBytes(int64(u.Used)), workdir.FormatBytes(booked))
	if need <= 0 {
		limit := p.limits.UnestimatedMaxUsage * total
		if used+float64(booked) > limit {
			return decision{reason: fmt.Sprintf("waiting for space: size unknown, and usage %s is above the %s allowed for jobs of unknown size (%s)",
				percent(used+float64(booked), total), percent(limit, total), state)}, nil
		}
		return decision{proceed: true, reason: fmt.Sprintf("provisioned: size unknown, usage %s (%s)", percent(used+float64(booked), total), state)}, nil
	}
	limit := p.limits.MaxUsage * total
	if float64(need) > limit {
		return decision{never: true, reason: fmt.Sprintf("needs %s, more than the working storage may ever hold (%s of %s)",
			workdir.FormatBytes(need), percent(limit, total), workdir.FormatBytes(int64(u.Total)))}, nil
	}
	free := limit - used - float64(booked)
	if float64(need) > free {
		return decision{reason: fmt.Sprintf("waiting for space: needs %s, free %s under the %s limit (%s)",
			workdir.FormatBytes(need), workdir.FormatBytes(int64(max(free, 0))), percent(limit, total), state)}, nil
	}
	return decision{proceed: true, reason: fmt.Sprintf("provisioned %s (%s)", workdir.FormatBytes(need), state)}, nil
}

// sweepLocked drops the bookings of jobs whose download has ended: they
// left Downloading for a later state, failed, or are gone. One listing of
// Downloading tells for the jobs whose move there was committed. A job
// whose move is not known to be committed keeps its booking while the
// commit may still be under way; after that its status tells (if it was
// refused instead, deciding it again replaces the booking).
//
// The same listing shows jobs downloading that this replica did not let
// through: a failed download requeued straight to Downloading, a job
// another replica let through. Each is booked at its space_needed, read
// once. And a container's booking is read again each sweep: its downloader
// raises the job's space_needed to what the archive unpacks to before it
// writes the files.
func (p *Provisioner) sweepLocked(ctx context.Context) {
	p.sweptAt = time.Now()
	downloading, err := p.jobs.JobIDsIn(ctx, queue.Downloading)
	if err != nil {
		// Unknown: keep the bookings (the safe side) until the next sweep.
		p.log.WarnContext(ctx, "listing the jobs downloading", "error", err)
		return
	}
	var unsure, read []string
	for jid, b := range p.booked.jobs {
		switch {
		case downloading[jid]:
			if b.container {
				read = append(read, jid)
			}
		case b.committed:
			p.booked.drop(jid)
		case time.Since(b.at) > commitGrace:
			unsure = append(unsure, jid)
		}
	}
	for jid := range downloading {
		if _, ok := p.booked.jobs[jid]; !ok {
			read = append(read, jid)
		}
	}
	done := make([]bool, len(unsure))
	p.each(unsure, func(i int, jid string) {
		st, err := p.jobs.JobStatus(ctx, jid)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			done[i] = true
		case err != nil:
			p.log.WarnContext(ctx, "checking a booked job", "booked_job", jid, "error", err)
		default:
			s := st.GetStatus()
			done[i] = s != queue.Provisioning && s != queue.Downloading
		}
	})
	for i, jid := range unsure {
		if done[i] {
			p.booked.drop(jid)
		}
	}
	found := make([]*booking, len(read))
	p.each(read, func(i int, jid string) {
		j, err := p.jobs.GetJobParts(ctx, jid, queue.PartSpaceNeeded|queue.PartConfiguration)
		switch {
		case errors.Is(err, queue.ErrNotFound):
		case err != nil:
			p.log.WarnContext(ctx, "reading the space of a job downloading", "booked_job", jid, "error", err)
		case j.GetStatus().GetStatus() == queue.Downloading:
			found[i] = bookingOf(j)
		}
	})
	for i, jid := range read {
		b := found[i]
		switch old, ok := p.booked.jobs[jid]; {
		case b == nil:
		case !ok:
			p.log.InfoContext(ctx, "a job downloading that was not booked here is booked", "booked_job", jid, "space_needed", b.bytes)
			p.booked.book(jid, b)
		case b.bytes != old.bytes:
			p.log.InfoContext(ctx, "a container's booking follows its space_needed", "booked_job", jid, "space_needed", b.bytes, "was", old.bytes)
			p.booked.book(jid, b)
		}
	}
}

// each runs f for every job of jids, sweepParallel at once.
func (p *Provisioner) each(jids []string, f func(i int, jid string)) {
	sem := make(chan struct{}, sweepParallel)
	var wg sync.WaitGroup
	for i, jid := range jids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i, jid)
		}()
	}
	wg.Wait()
}

// bookingOf is the booking of a job in Downloading, read from the queue.
func bookingOf(j *v1.Job) *booking {
	return &booking{bytes: j.GetSpaceNeeded(), committed: true, at: time.Now(), container: isContainer(j)}
}

// isContainer says whether the job unpacks a container.
func isContainer(j *v1.Job) bool {
	return j.GetConfiguration().GetPayloadType() == v1.PayloadType_PAYLOAD_TYPE_CONTAINER
}

// commitGrace is how long a booking's commit may take before the sweep
// reads its job's status.
const commitGrace = 2 * sweepEvery

func percent(part, whole float64) string {
	return fmt.Sprintf("%.1f%%", 100*part/whole)
}
