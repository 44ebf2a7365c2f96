// Command notifier works on jobs in Notify: it calls the collection's
// callback with the job's result (retried with backoff, and for hours when
// the receiver is down, the job waiting in Notify), removes the job's
// working folder and completes the job; the batch learns of it through the
// job's reference, which the batcher watches.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ingestq/ingestq/services/notifier/internal/callback"
	"github.com/ingestq/ingestq/services/notifier/internal/notify"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
)

func main() {
	var (
		workRoot, profilesDir *string
		policy                *retry.Policy
		timeout               *time.Duration
		redelivery            notify.Redelivery
		addresses             *fetch.AddressSettings
	)
	service.Main(service.Spec{
		Name:     "notifier",
		Defaults: config.Defaults{Listen: "127.0.0.1:7407", MetricsListen: "127.0.0.1:9407"},
		Config: func(r *config.Registry) {
			workRoot = config.RegisterWorkRoot(r)
			profilesDir = r.String("profiles-dir", "INGESTQ_PROFILES_DIR", "examples/profiles",
				"directory of collection profiles (*.yaml)")
			policy = retry.Register(r, "callback", "a callback is posted, each time its job is taken,",
				retry.Policy{Attempts: 3, Backoff: 2 * time.Second, Max: time.Minute})
			r.Renamed("callback-retries", "INGESTQ_CALLBACK_RETRIES", "callback-attempts", retry.RetriesToAttempts)
			timeout = r.Duration("callback-timeout", "INGESTQ_CALLBACK_TIMEOUT", 30*time.Second,
				"how long one callback attempt may take")
			r.Func("callback-retry-for", "INGESTQ_CALLBACK_RETRY_FOR", "24h0m0s",
				"how long a callback not delivered is tried again, from its first failure; then its job completes without it (the object is stored)",
				config.SetPositiveDuration(&redelivery.For))
			r.Func("callback-retry-backoff", "INGESTQ_CALLBACK_RETRY_BACKOFF", "30s",
				"wait before a callback not delivered is tried again, doubled after each retry (the job waits in Notify meanwhile)",
				config.SetPositiveDuration(&redelivery.Backoff))
			r.Func("callback-retry-backoff-max", "INGESTQ_CALLBACK_RETRY_BACKOFF_MAX", "10m0s",
				"longest wait between two retries of a callback not delivered",
				config.SetPositiveDuration(&redelivery.Max))
			r.Check(func() error {
				if redelivery.Max < redelivery.Backoff {
					return fmt.Errorf("INGESTQ_CALLBACK_RETRY_BACKOFF_MAX (%s) is below INGESTQ_CALLBACK_RETRY_BACKOFF (%s)", redelivery.Max, redelivery.Backoff)
				}
				return nil
			})
			addresses = fetch.RegisterAddressSettings(r, "callback", "callbacks")
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			if *timeout <= 0 {
				return fmt.Errorf("INGESTQ_CALLBACK_TIMEOUT: %v must be positive", *timeout)
			}
			root, err := workdir.At(*workRoot)
			if err != nil {
				return fmt.Errorf("INGESTQ_WORK_ROOT: %w", err)
			}
			profiles, err := profile.Load(*profilesDir)
			if err != nil {
				return fmt.Errorf("INGESTQ_PROFILES_DIR: %w", err)
			}
			n := &notify.Notifier{
				Profiles:   profiles,
				WorkRoot:   root,
				Logger:     env.Logger,
				Callback:   callback.Poster{Client: fetch.New(addresses.Apply(fetch.Policy{})), Retry: *policy, Timeout: *timeout},
				Redelivery: redelivery,
				Metrics:    env.Telemetry.Metrics,
			}
			_, err = stage.Start(ctx, env, stage.Config{
				Name:    "notifying",
				From:    queue.Notify,
				To:      queue.Completed,
				Parts:   notify.Parts,
				Handler: n.Handle,
			})
			return err
		},
	})
}
