// Command processor works on jobs in Processing: it gives each object its
// ARK (a local id's, or a minted one), writes its system files and checks
// every file's digest again, then moves the job to Storing. Its storing
// step stores the version (in a folder, a bucket, or a node of Merritt's
// storage service) and hands the job to Recording with the version
// manifest's URL; it is switched off where another consumer (Merritt's
// storage service) takes jobs in Storing. Versions for Merritt's storage
// service are served to it over HTTP (INGESTQ_MERRITT_SERVE_LISTEN).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/process"
	"github.com/ingestq/ingestq/services/processor/internal/serving"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/durable"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
)

// settings are the processor's own.
type settings struct {
	workRoot, profilesDir          *string
	minter, shoulder               *string
	ezidURL, ezidUser              *string
	ezidPassword, ezidPasswordFile *string
	ezidTimeout                    *time.Duration
	syncLinger                     *time.Duration
	storing                        *bool
	store                          *s3store.StoreSettings
	merritt                        *merrittstore.Settings
	serveListen, serveURL          *string
	retryFor, retryBackoff         *time.Duration
}

func main() {
	var s settings
	service.Main(service.Spec{
		Name:     "processor",
		Defaults: config.Defaults{Listen: "127.0.0.1:7405", MetricsListen: "127.0.0.1:9405"},
		Config: func(r *config.Registry) {
			s.workRoot = config.RegisterWorkRoot(r)
			s.store = s3store.RegisterStore(r)
			s.profilesDir = r.String("profiles-dir", "INGESTQ_PROFILES_DIR", "examples/profiles",
				"directory of collection profiles (*.yaml)")
			s.minter = r.String("minter", "INGESTQ_MINTER", "local",
				"how ARKs are minted: local (a ZooKeeper counter, NOID names) or ezid")
			s.shoulder = r.String("mint-shoulder", "INGESTQ_MINT_SHOULDER", "ark:/99999/fk4",
				"shoulder new ARKs are minted on")
			s.ezidURL = r.String("ezid-url", "INGESTQ_EZID_URL", "",
				"EZID base URL, e.g. https://ezid.example.org (with -minter ezid)")
			s.ezidUser = r.String("ezid-user", "INGESTQ_EZID_USER", "", "EZID account name")
			s.ezidPassword = r.String("ezid-password", "INGESTQ_EZID_PASSWORD", "",
				"EZID password (a flag shows in ps: prefer the variable or the file)")
			s.ezidPasswordFile = r.String("ezid-password-file", "INGESTQ_EZID_PASSWORD_FILE", "",
				"file holding the EZID password (instead of INGESTQ_EZID_PASSWORD)")
			s.ezidTimeout = r.Duration("ezid-timeout", "INGESTQ_EZID_TIMEOUT", 30*time.Second,
				"how long one EZID call may take")
			s.syncLinger = r.Duration("sync-linger", "INGESTQ_SYNC_LINGER", durable.DefaultLinger,
				"how long a file system sync waits for other jobs' writes to share it (0: none)")
			s.storing = r.Bool("storing", "INGESTQ_STORING", true,
				"store processed jobs' versions (Storing → Recording); false where another consumer (Merritt's storage service) takes jobs in Storing")
			s.merritt = merrittstore.Register(r)
			s.serveListen = r.String("merritt-serve-listen", "INGESTQ_MERRITT_SERVE_LISTEN", "",
				"HTTP address the versions prepared for Merritt's storage service are served on, for it to fetch (needed with INGESTQ_MERRITT_NODE)")
			s.serveURL = r.String("merritt-serve-url", "INGESTQ_MERRITT_SERVE_URL", "",
				"base URL Merritt's storage service reaches INGESTQ_MERRITT_SERVE_LISTEN at (empty: http://<INGESTQ_MERRITT_SERVE_LISTEN>, which needs a host in it)")
			s.retryFor = r.Duration("merritt-retry-for", "INGESTQ_MERRITT_RETRY_FOR", 30*time.Minute,
				"how long the storing step tries again a version whose call to Merritt's storage service failed in a way that may pass (unreachable, 502/503/504, no answer in time, a file it could not fetch), from the first failed attempt; then the job fails (0: at once)")
			s.retryBackoff = r.Duration("merritt-retry-backoff", "INGESTQ_MERRITT_RETRY_BACKOFF", 10*time.Second,
				"wait after the first failed attempt to store a version in Merritt's storage service, doubled after each further one up to 5m")
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			p, err := s.processor(ctx, env.Jobs)
			if err != nil {
				return err
			}
			p.Logger = env.Logger
			srv, err := s.serve(env, p)
			if err != nil {
				return err
			}
			if !*s.storing {
				env.Logger.Info("storing step off: processed jobs wait in Storing for another consumer")
			}
			runners, err := stage.Start(ctx, env, p.StageConfigs(*s.storing)...)
			if err != nil {
				return err
			}
			if srv != nil {
				// The storing calls in flight when the service stops fetch
				// until they end: the versions are served until the stages
				// have drained.
				env.Server.OnShutdown(func(ctx context.Context) error {
					for _, r := range runners {
						select {
						case <-r.Done():
						case <-ctx.Done():
						}
					}
					return srv.Shutdown(ctx)
				})
			}
			return nil
		},
	})
}

