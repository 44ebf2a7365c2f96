package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
)

// Estimator gives pending jobs their file list and estimates the space the
// files need.
type Estimator struct {
	Client Fetcher
	// Policy is the fetch policy every file URL of a fetched manifest must
	// pass (checked before the job goes on).
	Policy fetch.Policy
	// Limits bound a fetched manifest; MaxBytes also bounds its download.
	Limits checkm.Limits
	// Retry says how often a manifest is fetched before the job fails, and
	// how long the fetches wait between them.
	Retry retry.Policy
	// Concurrency bounds the HEAD requests of one job.
	Concurrency int
	// WorkRoot is the working storage: a file list too long for the job's
	// manifest node is kept in the job's working folder.
	WorkRoot workdir.Root
	// Budget bounds the time one job's HEAD requests take in all: the
	// files not sized by then keep their declared size (or none).
	Budget time.Duration
	// HostFailures is how many HEAD requests in a row may fail (no answer,
	// or a 5xx) before a host is not asked again for the rest of the job.
	// The host that failed is the one that did not answer: a redirect's
	// target, not the host that sent the redirect.
	HostFailures int
	// UnsizedPenalty is added to the priority of a job with a file whose
	// size cannot be learnt; LargeJobPenalty to that of a job above
	// LargeJobBytes. Larger numbers are served later.
	UnsizedPenalty  int32
	LargeJobBytes   int64
	LargeJobPenalty int32
	Logger          *slog.Logger
}

// Validate checks the settings.
func (e *Estimator) Validate() error {
	switch {
	case e.Client == nil:
		return errors.New("estimator: no HTTP client")
	case e.Retry.Attempts < 1:
		return fmt.Errorf("manifest attempts %d must be at least 1", e.Retry.Attempts)
	case e.Retry.Validate() != nil:
		return fmt.Errorf("manifest retry: %w", e.Retry.Validate())
	case e.Concurrency < 1:
		return fmt.Errorf("estimate concurrency %d must be at least 1", e.Concurrency)
	case e.Budget <= 0:
		return fmt.Errorf("estimate budget %s must be positive", e.Budget)
	case e.HostFailures < 1:
		return fmt.Errorf("estimate host failures %d must be at least 1", e.HostFailures)
	case e.UnsizedPenalty < 0 || e.UnsizedPenalty > queue.MaxPriority:
		return fmt.Errorf("unsized penalty %d must be in 0..%d", e.UnsizedPenalty, queue.MaxPriority)
	case e.LargeJobPenalty < 0 || e.LargeJobPenalty > queue.MaxPriority:
		return fmt.Errorf("large job penalty %d must be in 0..%d", e.LargeJobPenalty, queue.MaxPriority)
	case e.LargeJobBytes < 0:
		return fmt.Errorf("large job bytes %d must not be negative", e.LargeJobBytes)
	case e.WorkRoot.Dir() == "":
		return errors.New("estimator: no work root")
	case e.Limits.MaxBytes <= 0:
		return fmt.Errorf("manifest max bytes %d must be positive", e.Limits.MaxBytes)
	}
	return nil
}

// StageConfigs are the estimator's two runners: Pending → Estimating (jobs
// of held collections go to Held instead) and Estimating → Provisioning.
func (e *Estimator) StageConfigs() []stage.Config {
	return []stage.Config{{
		Name:            "pending",
		From:            queue.Pending,
		To:              queue.Estimating,
		Parts:           queue.PartConfiguration | queue.PartManifest,
		HoldCollections: true,
		Handler:         e.Pending,
	}, {
		Name:    "estimating",
		From:    queue.Estimating,
		To:      queue.Provisioning,
		Parts:   queue.PartConfiguration | queue.PartManifest,
		Handler: e.Estimate,
	}}
}

