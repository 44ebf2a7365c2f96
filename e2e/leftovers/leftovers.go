// Package leftovers checks what a run of the pipeline left in ZooKeeper:
// locks still held on jobs, batches and objects, damage fsck finds, and
// worker entries of services that have stopped. The end-to-end, bad-input
// and chaos suites all end with these checks.
package leftovers

import (
	"context"
	"errors"
	"fmt"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// maxPages bounds the listings: a queue the suites make fits many times.
const maxPages = 100

// Locks returns an error naming every job, batch, storage and inventory
// lock held now. Once the work has ended none may be left.
func Locks(ctx context.Context, q *session.Session) error {
	var errs []error
	err := eachPage(func(token string) ([]*v1.Job, string, error) {
		return jobs.NewReader(q).ListJobs(ctx, jobs.JobFilter{PageSize: 1000, PageToken: token})
	}, func(j *v1.Job) {
		if j.GetLocked() {
			errs = append(errs, fmt.Errorf("job %s (%s) still locked", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus())))
		}
	})
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	err = eachPage(func(token string) ([]*v1.Batch, string, error) {
		return admin.New(q).Batches.List(ctx, admin.BatchFilter{PageSize: 500, PageToken: token})
	}, func(b *v1.Batch) {
		if b.GetLocked() {
			errs = append(errs, fmt.Errorf("batch %s (%s) still locked", b.GetId(), queue.BatchStateName(b.GetStatus().GetStatus())))
		}
	})
	if err != nil {
		return fmt.Errorf("listing batches: %w", err)
	}
	storage, inventory, err := admin.New(q).Queue.ObjectLocks(ctx)
	if err != nil {
		return fmt.Errorf("listing object locks: %w", err)
	}
	if len(storage)+len(inventory) > 0 {
		errs = append(errs, fmt.Errorf("object locks left: storage %v, inventory %v", storage, inventory))
	}
	return errors.Join(errs...)
}

// eachPage calls each for every item of a paged listing, at most maxPages
// pages of it.
func eachPage[T any](list func(token string) ([]T, string, error), each func(T)) error {
	token := ""
	for range maxPages {
		items, next, err := list(token)
		if err != nil {
			return err
		}
		for _, it := range items {
			each(it)
		}
		if token = next; token == "" {
			break
		}
	}
	return nil
}

// AfterStop checks the queue once every service has stopped: fsck finds
// nothing, and no service left its worker entry behind (a clean stop
// removes it; one left over would be a session that outlived its process).
func AfterStop(ctx context.Context, q *session.Session) error {
	var errs []error
	if rep, err := admin.New(q).Queue.Fsck(ctx, admin.FsckOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("fsck: %w", err))
	} else if !rep.Clean() {
		errs = append(errs, fmt.Errorf("fsck found damage: %+v", rep.Damages))
	}
	if ws, err := admin.New(q).Queue.ListWorkers(ctx); err != nil {
		errs = append(errs, fmt.Errorf("listing workers: %w", err))
	} else if len(ws) > 0 {
		ids := make([]string, len(ws))
		for i, w := range ws {
			ids[i] = w.GetId()
		}
		errs = append(errs, fmt.Errorf("%d worker entries left after the stop: %v", len(ws), ids))
	}
	return errors.Join(errs...)
}
