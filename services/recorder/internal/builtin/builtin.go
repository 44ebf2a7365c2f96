// Package builtin is the recorder's own inventory client: the lease
// manager hands it the jobs its stage runner takes (lease.Recorder), under
// leases like those of RecordingService; it reads each stored version's
// manifest and records it in the SQLite inventory.
package builtin

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ingestq/ingestq/services/recorder/internal/inventory"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/services/recorder/internal/versions"
	"github.com/ingestq/ingestq/shared/telemetry"
)

// Recorder records leased versions into an inventory database.
type Recorder struct {
	DB *inventory.DB
	// LeaseDuration is each lease's length; it is renewed at a third of it
	// while a version is being recorded (default 1 min).
	LeaseDuration time.Duration
	Logger        *slog.Logger
	// Versions reads the version manifests (file:// and, when it has an
	// S3 client, s3://).
	Versions versions.Store
}

var _ lease.Recorder = (*Recorder)(nil)

// LeaseLength is LeaseDuration, or its default.
func (r *Recorder) LeaseLength() time.Duration {
	if r.LeaseDuration > 0 {
		return r.LeaseDuration
	}
	return time.Minute
}

// Record records one leased version and completes the lease, or fails it
// with what went wrong.
func (r *Recorder) Record(ctx context.Context, leases *lease.Manager, l *lease.Lease) {
	// Its work continues the lease's span in the job's trace.
	ctx = telemetry.WithJob(telemetry.Extract(ctx, l.Traceparent), l.JobID, l.BatchID)
	workCtx, stop := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		r.renew(workCtx, leases, l.ID)
	}()
	number, err := r.record(workCtx, l)
	// gofail: var recorderRowWritten struct{}
	stop()
	<-renewed
	// The outcome is committed even if ctx ended meanwhile: a drain waits
	// for it.
	outCtx := context.WithoutCancel(ctx)
	if err != nil {
		msg := fmt.Sprintf("recording %s in the inventory: %v", l.ARK, err)
		r.Logger.WarnContext(ctx, "recording failed", "lease", l.ID, "error", err)
		if ferr := leases.Fail(outCtx, l.ID, msg); ferr != nil {
			r.Logger.WarnContext(ctx, "failing the lease", "lease", l.ID, "error", ferr)
		}
		return
	}
	if err := leases.Complete(outCtx, l.ID); err != nil {
		r.Logger.WarnContext(ctx, "completing the lease", "lease", l.ID, "error", err)
		return
	}
	r.Logger.InfoContext(ctx, "version recorded", "ark", l.ARK, "version", number)
}

// renew keeps the lease alive until ctx ends.
func (r *Recorder) renew(ctx context.Context, leases *lease.Manager, id string) {
	t := time.NewTicker(r.LeaseLength() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := leases.Renew(ctx, id, r.LeaseLength()); err != nil {
				r.Logger.WarnContext(ctx, "renewing the lease", "lease", id, "error", err)
				return
			}
		}
	}
}

func (r *Recorder) record(ctx context.Context, l *lease.Lease) (int, error) {
	entries, number, err := r.Versions.Version(ctx, l.ManifestURL, l.Version, l.JobID)
	if err != nil {
		return 0, err
	}
	// A job a peer processed does not say its version: the inventory gives
	// it the number after the object's last (an object of Merritt's storage
	// service says which is the job's).
	v := inventory.Version{ARK: l.ARK, Number: number, ManifestURL: l.ManifestURL, Mode: l.Mode,
		JobID: l.JobID, LocalIDs: l.LocalIDs, Files: make([]inventory.File, 0, len(entries))}
	for _, e := range entries {
		v.Files = append(v.Files, inventory.File{Name: e.FileName, Size: e.FileSize, DigestAlg: e.HashAlgorithm, Digest: e.HashValue})
	}
	return r.DB.Record(ctx, v)
}
