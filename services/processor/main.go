// Command processor works on jobs in Processing: it gives each object its
// ARK (a local id's, or a minted one), writes its system files and checks
// every file's digest again, then moves the job to Storing. Its storing
// step stores the version and hands the job to Recording with the version
// manifest's URL; it is switched off where another consumer (Merritt's
// storage service) takes jobs in Storing.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/process"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/durable"
	"github.com/ingestq/ingestq/shared/fetch"
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
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			p, err := s.processor(ctx, env.Jobs)
			if err != nil {
				return err
			}
			p.Logger = env.Logger
			if !*s.storing {
				env.Logger.Info("storing step off: processed jobs wait in Storing for another consumer")
			}
			_, err = stage.Start(ctx, env, p.StageConfigs(*s.storing)...)
			return err
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
	storage, err := s.storage(ctx)
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
	return &process.Processor{Queue: q, Minter: minter, Storage: storage, Profiles: profiles, WorkRoot: *s.workRoot}, nil
}

// storage is the object store the settings choose.
func (s settings) storage(ctx context.Context) (store.Storage, error) {
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
