package process

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/serving"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
)

// HandleStoring is the storing stage's handler: it stores the version the
// job's store node names, under the object's storage lock, and hands the
// job to Recording with the version manifest in its inventory node. A job
// stored again (a crash before the commit, an admin requeue to Storing)
// gets the version it stored before: storage is idempotent per job. A
// failure that may pass (store.MayPass) leaves the job in Storing, the
// attempt in its history and the lock released, to be tried again after a
// backoff for as long as StoreRetry allows; counted from the history, the
// attempts survive a restart of the processor.
func (p *Processor) HandleStoring(ctx context.Context, claim stage.Job) stage.Outcome {
	out, err := p.storeVersion(ctx, claim)
	return p.outcome(ctx, "storing", out, err, nil)
}

func (p *Processor) storeVersion(ctx context.Context, claim stage.Job) (stage.Outcome, error) {
	job := claim.Data()
	ark := job.GetIdentifiers().GetPrimaryId()
	if ark == "" {
		return stage.Outcome{}, failf("the job has no ARK to store under: processing gives it one (requeue it to Processing)")
	}
	dir, err := claim.WorkingDir(ctx, p.WorkRoot)
	if err != nil {
		if errors.Is(err, queue.ErrCorrupt) {
			return stage.Outcome{}, failf("working folder: %v", err)
		}
		return stage.Outcome{}, fmt.Errorf("finding the working folder: %w", err)
	}
	wd, err := p.workingDir(dir)
	if err != nil {
		return stage.Outcome{}, failf("working folder: %v", err)
	}
	// Only the storage manifest processing wrote into the job's working
	// folder is stored: a store node cannot lead the store elsewhere.
	manifest := checkm.FileURL(filepath.Join(wd, StorageManifest))
	st := job.GetStore()
	if st == nil {
		return stage.Outcome{}, failf("the job has no store node naming what to store: processing writes it (requeue it to Processing)")
	}
	retries, first, last := storingAttempts(job.GetStatus())
	if retries > 0 {
		// Another replica gave the job back to wait: its wait is not over.
		if early := last.Add(p.StoreRetry.wait(retries) / 2); time.Now().Before(early) {
			return stage.Wait(time.Until(early), jobs.Change{}), nil
		}
	}
	mode := st.GetMode()
	if p.Merritt != nil {
		if mode, err = p.merrittStoreNode(st, wd, ark); err != nil {
			return stage.Outcome{}, err
		}
	} else if st.GetManifestUrl() != manifest {
		return stage.Outcome{}, failf("the store node names %q, not the job's storage manifest %s", st.GetManifestUrl(), manifest)
	}
	if mode == "" {
		mode = submissionMode(job.GetConfiguration())
	}

	lock, err := p.Queue.LockStorage(ctx, ark)
	if errors.Is(err, queue.ErrLocked) {
		p.logger().InfoContext(ctx, "object is being stored by another job; waiting", "ark", ark)
		return stage.Wait(p.lockRetry(), jobs.Change{}), nil
	}
	if err != nil {
		return stage.Outcome{}, fmt.Errorf("taking the storage lock of %s: %w", ark, err)
	}
	// Until the outcome carries the lock, it is this step's to release:
	// after a failed store, and after a panic, which the runner turns into
	// a failure that knows nothing of it.
	carried := false
	defer func() {
		if !carried {
			p.unlock(ctx, []*jobs.ObjectLock{lock})
		}
	}()
	v, err := p.Storage.Store(ctx, store.Request{ARK: ark, JobID: claim.ID(), Mode: mode, ManifestURL: manifest,
		Deletions: st.GetDeletions(), LocalIDs: job.GetIdentifiers().GetLocalId(), Digested: p.digested.take(claim, manifest)})
	if err != nil && ctx.Err() == nil && store.MayPass(err) {
		carried = true
		return p.storeLater(retries+1, first, err, lock), nil
	}
	if err != nil {
		return stage.Outcome{}, failf("%v", err)
	}
	// The job's commit releases the lock once the job has moved on (the
	// runner releases it after a commit that did not happen).
	// gofail: var storingVersionStored struct{}
	carried = true
	p.logger().InfoContext(ctx, "object stored", "ark", ark, "version", v.Number, "manifest_url", v.ManifestURL)
	message := fmt.Sprintf("stored %s version %d", ark, v.Number)
	if retries > 0 {
		message += fmt.Sprintf(" (attempt %d)", retries+1)
	}
	return stage.Next(jobs.Change{
		Message:   message,
		Inventory: &v1.Inventory{ManifestUrl: v.ManifestURL, Mode: mode, Version: int32(v.Number)},
		Unlock:    []*jobs.ObjectLock{lock},
	}), nil
}

