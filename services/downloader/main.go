// Command downloader works on jobs in Downloading: it fetches every file of
// a job into <working_dir>/producer/ and checks it before the job goes on
// to Processing.
//
// Files are fetched INGESTQ_DOWNLOAD_CONCURRENCY at once, streamed to disk
// and hashed on the way; a declared size or digest (md5, sha1, sha256,
// sha512) that does not match fails the job, naming the file, its URL and
// both values. A transfer cut short resumes where it stopped (Range,
// If-Range), and a file's partial file and digest state are synced every
// INGESTQ_DOWNLOAD_SYNC_BYTES, so the next replica resumes the file of one
// that died; failures that may pass are tried again with a jittered
// exponential backoff, up to INGESTQ_DOWNLOAD_ATTEMPTS attempts in a row
// that take the file no further. A file already complete from an earlier
// attempt (right size and digest) is not fetched again.
//
// A container (zip, tar, tar.gz, recognised by its bytes) is downloaded,
// unpacked into producer/ within INGESTQ_UNPACK_MAX_ENTRIES entries and
// INGESTQ_UNPACK_MAX_BYTES bytes, refusing unsafe paths and every link, and
// removed. The job's space_needed is then the real size of producer/.
//
// Only http and https are fetched; addresses in the built-in deny list
// (link-local, cloud metadata), in INGESTQ_FETCH_DENY, and internal ones
// (loopback, private) that INGESTQ_FETCH_ALLOW does not allow are refused,
// after DNS and on every redirect.
//
// A file that arrives slower than INGESTQ_FETCH_MIN_RATE, measured over each
// INGESTQ_FETCH_RATE_WINDOW, fails its job; and at most
// INGESTQ_DOWNLOAD_PER_HOST jobs download from one host at once, so a slow
// depositor cannot hold every worker: the others' jobs go on meanwhile.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ingestq/ingestq/services/downloader/internal/download"
	"github.com/ingestq/ingestq/services/downloader/internal/unpack"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/durable"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
)

// settings are the downloader's own configuration.
type settings struct {
	workRoot         *string
	concurrency      *int
	retry            *retry.Policy
	maxFileBytes     *int
	unpackMaxEntries *int
	unpackMaxBytes   *int
	addresses        *fetch.AddressSettings
	headerTimeout    *time.Duration
	idleTimeout      *time.Duration
	minRate          *int
	rateWindow       *time.Duration
	perHost          *int
	syncLinger       *time.Duration
	syncEvery        *int
}