// Pending makes sure the job has its file list before it goes on: a job
// spawned from a manifest of manifests (or requeued to Pending, which
// drops the list of a job whose payload is an object manifest) gets its
// object manifest fetched and parsed here, and fails (naming the URL and
// line) if it is corrupt. The job's history says which manifest was read:
// its URL, its sha256 and its files.
func (e *Estimator) Pending(ctx context.Context, claim stage.Job) stage.Outcome {
	l, out, ok := e.ensureFileList(ctx, claim, false)
	if !ok {
		return out
	}
	ch := jobs.Change{}
	if l.node != nil {
		ch.Manifest = l.node
		ch.Message = l.read
		if l.node.GetKept() != nil {
			ch.Message += " (listed in the working folder's " + l.node.GetKept().GetName() + ")"
		}
	}
	return stage.Next(ch)
}

// fileList is a job's file list as a step has it.
type fileList struct {
	// files are the job's files; nil when the step did not need them and
	// they are kept in the working folder.
	files *v1.Manifest
	// node is the manifest node to write with the step: the list built
	// now (the files, or a reference to the file they are kept in); nil
	// when the job has its list already.
	node *v1.Manifest
	// read says what the list was built from when it was built now (the
	// manifest's URL, sha256 and files); "" when the job had it.
	read string
}

// ensureFileList loads the job's file list, or builds it when the job has
// none: kept in its manifest node when it fits (queue.FileListFitsNode),
// else in a file of the job's working folder that the node names. need
// says the step needs the files of a list kept so (Pending does not). When
// ok is false, out is what to do with the job instead.
func (e *Estimator) ensureFileList(ctx context.Context, claim stage.Job, need bool) (l fileList, out stage.Outcome, ok bool) {
	m, err := claim.LoadManifest(ctx)
	switch {
	case errors.Is(err, queue.ErrCorrupt):
		return l, stage.Failf("file list of the job unreadable: %v", err), false
	case err != nil:
		e.Logger.WarnContext(ctx, "reading the job's file list", "error", err)
		return l, stage.Release(), false
	case len(m.GetFiles()) > 0:
		return fileList{files: m}, out, true
	case m.GetKept() != nil && !need:
		return l, out, true
	case m.GetKept() != nil:
		wd, out, ok := e.workingDir(ctx, claim)
		if !ok {
			return l, out, false
		}
		files, err := e.WorkRoot.FileList(wd, m)
		switch {
		case errors.Is(err, queue.ErrCorrupt):
			return l, stage.Failf("file list of the job unreadable: %v", err), false
		case err != nil:
			e.Logger.WarnContext(ctx, "reading the job's file list", "error", err)
			return l, stage.Release(), false
		}
		return fileList{files: files}, out, true
	}
	m, read, err := e.fileList(ctx, claim.Data().GetConfiguration())
	var je *jobError
	switch {
	case errors.As(err, &je):
		return l, stage.Fail(je.msg), false
	case err != nil:
		// The job's context ended: nothing will be committed.
		return l, stage.Release(), false
	}
	e.Logger.InfoContext(ctx, "file list built", "payload_url", claim.Data().GetConfiguration().GetPayloadUrl(), "files", len(m.GetFiles()),
		"read", read)
	l = fileList{files: m, node: m, read: read}
	if !queue.FileListFitsNode(m) {
		wd, out, ok := e.workingDir(ctx, claim)
		if !ok {
			return l, out, false
		}
		if l.node, err = e.WorkRoot.KeepFileList(wd, m); err != nil {
			e.Logger.WarnContext(ctx, "keeping the job's file list in its working folder", "error", err)
			return l, stage.Wait(fileListRetry, jobs.Change{Message: fmt.Sprintf("waiting: %v", err)}), false
		}
	}
	return l, out, true
}

// fileListRetry is how long a job waits when its file list cannot be
// written to the working storage (full, or unreachable for a moment).
const fileListRetry = 15 * time.Second

// workingDir is the job's working folder, which holds a file list too long
// for its manifest node.
func (e *Estimator) workingDir(ctx context.Context, claim stage.Job) (string, stage.Outcome, bool) {
	wd, err := claim.WorkingDir(ctx, e.WorkRoot.Dir())
	switch {
	case errors.Is(err, queue.ErrCorrupt):
		return "", stage.Failf("working directory: %v", err), false
	case err != nil:
		e.Logger.WarnContext(ctx, "finding the job's working directory", "error", err)
		return "", stage.Release(), false
	}
	return wd, stage.Outcome{}, true
}