// processor builds the stage handler from the settings.
func (s settings) processor(ctx context.Context, q *jobs.Client) (*process.Processor, error) {
	if err := mint.ValidShoulder(*s.shoulder); err != nil {
		return nil, fmt.Errorf("INGESTQ_MINT_SHOULDER: %w", err)
	}
	profiles, err := profile.Load(*s.profilesDir)
	if err != nil {
		return nil, fmt.Errorf("INGESTQ_PROFILES_DIR: %w", err)
	}
	if *s.syncLinger < 0 {
		return nil, fmt.Errorf("INGESTQ_SYNC_LINGER: %v must not be negative", *s.syncLinger)
	}
	if *s.retryFor < 0 || *s.retryBackoff <= 0 {
		return nil, fmt.Errorf("INGESTQ_MERRITT_RETRY_FOR (%v) must not be negative, INGESTQ_MERRITT_RETRY_BACKOFF (%v) must be positive", *s.retryFor, *s.retryBackoff)
	}
	merritt, err := s.merrittTarget()
	if err != nil {
		return nil, err
	}
	storage, err := s.storage(ctx, merritt)
	if err != nil {
		return nil, err
	}
	var minter mint.Minter
	switch *s.minter {
	case "local":
		minter = mint.Local{Shoulder: *s.shoulder}
	case "ezid":
		password := *s.ezidPassword
		if password != "" && *s.ezidPasswordFile != "" {
			return nil, fmt.Errorf("set INGESTQ_EZID_PASSWORD or INGESTQ_EZID_PASSWORD_FILE, not both")
		}
		if *s.ezidPasswordFile != "" {
			var err error
			if password, err = config.ReadSecretFile(*s.ezidPasswordFile); err != nil {
				return nil, fmt.Errorf("INGESTQ_EZID_PASSWORD_FILE: %w", err)
			}
		}
		if *s.ezidURL == "" || *s.ezidUser == "" || password == "" {
			return nil, fmt.Errorf("INGESTQ_MINTER=ezid needs INGESTQ_EZID_URL, INGESTQ_EZID_USER and a password")
		}
		// The operator names EZID, which may well be on the internal
		// network: the built-in deny list (cloud metadata and the like) is
		// all the policy needs.
		minter = mint.EZID{BaseURL: *s.ezidURL, User: *s.ezidUser, Password: password, Shoulder: *s.shoulder,
			Client: fetch.New(fetch.Policy{Allow: fetch.InternalRanges()}), Timeout: *s.ezidTimeout}
	default:
		return nil, fmt.Errorf("INGESTQ_MINTER: %q is neither local nor ezid", *s.minter)
	}
	return &process.Processor{Queue: q, Minter: minter, Storage: storage, Merritt: merritt, Profiles: profiles, WorkRoot: *s.workRoot,
		StoreRetry: process.StoreRetry{For: *s.retryFor, Backoff: *s.retryBackoff}}, nil
}

