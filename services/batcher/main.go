// Command batcher is ingestq's front door: it serves BatchService (a
// depositor's submission becomes a Pending batch) and AdminService (the
// operators' actions, which the operator console calls too), turns pending
// batches into jobs, reports on batches whose jobs have all ended, and
// cleans up completed batches after their retention.
package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/adminservice"
	"github.com/ingestq/ingestq/services/batcher/internal/audit"
	"github.com/ingestq/ingestq/services/batcher/internal/batchrun"
	"github.com/ingestq/ingestq/services/batcher/internal/figures"
	"github.com/ingestq/ingestq/services/batcher/internal/janitor"
	"github.com/ingestq/ingestq/services/batcher/internal/mail"
	"github.com/ingestq/ingestq/services/batcher/internal/spawn"
	"github.com/ingestq/ingestq/services/batcher/internal/submit"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/workdir"
)

// settings are the batcher's own configuration.
type settings struct {
	profilesDir      *string
	workRoot         *string
	outboxDir        *string
	smtpAddr         *string
	mailFrom         *string
	smtpUser         *string
	smtpPasswordFile *string
	retention        *time.Duration
	cleanupInterval  *time.Duration
	staleUploadAge   *time.Duration
	reclaimGrace     *time.Duration
	maxManifestBytes *int
	payloadRetry     *retry.Policy
	maxQueuedJobs    *int
	addresses        *fetch.AddressSettings
	merrittQueueURL  *string
	traceURL         *string
	store            *s3store.StoreSettings
	auditInterval    *time.Duration
	auditSample      *int
}

func (s *settings) register(r *config.Registry) {
	s.profilesDir = r.String("profiles-dir", "INGESTQ_PROFILES_DIR", "examples/profiles",
		"directory of collection profiles (*.yaml)")
	s.store = s3store.RegisterStore(r)
	s.workRoot = config.RegisterWorkRoot(r)
	s.outboxDir = r.String("outbox-dir", "INGESTQ_OUTBOX_DIR", "",
		"where mail goes as .eml files when no SMTP server is set (empty: <work root>/outbox)")
	s.smtpAddr = r.String("smtp-addr", "INGESTQ_SMTP_ADDR", "",
		"SMTP server host:port for depositor mail; empty writes mail to the outbox")
	s.mailFrom = r.String("mail-from", "INGESTQ_MAIL_FROM", "ingestq <ingestq@localhost>",
		"sender of depositor mail")
	s.smtpUser = r.String("smtp-username", "INGESTQ_SMTP_USERNAME", "",
		"SMTP user name (PLAIN authentication, over TLS or to localhost only)")
	s.smtpPasswordFile = r.String("smtp-password-file", "INGESTQ_SMTP_PASSWORD_FILE", "",
		"file holding the SMTP password")
	s.retention = r.Duration("retention", "INGESTQ_RETENTION", 7*24*time.Hour,
		"how long a completed batch is kept before it is cleaned up")
	s.auditInterval = r.Duration("fixity-audit-interval", "INGESTQ_FIXITY_AUDIT_INTERVAL", 0,
		"how often a sample of stored versions is read back and checked against their manifests (0: never); failures count in ingestq_fixity_failures_total")
	s.auditSample = r.Int("fixity-audit-sample", "INGESTQ_FIXITY_AUDIT_SAMPLE", 10, "versions each fixity audit round checks, picked at random")
	s.cleanupInterval = r.Duration("cleanup-interval", "INGESTQ_CLEANUP_INTERVAL", time.Hour,
		"how often completed batches past their retention are looked for")
	s.staleUploadAge = r.Duration("s3-stale-upload-age", "INGESTQ_S3_STALE_UPLOAD_AGE", 24*time.Hour,
		"with an S3 store: age past which the cleanup aborts an unfinished multipart upload of an object not being stored (one a crashed processor left and no job came back for)")
	s.reclaimGrace = r.Duration("reclaim-grace", "INGESTQ_RECLAIM_GRACE", janitor.DefaultReclaimGrace,
		"how long the queue's garbage stands unchanged before the janitor removes it (looking each INGESTQ_CLEANUP_INTERVAL). Garbage: a job or batch node a writer left without status, no live session holding its lock; an entry or reference whose job is gone; a batch uuid pointing nowhere. Long past any creation under way, a Merritt producer's included (at least 1m)")
	s.maxManifestBytes = r.Int("max-manifest-bytes", "INGESTQ_MAX_MANIFEST_BYTES", checkm.DefaultMaxBytes,
		"largest batch or object manifest fetched")
	s.payloadRetry = retry.Register(r, "payload", "a batch's payload is fetched", spawn.DefaultRetry())
	s.maxQueuedJobs = r.Int("max-queued-jobs", "INGESTQ_MAX_QUEUED_JOBS", 100000,
		"most jobs the queue holds, ended ones until their batch is cleaned up (ZooKeeper's heap holds them all: docs/sizing.md); a batch that would pass it waits in Pending, a larger one fails; 0: no bound")
	s.addresses = fetch.RegisterAddressSettings(r, "fetch", "payload and manifest URLs")
	s.merrittQueueURL = r.String("merritt-queue-url", "INGESTQ_MERRITT_QUEUE_URL", "",
		"URL Merritt's ingest queue folder (<ingest home>/queue) is served from: a batch Merritt's ingest service submitted names its payload by batchID and filename only, fetched from <url>/<batchID>/<filename>; empty: such batches fail, saying so")
	s.traceURL = r.String("trace-url", "INGESTQ_TRACE_URL", "",
		"link to a trace in a tracing backend, {trace_id} replaced by the trace id (e.g. https://tracing.example/trace/{trace_id}): GetBatchStatus, GetBatch and GetJob give it, and so the console; empty: trace ids only")
}