func (s *settings) register(r *config.Registry) {
	s.workRoot = config.RegisterWorkRoot(r)
	s.concurrency = r.Int("download-concurrency", "INGESTQ_DOWNLOAD_CONCURRENCY", 4,
		"files of one job fetched at once")
	s.retry = retry.Register(r, "download", "a file is fetched without the file moving a MiB further (network, HTTP 5xx, 408 and 429 failures, timeouts; counted in a row: an attempt that moves it further starts the count again)",
		retry.Policy{Attempts: 4, Backoff: time.Second, Max: 30 * time.Second, Jitter: 0.5})
	r.Renamed("download-retries", "INGESTQ_DOWNLOAD_RETRIES", "download-attempts", retry.RetriesToAttempts)
	r.Renamed("download-max-backoff", "INGESTQ_DOWNLOAD_MAX_BACKOFF", "download-backoff-max", nil)
	s.maxFileBytes = r.Int("download-max-file-bytes", "INGESTQ_DOWNLOAD_MAX_FILE_BYTES", 1<<40,
		"largest file fetched when the file list declares no size (a declared size bounds the others)")
	s.unpackMaxEntries = r.Int("unpack-max-entries", "INGESTQ_UNPACK_MAX_ENTRIES", 100_000,
		"most files and folders a container may hold")
	s.unpackMaxBytes = r.Int("unpack-max-bytes", "INGESTQ_UNPACK_MAX_BYTES", 100<<30,
		"most bytes a container may expand to (counted while writing: headers are not trusted)")
	s.addresses = fetch.RegisterAddressSettings(r, "fetch", "payload and manifest URLs")
	s.headerTimeout = r.Duration("fetch-header-timeout", "INGESTQ_FETCH_HEADER_TIMEOUT", fetch.DefaultHeaderTimeout,
		"how long a request waits for the response headers")
	s.idleTimeout = r.Duration("fetch-idle-timeout", "INGESTQ_FETCH_IDLE_TIMEOUT", fetch.DefaultIdleTimeout,
		"how long a download may receive no data before the attempt fails")
	s.minRate = r.Int("fetch-min-rate", "INGESTQ_FETCH_MIN_RATE", fetch.DefaultMinRate,
		"least rate in bytes/s a download must keep over each INGESTQ_FETCH_RATE_WINDOW, or its job fails (not retried); 0: none")
	s.rateWindow = r.Duration("fetch-rate-window", "INGESTQ_FETCH_RATE_WINDOW", fetch.DefaultRateWindow,
		"time over which INGESTQ_FETCH_MIN_RATE is measured; the first window is a download's grace to get going")
	s.perHost = r.Int("download-per-host", "INGESTQ_DOWNLOAD_PER_HOST", 0,
		"most jobs a replica downloads from one host at once, so one slow host cannot hold every worker (0: half of INGESTQ_CONCURRENCY, at least 1)")
	s.syncEvery = r.Int("download-sync-bytes", "INGESTQ_DOWNLOAD_SYNC_BYTES", 64<<20,
		"bytes of a file written between two syncs of its partial file and digest state: a downloader that dies resumes the file from the last (0: never, a file is fetched again whole; a smaller file is never synced before it is complete)")
	s.syncLinger = r.Duration("sync-linger", "INGESTQ_SYNC_LINGER", durable.DefaultLinger,
		"how long a file system sync waits for other jobs' writes to share it (0: none)")
}

func main() {
	var s settings
	service.Main(service.Spec{
		Name:     "downloader",
		Defaults: config.Defaults{Listen: "127.0.0.1:7404", MetricsListen: "127.0.0.1:9404"},
		Config:   s.register,
		Setup:    s.setup,
	})
}

// downloader builds the downloader the settings describe.
func (s *settings) downloader(env *service.Env) (*Downloader, error) {
	if *s.minRate < 0 || *s.rateWindow <= 0 {
		return nil, fmt.Errorf("INGESTQ_FETCH_MIN_RATE %d must not be negative, INGESTQ_FETCH_RATE_WINDOW %v must be positive", *s.minRate, *s.rateWindow)
	}
	policy := s.addresses.Apply(fetch.Policy{HeaderTimeout: *s.headerTimeout, IdleTimeout: *s.idleTimeout,
		MinRate: int64(*s.minRate), RateWindow: *s.rateWindow})
	if policy.MinRate == 0 {
		policy.MinRate = -1 // the setting's 0 is none; the policy's, its default
	}
	// The stages share the root; whichever starts first creates it.
	root, err := workdir.Open(*s.workRoot)
	if err != nil {
		return nil, fmt.Errorf("INGESTQ_WORK_ROOT: %w", err)
	}
	perHost := *s.perHost
	if perHost == 0 {
		perHost = max(1, (env.Config.Concurrency+1)/2)
	}
	d := &Downloader{
		Files: &download.Fetcher{
			Client:    fetch.New(policy),
			Retry:     *s.retry,
			MaxBytes:  int64(*s.maxFileBytes),
			TempDir:   stagingDir,
			SyncEvery: int64(*s.syncEvery),
			Logger:    env.Logger,
		},
		WorkRoot:    root,
		Concurrency: *s.concurrency,
		PerHost:     perHost,
		Unpack:      unpack.Limits{MaxEntries: *s.unpackMaxEntries, MaxBytes: int64(*s.unpackMaxBytes)},
		Logger:      env.Logger,
		Durable:     durable.Syncer{Linger: *s.syncLinger},
	}
	return d, d.Validate()
}

func (s *settings) setup(ctx context.Context, env *service.Env) error {
	d, err := s.downloader(env)
	if err != nil {
		return err
	}
	_, err = stage.Start(ctx, env, d.StageConfig())
	return err
}
