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
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/builtin"
	"github.com/ingestq/ingestq/services/recorder/internal/inventory"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/services/recorder/internal/recording"
	"github.com/ingestq/ingestq/services/recorder/internal/versions"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
)

func main() {
	var (
		builtinOn     = true
		inventoryDB   *string
		leaseDuration *time.Duration
		maxWait       *time.Duration
		storeSettings *s3store.StoreSettings
		merritt       *merrittstore.Settings
		versionsAddr  *string
		publicURL     *string
		presignExpiry *time.Duration
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
			maxWait = r.Duration("lease-max-wait", "INGESTQ_LEASE_MAX_WAIT", v1.LeaseInterval,
				"longest a Lease call waits for a job, whatever it asks")
			storeSettings = s3store.RegisterStore(r)
			merritt = merrittstore.Register(r)
			versionsAddr = r.String("versions-listen", "INGESTQ_VERSIONS_LISTEN", "",
				"HTTP address the recorder serves the local store's versions on, behind the admin token, for inventories on other hosts: a lease's fetch_url (empty: not served; without an admin token only a loopback address, served to whoever reaches it, as the admin methods are)")
			publicURL = r.String("versions-public-url", "INGESTQ_VERSIONS_PUBLIC_URL", "",
				"base URL other hosts reach INGESTQ_VERSIONS_LISTEN at (empty: http://<INGESTQ_VERSIONS_LISTEN>)")
			presignExpiry = r.Duration("presign-expiry", "INGESTQ_PRESIGN_EXPIRY", time.Hour,
				"how long a lease's presigned URL of an S3-stored version works")
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			if *leaseDuration < v1.MinLeaseDuration || *leaseDuration > v1.MaxLeaseDuration {
				return fmt.Errorf("INGESTQ_LEASE_DURATION: %s is outside %s..%s", *leaseDuration, v1.MinLeaseDuration, v1.MaxLeaseDuration)
			}
			if *maxWait <= 0 || *maxWait > v1.MaxLeaseWait {
				return fmt.Errorf("INGESTQ_LEASE_MAX_WAIT: %s is outside 0..%s", *maxWait, v1.MaxLeaseWait)
			}
			store, err := versionStore(ctx, env, *storeSettings, *versionsAddr, *publicURL, *presignExpiry)
			if err != nil {
				return err
			}
			// Versions stored in Merritt's storage service (by ingestq's
			// processor or by Merritt's storage consumer) are read from it.
			if store.Merritt, err = merritt.Reader(); err != nil {
				return err
			}
			if storeSettings.Kind == "merritt" && store.Merritt == nil {
				return fmt.Errorf("INGESTQ_STORE=merritt needs INGESTQ_MERRITT_STORAGE_URL to read the versions stored there")
			}
			opts := lease.Options{DefaultDuration: *leaseDuration, MaxWait: *maxWait, Logger: env.Logger,
				Tracer:  env.Telemetry.TracerProvider.Tracer("github.com/ingestq/ingestq/services/recorder"),
				Metrics: env.Telemetry.Metrics, Address: env.Config.AdvertiseAddr(), Version: env.Version}
			var db *inventory.DB
			if builtinOn {
				if !filepath.IsAbs(*inventoryDB) {
					return fmt.Errorf("INGESTQ_INVENTORY_DB: %q is not an absolute path", *inventoryDB)
				}
				if db, err = inventory.Open(ctx, *inventoryDB); err != nil {
					return err
				}
				// The recorder's runner takes jobs for the built-in recorder,
				// INGESTQ_CONCURRENCY at once: each lease costs round trips
				// to ZooKeeper that overlap, while the inventory's one
				// connection takes their rows in turn.
				opts.Recorder = &builtin.Recorder{DB: db, Logger: env.Logger, Versions: store}
				opts.Concurrency = env.Config.Concurrency
			}
			leases, err := lease.New(env.Jobs, opts)
			if err != nil {
				if db != nil {
					db.Close()
				}
				return err
			}
			v1.RegisterRecordingServiceServer(env.Server, recording.Server{Leases: leases, Versions: &store, Logger: env.Logger})
			v1.RegisterStageServiceServer(env.Server, stage.NewService(leases))
			// The worker registry shows the recorder like a stage replica:
			// its leases are its jobs in flight.
			go func() {
				if err := leases.Run(ctx); err != nil {
					env.Logger.Error("recorder stopped", "error", err)
				}
			}()
			if builtinOn {
				env.Logger.Info("built-in recorder running", "inventory_db", *inventoryDB, "concurrency", env.Config.Concurrency)
			}
			env.Server.OnShutdown(func(ctx context.Context) error {
				// No new lease from here on; the leases out, the built-in
				// recorder's among them, end or are given back by the
				// drain's deadline.
				left := leases.Drain(ctx)
				if db != nil {
					db.Close()
				}
				if left > 0 {
					return fmt.Errorf("recorder: %d lease(s) given back at the drain deadline", left)
				}
				return nil
			})
			return nil
		},
	})
}

// loopback reports whether addr (host:port) names a loopback address
// (localhost, 127.0.0.0/8, ::1) alone.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// versionStore reads the stored versions: the local store's folder, and
// the S3 store when one is configured; with versionsAddr set it serves the
// local store over HTTP until the service stops.
func versionStore(ctx context.Context, env *service.Env, st s3store.StoreSettings, versionsAddr, publicURL string,
	expiry time.Duration) (versions.Store, error) {
	if expiry <= 0 || expiry > 7*24*time.Hour {
		return versions.Store{}, fmt.Errorf("INGESTQ_PRESIGN_EXPIRY: %s is outside 0..168h", expiry)
	}
	store := versions.Store{Root: st.Root, PresignExpiry: expiry}
	if st.Kind == "s3" {
		c, err := s3store.Client(ctx, *st.S3)
		if err != nil {
			return versions.Store{}, err
		}
		store.S3 = c
	}
	if versionsAddr == "" {
		return store, nil
	}
	if env.Config.AdminToken == "" && !loopback(versionsAddr) {
		return versions.Store{}, fmt.Errorf("INGESTQ_VERSIONS_LISTEN %s needs INGESTQ_ADMIN_TOKEN: the versions are served to its holders only (without a token, on a loopback address alone)", versionsAddr)
	}
	ln, err := net.Listen("tcp", versionsAddr)
	if err != nil {
		return versions.Store{}, fmt.Errorf("INGESTQ_VERSIONS_LISTEN: %w", err)
	}
	store.PublicURL = publicURL
	if store.PublicURL == "" {
		store.PublicURL = "http://" + ln.Addr().String()
	}
	mux := http.NewServeMux()
	mux.Handle(versions.Prefix, store.Handler(env.Config.AdminToken))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			env.Logger.Error("serving versions over HTTP", "error", err)
		}
	}()
	env.Server.OnShutdown(srv.Shutdown)
	env.Logger.Info("serving the local store's versions", "listen", ln.Addr().String(), "public_url", store.PublicURL)
	return store, nil
}
