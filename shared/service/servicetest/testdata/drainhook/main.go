// Command drainhook is the service servicetest's own tests start: a
// service with no work whose drain hook fails with INGESTQ_TEST_DRAIN_ERROR
// when that is set, so that it exits 1 after SIGTERM.
package main

import (
	"context"
	"errors"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/service"
)

func main() {
	var drainError *string
	service.Main(service.Spec{
		Name:     "drainhook",
		Defaults: config.Defaults{Listen: "127.0.0.1:7498"},
		Config: func(r *config.Registry) {
			drainError = r.String("drain-error", "INGESTQ_TEST_DRAIN_ERROR", "", "the error the drain hook returns (none if empty)")
		},
		Setup: func(ctx context.Context, env *service.Env) error {
			env.Server.OnShutdown(func(context.Context) error {
				if *drainError != "" {
					return errors.New(*drainError)
				}
				return nil
			})
			return nil
		},
	})
}