// merrittTarget is the node of Merritt's storage service versions go to,
// nil for none. With one, either the storing step stores to it
// (INGESTQ_STORE=merritt) or storing is handed over to Merritt's storage
// consumer (INGESTQ_STORING=false); a version stored elsewhere would be
// made for a store that never gets it.
func (s settings) merrittTarget() (*process.Merritt, error) {
	client, err := s.merritt.Client()
	if err != nil {
		return nil, err
	}
	merrittStore := s.store.Kind == "merritt"
	switch {
	case client == nil && merrittStore:
		return nil, fmt.Errorf("INGESTQ_STORE=merritt needs INGESTQ_MERRITT_STORAGE_URL and INGESTQ_MERRITT_NODE")
	case client == nil:
		return nil, nil
	case *s.storing && !merrittStore:
		return nil, fmt.Errorf("INGESTQ_MERRITT_NODE is set, so versions go to Merritt's storage service: store them there (INGESTQ_STORE=merritt) or hand storing over to its storage consumer (INGESTQ_STORING=false)")
	case *s.serveListen == "":
		return nil, fmt.Errorf("INGESTQ_MERRITT_SERVE_LISTEN is needed with INGESTQ_MERRITT_NODE: Merritt's storage service fetches each version's files from it")
	}
	base := *s.serveURL
	if base == "" {
		host, _, err := net.SplitHostPort(*s.serveListen)
		if err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
			return nil, fmt.Errorf("INGESTQ_MERRITT_SERVE_URL is needed: INGESTQ_MERRITT_SERVE_LISTEN %q names no host the storage service can reach", *s.serveListen)
		}
		base = "http://" + *s.serveListen
	}
	if !filepath.IsAbs(*s.workRoot) {
		return nil, fmt.Errorf("INGESTQ_WORK_ROOT: %q is not an absolute path", *s.workRoot)
	}
	// Storing handed over, Merritt's storage consumer calls when it takes
	// a job: every prepared version is served. Storing here, a version is
	// served while its call is in flight.
	srv, err := serving.New(*s.workRoot, base, !*s.storing)
	if err != nil {
		return nil, fmt.Errorf("INGESTQ_MERRITT_SERVE_URL: %w", err)
	}
	return &process.Merritt{Storage: client, Serving: srv}, nil
}

// serve starts serving the versions prepared for Merritt's storage
// service (nil: none are prepared); the caller shuts it down.
func (s settings) serve(env *service.Env, p *process.Processor) (*http.Server, error) {
	if p.Merritt == nil {
		return nil, nil
	}
	ln, err := net.Listen("tcp", *s.serveListen)
	if err != nil {
		return nil, fmt.Errorf("INGESTQ_MERRITT_SERVE_LISTEN: %w", err)
	}
	srv := &http.Server{Handler: p.Merritt.Serving, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			env.Logger.Error("serving versions to Merritt's storage service", "error", err)
		}
	}()
	env.Logger.Info("serving prepared versions to Merritt's storage service", "listen", ln.Addr().String(),
		"url", p.Merritt.Serving.BaseURL(), "storage", p.Merritt.Storage.BaseURL, "node", p.Merritt.Storage.Node)
	if u, err := url.Parse(p.Merritt.Serving.BaseURL()); err == nil {
		if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || (ip != nil && ip.IsLoopback()) {
			env.Logger.Warn("the versions are served at a loopback address: a storage service on another host cannot fetch them (INGESTQ_MERRITT_SERVE_URL)",
				"url", p.Merritt.Serving.BaseURL())
		}
	}
	return srv, nil
}

// storage is the object store the settings choose.
func (s settings) storage(ctx context.Context, merritt *process.Merritt) (store.Storage, error) {
	if s.store.Kind == "merritt" {
		return store.Merritt{Client: merritt.Storage, Serving: merritt.Serving}, nil
	}
	if s.store.Kind == "s3" {
		c, err := s3store.Client(ctx, *s.store.S3)
		if err != nil {
			return nil, err
		}
		return store.S3{Client: c, Bucket: s.store.S3.Bucket}, nil
	}
	root := s.store.Root
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("INGESTQ_STORE_ROOT: %q is not an absolute path", root)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("INGESTQ_STORE_ROOT: %w", err)
	}
	return store.Local{Root: root, Durable: &durable.Syncer{Linger: *s.syncLinger}}, nil
}
