// Command recorder works on jobs in Recording: it serves
// ingestq.v1.RecordingService, through which an inventory leases each job,
// records the stored version and completes it (the job goes on to Notify),
// and it runs a built-in recorder that records into an embedded SQLite
// inventory unless an external inventory is configured to do it. Like every
// stage replica it serves ingestq.v1.StageService: its status, and pausing,
// resuming and draining its leases.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/builtin"
	"github.com/ingestq/ingestq/services/recorder/internal/inventory"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/services/recorder/internal/recording"
	"github.com/ingestq/ingestq/services/recorder/internal/stageservice"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
)

func main() {
	var (
		builtinOn     = true
		inventoryDB   *string
		leaseDuration *time.Duration
		maxWait       *time.Duration
	)
	service.Main(service.Spec{
		Name:     "recorder",
		Defaults: config.Defaults{Listen: "127.0.0.1:7406", MetricsListen: "127.0.0.1:9406"},
		Config: func(r *config.Registry) {
			r.Func("recorder-builtin", "INGESTQ_RECORDER_BUILTIN", "true",
				"record jobs into the built-in SQLite inventory; false when an external inventory uses RecordingService",
				func(s string) error {
					v, err := strconv.ParseBool(s)
					if err != nil {
						return fmt.Errorf("not true or false: %q", s)
					}
					builtinOn = v
					return nil
				})
			inventoryDB = r.String("inventory-db", "INGESTQ_INVENTORY_DB", "/var/lib/ingestq/inventory.db",
				"the built-in recorder's SQLite inventory file")
			leaseDuration = r.Duration("lease-duration", "INGESTQ_LEASE_DURATION", 5*time.Minute,
				"a lease's length when the caller gives none")
			maxWait = r.Duration("lease-max-wait", "INGESTQ_LEASE_MAX_WAIT", time.Minute,
				"longest a Lease call waits for a job, whatever it asks")
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			if *leaseDuration < v1.MinLeaseDuration || *leaseDuration > v1.MaxLeaseDuration {
				return fmt.Errorf("INGESTQ_LEASE_DURATION: %s is outside %s..%s", *leaseDuration, v1.MinLeaseDuration, v1.MaxLeaseDuration)
			}
			if *maxWait <= 0 || *maxWait > v1.MaxLeaseWait {
				return fmt.Errorf("INGESTQ_LEASE_MAX_WAIT: %s is outside 0..%s", *maxWait, v1.MaxLeaseWait)
			}
			// The worker registry shows the recorder like a stage replica:
			// its leases are its jobs in flight.
			var reg *queue.WorkerRegistration
			var leases *lease.Manager
			leases = lease.New(env.Queue, lease.Options{DefaultDuration: *leaseDuration, MaxWait: *maxWait, Logger: env.Logger,
				Tracer:  env.Telemetry.TracerProvider.Tracer("github.com/ingestq/ingestq/services/recorder"),
				Metrics: env.Telemetry.Metrics,
				Changed: func() {
					if reg != nil {
						reg.Update(leases.Report)
					}
				}})
			host, _ := os.Hostname()
			reg, err := env.Queue.RegisterWorker(ctx, &v1.WorkerInfo{
				Id:   env.Queue.NewWorkerID("recorder"),
				Host: host, Service: "recorder", Stage: queue.JobStateName(queue.Recording),
			})
			if err != nil {
				return fmt.Errorf("registering the recorder: %w", err)
			}
			v1.RegisterRecordingServiceServer(env.Server, recording.Server{Leases: leases})
			v1.RegisterStageServiceServer(env.Server, stage.NewService(stageservice.Worker{Leases: leases, Registration: reg}))

			stopped := make(chan struct{})
			var db *inventory.DB
			if builtinOn {
				if !filepath.IsAbs(*inventoryDB) {
					return fmt.Errorf("INGESTQ_INVENTORY_DB: %q is not an absolute path", *inventoryDB)
				}
				if db, err = inventory.Open(ctx, *inventoryDB); err != nil {
					return err
				}
				rec := &builtin.Recorder{Leases: leases, DB: db, Logger: env.Logger}
				// INGESTQ_CONCURRENCY loops lease at once: each lease costs
				// round trips to ZooKeeper that overlap, while the
				// inventory's one connection takes their rows in turn.
				var loops sync.WaitGroup
				for range env.Config.Concurrency {
					loops.Go(func() { rec.Run(ctx) })
				}
				go func() {
					defer close(stopped)
					loops.Wait()
				}()
				env.Logger.Info("built-in recorder running", "inventory_db", *inventoryDB, "concurrency", env.Config.Concurrency)
			} else {
				close(stopped)
			}
			env.Server.OnShutdown(func(ctx context.Context) error {
				// No new lease from here on: the built-in loop ends after
				// the version it is recording.
				left := leases.Stop(ctx)
				<-stopped
				if db != nil {
					db.Close()
				}
				reg.Close(ctx)
				if left > 0 {
					return fmt.Errorf("recorder: %d lease(s) given back at the drain deadline", left)
				}
				return nil
			})
			return nil
		},
	})
}
