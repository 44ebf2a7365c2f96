// Command estimator works on jobs in Pending and Estimating.
//
// Pending → Estimating: a job of a held collection goes to Held instead; a
// job spawned from a manifest of manifests (or whose object manifest lists
// too many files to keep in its ZooKeeper node) gets its object manifest
// fetched, parsed and kept with it, a list past 8 KiB in the job's working
// folder under INGESTQ_WORK_ROOT (a corrupt one fails the job, naming the
// URL and the line).
//
// Estimating → Provisioning: a HEAD request for every file of the job (a
// bounded number at once) sizes it; the sum becomes space_needed. A job
// with a file of unknown size is lowered by INGESTQ_UNSIZED_PENALTY, one
// above INGESTQ_LARGE_JOB_BYTES by INGESTQ_LARGE_JOB_PENALTY (priorities
// stop at 99). Estimating never fails a job for its files, and is bounded:
// INGESTQ_ESTIMATE_BUDGET for all of a job's HEADs, and a host that failed
// INGESTQ_ESTIMATE_HOST_FAILURES times in a row is not asked again in the
// job (the files left keep their declared size). The host that failed is
// the one that did not answer: a redirect's target, not the host that
// redirected to it.
package main

import (
	"context"
	"time"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
)

// settings are the estimator's own configuration.
type settings struct {
	concurrency      *int
	budget           *time.Duration
	hostFailures     *int
	unsizedPenalty   *int
	largeJobBytes    *int
	largeJobPenalty  *int
	maxManifestBytes *int
	retry            *retry.Policy
	addresses        *fetch.AddressSettings
	headerTimeout    *time.Duration
	workRoot         *string
}

func (s *settings) register(r *config.Registry) {
	s.workRoot = config.RegisterWorkRoot(r)
	s.concurrency = r.Int("estimate-concurrency", "INGESTQ_ESTIMATE_CONCURRENCY", 8,
		"HEAD requests one job sends at once")
	// Room for a healthy 20,000-file job (HEADs of ~100 ms, 8 at once);
	// past that an advisory estimate is worth less than the job's wait.
	s.budget = r.Duration("estimate-budget", "INGESTQ_ESTIMATE_BUDGET", 5*time.Minute,
		"longest time one job's HEAD requests take in all; files not sized by then keep their declared size (or none)")
	// One or two failures may be a blip (a restart, a dropped connection);
	// three in a row is a host down, and costs at most three header timeouts.
	s.hostFailures = r.Int("estimate-host-failures", "INGESTQ_ESTIMATE_HOST_FAILURES", 3,
		"HEAD requests to one host that may fail in a row (no answer, a timeout, a 5xx) before it is not asked again in the job, for its files or through redirects; a failure after a redirect counts against the host redirected to")
	s.unsizedPenalty = r.Int("unsized-penalty", "INGESTQ_UNSIZED_PENALTY", 10,
		"added to the priority of a job with a file whose size is unknown (larger = served later)")
	s.largeJobBytes = r.Int("large-job-bytes", "INGESTQ_LARGE_JOB_BYTES", 10<<30,
		"size in bytes above which a job is large")
	s.largeJobPenalty = r.Int("large-job-penalty", "INGESTQ_LARGE_JOB_PENALTY", 10,
		"added to the priority of a large job")
	s.maxManifestBytes = r.Int("max-manifest-bytes", "INGESTQ_MAX_MANIFEST_BYTES", checkm.DefaultMaxBytes,
		"largest batch or object manifest fetched")
	s.retry = retry.Register(r, "manifest", "an object manifest is fetched",
		retry.Policy{Attempts: 3, Backoff: time.Second})
	s.addresses = fetch.RegisterAddressSettings(r, "fetch", "payload and manifest URLs")
	s.headerTimeout = r.Duration("fetch-header-timeout", "INGESTQ_FETCH_HEADER_TIMEOUT", fetch.DefaultHeaderTimeout,
		"how long a request waits for the response headers")
}

func main() {
	var s settings
	service.Main(service.Spec{
		Name:     "estimator",
		Defaults: config.Defaults{Listen: "127.0.0.1:7402", MetricsListen: "127.0.0.1:9402"},
		Config:   s.register,
		Setup:    s.setup,
	})
}

// estimator builds the estimator the settings describe.
func (s *settings) estimator(env *service.Env) (*Estimator, error) {
	root, err := workdir.At(*s.workRoot)
	if err != nil {
		return nil, err
	}
	policy := s.addresses.Apply(fetch.Policy{HeaderTimeout: *s.headerTimeout})
	e := &Estimator{
		Client:          fetch.New(policy),
		Policy:          policy,
		Limits:          checkm.Limits{MaxBytes: int64(*s.maxManifestBytes)},
		Retry:           *s.retry,
		Concurrency:     *s.concurrency,
		WorkRoot:        root,
		Budget:          *s.budget,
		HostFailures:    *s.hostFailures,
		UnsizedPenalty:  int32(*s.unsizedPenalty),
		LargeJobBytes:   int64(*s.largeJobBytes),
		LargeJobPenalty: int32(*s.largeJobPenalty),
		Logger:          env.Logger,
	}
	return e, e.Validate()
}

func (s *settings) setup(ctx context.Context, env *service.Env) error {
	e, err := s.estimator(env)
	if err != nil {
		return err
	}
	_, err = stage.Start(ctx, env, e.StageConfigs()...)
	return err
}
