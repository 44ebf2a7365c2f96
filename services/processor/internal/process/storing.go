package process

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/serving"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
)

// HandleStoring is the storing stage's handler: it stores the version the
// job's store node names, under the object's storage lock, and hands the
// job to Recording with the version manifest in its inventory node. A job
// stored again (a crash before the commit, an admin requeue to Storing)
// gets the version it stored before: storage is idempotent per job.
func (p *Processor) HandleStoring(ctx context.Context, claim stage.Claim) stage.Outcome {
	out, err := p.storeVersion(ctx, claim)
	return p.outcome(ctx, "storing", out, err, nil)
}

func (p *Processor) storeVersion(ctx context.Context, claim stage.Claim) (stage.Outcome, error) {
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
	if err != nil {
		return stage.Outcome{}, failf("%v", err)
	}
	// The job's commit releases the lock once the job has moved on (the
	// runner releases it after a commit that did not happen).
	// gofail: var storingVersionStored struct{}
	carried = true
	p.logger().InfoContext(ctx, "object stored", "ark", ark, "version", v.Number, "manifest_url", v.ManifestURL)
	return stage.Next(jobs.Change{
		Message:   fmt.Sprintf("stored %s version %d", ark, v.Number),
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
