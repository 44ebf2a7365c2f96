// Package janitor removes completed batches once their retention has
// passed: their ZooKeeper nodes (through the queue) and the working
// directories of their jobs; the console sign-ins that have expired; the
// queue's garbage no writer will finish (Reclaim); and, with an S3 store,
// the multipart uploads nothing will finish.
package janitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/workdir"
)

// batchesPerRun bounds one run's work; the next run goes on.
const batchesPerRun = 100

// Janitor cleans up completed batches and the queue's garbage.
type Janitor struct {
	// Tools are the operators' tools over the batcher's session.
	Tools     admin.Tools
	Root      workdir.Root
	Retention time.Duration
	Interval  time.Duration
	Logger    *slog.Logger
	// Uploads is the S3 store's client, with an S3 store (nil: none): a
	// run aborts the unfinished multipart uploads of Bucket begun more than
	// UploadAge ago, but those of objects being stored now.
	Uploads   s3store.UploadsClient
	Bucket    string
	UploadAge time.Duration
	// ReclaimGrace is how long garbage stands unchanged before Reclaim
	// removes it (default DefaultReclaimGrace).
	ReclaimGrace time.Duration
	// Reclaims, when set, counts what Reclaim removes
	// (NewReclaimsCounter).
	Reclaims metric.Int64Counter

	seen sightings
}

// Result says what one run removed.
type Result struct {
	Batches []string
	Jobs    int
	// DirErrors are working directories that could not be removed.
	DirErrors []error
	// UploadsAborted counts the stale multipart uploads aborted.
	UploadsAborted int
}

// RunOnce removes the completed batches older than the retention (at most
// batchesPerRun of them) with their jobs' working directories, and the
// expired console sign-ins.
func (j *Janitor) RunOnce(ctx context.Context) (Result, error) {
	res, err := Clean(ctx, j.Tools.Batches, j.Root, j.Retention, batchesPerRun)
	if _, serr := j.Tools.SignIns.Cleanup(ctx, time.Now()); serr != nil {
		err = errors.Join(err, fmt.Errorf("removing expired console sign-ins: %w", serr))
	}
	if j.Uploads != nil {
		var uerr error
		if res.UploadsAborted, uerr = j.abortStaleUploads(ctx); uerr != nil {
			err = errors.Join(err, fmt.Errorf("aborting stale multipart uploads: %w", uerr))
		}
	}
	return res, err
}

// abortStaleUploads aborts the uploads of the S3 store that no storing step
// will finish: begun more than UploadAge ago, under no object whose
// storage lock is held now (its key's first segment is the object's lock
// name, as the S3 store lays versions out).
func (j *Janitor) abortStaleUploads(ctx context.Context) (int, error) {
	storing, _, err := j.Tools.Queue.ObjectLocks(ctx)
	if err != nil {
		return 0, err
	}
	held := make(map[string]bool, len(storing))
	for _, name := range storing {
		held[name] = true
	}
	return s3store.AbortStaleUploads(ctx, j.Uploads, j.Bucket, time.Now().Add(-j.UploadAge), func(key string) bool {
		object, _, _ := strings.Cut(key, "/")
		return held[object]
	})
}

// Clean removes at most limit completed batches whose status is older than
// olderThan, with their jobs' working directories.
func Clean(ctx context.Context, b *admin.Batches, root workdir.Root, olderThan time.Duration, limit int) (Result, error) {
	res, err := b.Cleanup(ctx, olderThan, limit)
	out := Result{Batches: res.Batches, Jobs: len(res.Jobs)}
	for _, job := range res.Jobs {
		if dir := queue.JobWorkingDir(root.Dir(), job); dir != "" {
			if rerr := root.Remove(dir); rerr != nil {
				out.DirErrors = append(out.DirErrors, rerr)
			}
		}
	}
	for _, bid := range res.Batches {
		if rerr := root.RemoveBatch(bid); rerr != nil {
			out.DirErrors = append(out.DirErrors, rerr)
		}
	}
	return out, err
}

// Run runs RunOnce and Reclaim now and every Interval until ctx ends.
func (j *Janitor) Run(ctx context.Context) {
	t := time.NewTicker(j.Interval)
	defer t.Stop()
	for {
		res, err := j.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			j.Logger.Warn("cleaning up the queue", "error", err.Error())
		}
		if _, err := j.Reclaim(ctx, time.Now()); err != nil && ctx.Err() == nil {
			j.Logger.Warn("reclaiming the queue's garbage", "error", err.Error())
		}
		if len(res.Batches) > 0 {
			j.Logger.Info("completed batches cleaned up", "batches", len(res.Batches), "jobs", res.Jobs)
		}
		if res.UploadsAborted > 0 {
			j.Logger.Info("stale multipart uploads aborted", "uploads", res.UploadsAborted, "older_than", j.UploadAge.String())
		}
		for _, e := range res.DirErrors {
			j.Logger.Warn("working directory left in place", "error", e.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