// Estimate sizes the job's files with HEAD requests (a bounded number at
// once), writes the sum as space_needed and lowers the job's priority when
// a file has no usable size or the job is large. It never fails a job for
// its files: a file whose size cannot be learnt counts 0.
//
// The estimate is advisory (the downloader fetches, and fails what cannot
// be fetched), so it is bounded: after e.Budget, or for a host that failed
// e.HostFailures times in a row, files keep their declared size, and the
// message says how many files were sized by HEAD and how many not.
//
// A file's size is the Content-Length its server announces; without one
// (or when the HEAD request fails) the size the manifest declares; without
// either the file is unsized. A container counts its archive's size: what
// it expands to is known only once the downloader unpacks it (and then
// writes the real space_needed).
func (e *Estimator) Estimate(ctx context.Context, claim stage.Job) stage.Outcome {
	l, out, ok := e.ensureFileList(ctx, claim, true)
	if !ok {
		return out
	}
	est := e.sizes(ctx, l.files.GetFiles())
	if ctx.Err() != nil {
		return stage.Release()
	}
	sizes := est.sizes
	var total int64
	unsized := 0
	for _, s := range sizes {
		if s < 0 {
			unsized++
			continue
		}
		total += s
	}
	old := claim.Data().GetPriority()
	prio := old
	var why []string
	if unsized > 0 {
		prio += e.UnsizedPenalty
		why = append(why, fmt.Sprintf("%d of %d files without a usable size", unsized, len(sizes)))
	}
	if total > e.LargeJobBytes {
		prio += e.LargeJobPenalty
		why = append(why, fmt.Sprintf("larger than %d bytes", e.LargeJobBytes))
	}
	prio = min(prio, queue.MaxPriority)
	msg := fmt.Sprintf("estimated %d bytes for %d files", total, len(sizes))
	if prio != old {
		msg += fmt.Sprintf("; priority %d → %d (%s)", old, prio, strings.Join(why, ", "))
	} else if len(why) > 0 {
		msg += fmt.Sprintf(" (%s)", strings.Join(why, ", "))
	}
	short := est.cutShort(e.Budget, e.HostFailures)
	if short != "" {
		msg += "; " + short
	}
	e.Logger.InfoContext(ctx, "job estimated", "space_needed", total, "files", len(sizes), "unsized", unsized, "priority", prio,
		"sized_by_head", est.byHead, "not_sized_by_head", len(sizes)-est.byHead,
		"left_by_budget", est.outOfBudget, "left_by_host_down", est.hostDown, "hosts_given_up", est.down)
	ch := jobs.Change{SpaceNeeded: &total, Message: msg}
	if prio != old {
		ch.Priority = &prio
	}
	ch.Manifest = l.node
	if l.read != "" {
		ch.Message = l.read + "; " + msg
	}
	return stage.Next(ch)
}

// errBudgetSpent ends the HEAD requests of a job whose estimate budget is
// spent.
var errBudgetSpent = errors.New("estimate budget spent")

// estimate is what the HEAD requests of one job learnt.
type estimate struct {
	sizes []int64 // per file: its size, -1 when unknown
	// byHead counts the files sized by their HEAD answer's Content-Length;
	// the others have their declared size or none.
	byHead int
	// outOfBudget counts the files not asked (or whose request was cut
	// short) because the budget was spent; hostDown those not asked because
	// their host was given up on, whose names are in down.
	outOfBudget int
	hostDown    int
	down        []string
}

// cutShort says why files went unasked, for the job's message: empty when
// every file was asked.
func (est estimate) cutShort(budget time.Duration, failures int) string {
	var why []string
	if est.outOfBudget > 0 {
		why = append(why, fmt.Sprintf("estimate budget %s spent with %d files left", budget, est.outOfBudget))
	}
	if est.hostDown > 0 {
		// A few names say enough; the log has them all.
		hosts := strings.Join(est.down[:min(len(est.down), 3)], ", ")
		if len(est.down) > 3 {
			hosts += fmt.Sprintf(" and %d more hosts", len(est.down)-3)
		}
		why = append(why, fmt.Sprintf("%s failed %d times in a row: %d files not asked", hosts, failures, est.hostDown))
	}
	if len(why) == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d files sized by HEAD, %d not (%s)",
		est.byHead, len(est.sizes), len(est.sizes)-est.byHead, strings.Join(why, "; "))
}

