// Command provisioner works on jobs in Provisioning: it lets a job go on to
// Downloading once the working storage has room for its content, and books
// that room until the job's download has ended.
//
// A job proceeds while the storage's usage after it (bytes used on disk plus
// bytes booked for jobs still downloading plus the job's space_needed) stays
// under INGESTQ_PROVISION_MAX_USAGE; a job of unknown size (space_needed 0)
// proceeds only while usage is under INGESTQ_PROVISION_UNESTIMATED_MAX_USAGE.
// Other jobs stay in Provisioning with a message saying what they wait for
// and are evaluated again after INGESTQ_PROVISION_RETRY, while jobs behind
// them go on (a small job may pass a big one). A job larger than the storage
// may ever hold fails.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
)

func main() {
	var (
		workRoot *string
		retry    *time.Duration
		limits   Limits
	)
	service.Main(service.Spec{
		Name:     "provisioner",
		Defaults: config.Defaults{Listen: "127.0.0.1:7403", MetricsListen: "127.0.0.1:9403"},
		Config: func(r *config.Registry) {
			workRoot = config.RegisterWorkRoot(r)
			r.Func("provision-max-usage", "INGESTQ_PROVISION_MAX_USAGE", "0.80",
				"fraction of the working storage that may be in use (on disk or booked) once a job is let through",
				setFraction(&limits.MaxUsage))
			r.Func("provision-unestimated-max-usage", "INGESTQ_PROVISION_UNESTIMATED_MAX_USAGE", "0.60",
				"usage above which jobs of unknown size (space_needed 0) wait in Provisioning",
				setFraction(&limits.UnestimatedMaxUsage))
			retry = r.Duration("provision-retry", "INGESTQ_PROVISION_RETRY", 15*time.Second,
				"how long a job that cannot proceed waits before it is evaluated again")
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			limits.Retry = *retry
			p, err := NewProvisioner(jobs.NewReader(env.Session), statfsDisk{}, *workRoot, limits, env.Logger)
			if err != nil {
				return err
			}
			// The stages share the root; whichever starts first creates it.
			if err := os.MkdirAll(*workRoot, 0o750); err != nil {
				return fmt.Errorf("working storage (INGESTQ_WORK_ROOT): %w", err)
			}
			if _, err := (statfsDisk{}).Usage(ctx, *workRoot); err != nil {
				return fmt.Errorf("working storage (INGESTQ_WORK_ROOT): %w", err)
			}
			if err := p.Seed(ctx); err != nil {
				return err
			}
			_, err = stage.Start(ctx, env, p.StageConfig())
			return err
		},
	})
}

// setFraction parses a number between 0 and 1 ("0.8").
func setFraction(p *float64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 || v > 1 {
			return fmt.Errorf("not a fraction in (0, 1]: %q", s)
		}
		*p = v
		return nil
	}
}