// merrittStoreNode checks a store node written for Merritt's storage
// service: its mode names this processor's node and the job's ARK, and it
// names the job's add manifest. It returns the mode's action.
func (p *Processor) merrittStoreNode(st *v1.Store, wd, ark string) (string, error) {
	action, node, object, err := merrittstore.ParseMode(st.GetMode())
	switch {
	case err != nil:
		return "", failf("the store node's %v; processing for Merritt's storage service writes <add|update>/<node>/<ARK> (requeue it to Processing)", err)
	case node != p.Merritt.Storage.Node:
		return "", failf("the store node names storage node %d; this processor stores to node %d (INGESTQ_MERRITT_NODE): requeue it to Processing to store it there", node, p.Merritt.Storage.Node)
	case object != ark:
		return "", failf("the store node names object %q, not the job's ARK %s", object, ark)
	}
	if !p.Merritt.Serving.Names(wd, serving.AddManifest, st.GetManifestUrl()) {
		return "", failf("the store node names %q, not the job's add manifest %s", st.GetManifestUrl(), serving.AddManifest)
	}
	return action, nil
}

// StoreRetry is how the storing step tries a version again after a
// failure that may pass.
type StoreRetry struct {
	// For is how long, from the first failed attempt, the version is tried
	// again; 0: it is not, and the job fails at once.
	For time.Duration
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one up to MaxStoreBackoff (default 10 s).
	Backoff time.Duration
}

// MaxStoreBackoff caps the wait between two attempts to store a version
// (a larger StoreRetry.Backoff is its own cap).
const MaxStoreBackoff = 5 * time.Minute

// wait is the wait after the n-th failed attempt, before jitter: a wait
// lies between half of it and all of it.
func (r StoreRetry) wait(n int) time.Duration {
	b := r.Backoff
	if b <= 0 {
		b = 10 * time.Second
	}
	return retry.Policy{Backoff: b, Max: max(MaxStoreBackoff, b)}.Wait(n)
}

// storeLater is the outcome of the attempt-th attempt to store a version,
// failed with err, which may pass: the job stays in Storing with the
// attempt in its history and the storage lock released, to be tried again
// after a wait, unless the attempts began StoreRetry.For ago (first, zero
// for this attempt's own start) and it fails saying so.
func (p *Processor) storeLater(attempt int, first time.Time, err error, lock *jobs.ObjectLock) stage.Outcome {
	now := time.Now()
	if first.IsZero() {
		first = now
	}
	if p.StoreRetry.For <= 0 || now.Sub(first) >= p.StoreRetry.For {
		tried := ""
		if attempt > 1 {
			tried = fmt.Sprintf(" (attempt %d, tried since %s, INGESTQ_MERRITT_RETRY_FOR %s)", attempt, first.UTC().Format(time.RFC3339), p.StoreRetry.For)
		}
		return stage.To(queue.Failed, jobs.Change{Message: fmt.Sprintf("%v%s", err, tried), Unlock: []*jobs.ObjectLock{lock}})
	}
	d := retry.Jittered(p.StoreRetry.wait(attempt), 0.5)
	// The history keeps the start of a message: the store's own words,
	// without what the job's state says already, come before its end.
	var reason error = err
	var inner interface {
		error
		MayPass() bool
	}
	if errors.As(err, &inner) {
		reason = inner
	}
	return stage.Wait(d, jobs.Change{
		Message: fmt.Sprintf("storing attempt %d failed; again in %s, until %s: %v", attempt, roundWait(d),
			first.Add(p.StoreRetry.For).UTC().Format(time.RFC3339), reason),
		Unlock: []*jobs.ObjectLock{lock},
	})
}

// roundWait rounds a wait for a message.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// storingAttempts reads the job's history for the failed attempts to store
// it since it last came into Storing: how many, when the first and the
// last ended (each one a stay in Storing).
func storingAttempts(st *v1.JobStatus) (n int, first, last time.Time) {
	h := st.GetHistory()
	for i := len(h) - 1; i >= 0 && h[i].GetFrom() == queue.Storing && h[i].GetTo() == queue.Storing; i-- {
		n++
		first = h[i].GetAt().AsTime()
		if last.IsZero() {
			last = first
		}
	}
	return n, first, last
}