func main() {
	var s settings
	service.Main(service.Spec{
		Name:     "batcher",
		Defaults: config.Defaults{Listen: "127.0.0.1:7401", MetricsListen: "127.0.0.1:9401"},
		Config:   s.register,
		Setup:    s.setup,
	})
}

// setup wires the batcher's parts to the service's queue and server.
func (s *settings) setup(ctx context.Context, env *service.Env) error {
	profiles, err := profile.Load(*s.profilesDir)
	if err != nil {
		return fmt.Errorf("loading profiles: %w", err)
	}
	root, err := workdir.Open(*s.workRoot)
	if err != nil {
		return err
	}
	sender, err := s.mailSender(root)
	if err != nil {
		return err
	}
	policy := s.addresses.Apply(fetch.Policy{})
	if *s.retention <= 0 || *s.cleanupInterval <= 0 {
		return fmt.Errorf("INGESTQ_RETENTION and INGESTQ_CLEANUP_INTERVAL must be positive")
	}
	if *s.reclaimGrace < time.Minute {
		return fmt.Errorf("INGESTQ_RECLAIM_GRACE %s: want 1m or more, long past any creation under way (a node younger than that may be one)", *s.reclaimGrace)
	}
	if u := *s.merrittQueueURL; u != "" {
		// Its files are payloads: the payload policy holds for them too.
		if _, err := fetch.CheckURL(u, policy); err != nil {
			return fmt.Errorf("INGESTQ_MERRITT_QUEUE_URL: %w", err)
		}
	}
	if *s.maxQueuedJobs < 0 {
		return fmt.Errorf("INGESTQ_MAX_QUEUED_JOBS %d: want 0 (no bound) or more", *s.maxQueuedJobs)
	}
	log := env.Logger
	if u := *s.traceURL; u != "" && !strings.Contains(u, "{trace_id}") {
		return fmt.Errorf("INGESTQ_TRACE_URL %q: it must contain {trace_id}", u)
	}
	tools := admin.New(env.Session)
	adminServer := &adminservice.Server{Session: env.Session, Profiles: profiles, Root: root, Logger: log, TraceURL: *s.traceURL,
		Store: fixity.Location{Root: absolute(s.store.Root)}, Retention: *s.retention}
	jan := &janitor.Janitor{Tools: tools, Root: root, Retention: *s.retention, Interval: *s.cleanupInterval, Logger: log}
	if s.store.Kind == "s3" {
		c, err := s3store.Client(ctx, *s.store.S3)
		if err != nil {
			return err
		}
		adminServer.Store, adminServer.Versions = fixity.Location{Bucket: s.store.S3.Bucket}, fixity.Reader{S3: c}
		if *s.staleUploadAge <= 0 {
			return fmt.Errorf("INGESTQ_S3_STALE_UPLOAD_AGE %s: want a positive duration", *s.staleUploadAge)
		}
		jan.Uploads, jan.Bucket, jan.UploadAge = c, s.store.S3.Bucket, *s.staleUploadAge
	}
	if s.store.Kind == "merritt" {
		// Merritt's storage service keeps, replicates and audits its
		// objects: nothing of them is read back here.
		adminServer.Store = fixity.Location{}
		if *s.auditInterval > 0 {
			return fmt.Errorf("INGESTQ_FIXITY_AUDIT_INTERVAL must be 0 with INGESTQ_STORE=merritt: Merritt's storage service audits the objects it keeps")
		}
	}
	v1.RegisterBatchServiceServer(env.Server, &submit.Server{Batches: batches.New(env.Session), Jobs: jobs.NewReader(env.Session), Profiles: profiles, Policy: policy, Logger: log, TraceURL: *s.traceURL})
	v1.RegisterAdminServiceServer(env.Server, adminServer)

	batcher := batchrun.New(batchrun.Config{
		Session:  env.Session,
		Profiles: profiles,
		Planner: &spawn.Planner{
			Fetcher:         fetch.New(policy),
			Policy:          policy,
			Limits:          checkm.Limits{MaxBytes: int64(*s.maxManifestBytes)},
			Root:            root,
			Retry:           *s.payloadRetry,
			MerrittQueueURL: *s.merrittQueueURL,
		},
		Mail:          sender,
		Logger:        log,
		Tracer:        env.Telemetry.TracerProvider.Tracer("github.com/ingestq/ingestq/services/batcher"),
		Metrics:       env.Telemetry.Metrics,
		Concurrency:   env.Config.Concurrency,
		MaxQueuedJobs: *s.maxQueuedJobs,
	})
	// The queue's figures are exported here, by the batcher alone.
	fig := figures.New(tools.Queue, log)
	if err := fig.Register(env.Telemetry.Metrics); err != nil {
		return err
	}
	go fig.Run(ctx, figures.Every)
	reclaims, err := janitor.NewReclaimsCounter(env.Telemetry.MeterProvider.Meter("github.com/ingestq/ingestq/services/batcher"))
	if err != nil {
		return err
	}
	var aud *audit.Auditor
	if *s.auditInterval > 0 {
		if *s.auditSample < 1 {
			return fmt.Errorf("INGESTQ_FIXITY_AUDIT_SAMPLE: %d is not a positive number", *s.auditSample)
		}
		if aud, err = audit.New(env.Telemetry.MeterProvider.Meter("github.com/ingestq/ingestq/services/batcher"),
			adminServer.Store, adminServer.Versions, *s.auditSample, log); err != nil {
			return err
		}
	}
	taking, stopTaking := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		batcher.Run(taking)
	}()
	jan.ReclaimGrace, jan.Reclaims = *s.reclaimGrace, reclaims
	janCtx, stopJanitor := context.WithCancel(ctx)
	go jan.Run(janCtx)
	if aud != nil {
		go aud.Run(janCtx, *s.auditInterval)
	}

	// On SIGTERM: take no new batch, let those in flight finish until the
	// drain deadline, then cut them short (their claims go back and the
	// next batcher finishes them).
	env.Server.OnShutdown(func(drain context.Context) error {
		stopJanitor()
		stopTaking()
		select {
		case <-ran:
			return nil
		case <-drain.Done():
			batcher.Abort()
			<-ran
			return fmt.Errorf("batches in flight cut short: %w", drain.Err())
		}
	})
	log.Info("batcher ready", "profiles", strings.Join(profiles.Names(), ","), "work_root", root.Dir(),
		"mail", mailTarget(*s.smtpAddr, sender))
	return nil
}

// mailSender is SMTP when a server is configured, otherwise the outbox.
func (s *settings) mailSender(root workdir.Root) (mail.Sender, error) {
	if *s.smtpAddr == "" {
		dir := *s.outboxDir
		if dir == "" {
			dir = filepath.Join(root.Dir(), "outbox")
		}
		return &mail.Outbox{Dir: absolute(dir), From: *s.mailFrom}, nil
	}
	password := ""
	if *s.smtpPasswordFile != "" {
		var err error
		if password, err = config.ReadSecretFile(*s.smtpPasswordFile); err != nil {
			return nil, fmt.Errorf("INGESTQ_SMTP_PASSWORD_FILE: %w", err)
		}
	}
	return &mail.SMTP{Addr: *s.smtpAddr, From: *s.mailFrom, Username: *s.smtpUser, Password: password}, nil
}

func mailTarget(addr string, sender mail.Sender) string {
	if o, ok := sender.(*mail.Outbox); ok {
		return "outbox " + o.Dir
	}
	return "smtp " + addr
}

// absolute resolves a configured path against the working directory.
func absolute(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