// sizes learns the size of each file, e.Concurrency at once, within the
// estimate budget and asking no more of a host given up on.
func (e *Estimator) sizes(ctx context.Context, files []*v1.ManifestFile) estimate {
	headCtx, cancel := context.WithTimeoutCause(ctx, e.Budget, errBudgetSpent)
	defer cancel()
	gate := newHostGate(e.HostFailures)
	est := estimate{sizes: make([]int64, len(files))}
	how := make([]fileSizing, len(files))
	sem := make(chan struct{}, e.Concurrency)
	var wg sync.WaitGroup
	next := 0
	for ; next < len(files); next++ {
		acquired := false
		select {
		case sem <- struct{}{}:
			acquired = true
		case <-headCtx.Done():
		}
		if headCtx.Err() != nil {
			if acquired {
				<-sem
			}
			break
		}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			est.sizes[i], how[i] = e.size(headCtx, gate, files[i])
		}(next)
	}
	wg.Wait()
	for i := next; i < len(files); i++ {
		est.sizes[i], how[i] = files[i].GetSize(), sizedOutOfBudget
	}
	for _, h := range how {
		switch h {
		case sizedByHead:
			est.byHead++
		case sizedOutOfBudget:
			est.outOfBudget++
		case sizedHostDown:
			est.hostDown++
		}
	}
	est.down = gate.downHosts()
	return est
}

// fileSizing is where a file's size came from.
type fileSizing int

const (
	sizedByHead      fileSizing = iota // the HEAD answer's Content-Length
	sizedFallback                      // asked, no usable length: the declared size or none
	sizedOutOfBudget                   // not asked, or cut short, the budget spent
	sizedHostDown                      // not asked, its host given up on
)

// errTargetNotAsked stops a request at a redirect whose target's host the
// gate does not let it ask.
var errTargetNotAsked = errors.New("redirect target's host given up on")

// size is the file's size (-1: unknown) and where it came from.
//
// The gate counts every host the request reaches, the URL's and then each
// redirect's target, so the host that answers or fails is the one counted:
// a host that redirects answered, however its redirect's target fares. A
// request gives its slot back before it waits for the target's, so it
// never waits holding one.
func (e *Estimator) size(ctx context.Context, gate *hostGate, f *v1.ManifestFile) (int64, fileSizing) {
	host := hostOf(f.GetUrl())
	if !gate.enter(ctx, host) {
		if ctx.Err() != nil {
			return f.GetSize(), sizedOutOfBudget
		}
		return f.GetSize(), sizedHostDown
	}
	held := true // a slot of host, the one the request is at
	follow := func(ctx context.Context, target *url.URL) error {
		gate.leave(host, headAnswered) // it answered, with a redirect
		host = hostKey(target)
		if held = gate.enter(ctx, host); !held {
			return errTargetNotAsked
		}
		return nil
	}
	n, err := e.Client.Head(fetch.WithRedirectCheck(ctx, follow), f.GetUrl())
	switch {
	case !held:
		// Stopped at a redirect, its target not asked.
		if ctx.Err() != nil {
			return f.GetSize(), sizedOutOfBudget
		}
		return f.GetSize(), sizedHostDown
	case ctx.Err() != nil:
		// Cut short by the budget (or the job's end): says nothing of the host.
		gate.leave(host, headNeutral)
		return f.GetSize(), sizedOutOfBudget
	case err != nil:
		e.Logger.WarnContext(ctx, "HEAD failed", "file", f.GetName(), "url", f.GetUrl(), "host", host, "error", err)
		if gate.leave(host, headResultOf(err)) {
			e.Logger.WarnContext(ctx, "host given up on for the rest of the job's estimate", "host", host, "failures_in_a_row", e.HostFailures)
		}
		return f.GetSize(), sizedFallback // the declared size, or -1
	}
	gate.leave(host, headAnswered)
	if n < 0 {
		return f.GetSize(), sizedFallback
	}
	return n, sizedByHead
}
