package stage

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/service"
)

// stageService serves StageService for one runner.
type stageService struct {
	v1.UnimplementedStageServiceServer
	r *Runner
}

func (s stageService) GetStatus(context.Context, *v1.GetStatusRequest) (*v1.GetStatusResponse, error) {
	return &v1.GetStatusResponse{Worker: s.r.Status()}, nil
}

func (s stageService) Pause(context.Context, *v1.PauseRequest) (*v1.PauseResponse, error) {
	s.r.Pause()
	return &v1.PauseResponse{Worker: s.r.Status()}, nil
}

func (s stageService) Resume(context.Context, *v1.ResumeRequest) (*v1.ResumeResponse, error) {
	s.r.Resume()
	return &v1.ResumeResponse{Worker: s.r.Status()}, nil
}

// Drain waits up to the call's deadline (default 30 s) for jobs in flight.
func (s stageService) Drain(ctx context.Context, _ *v1.DrainRequest) (*v1.DrainResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	left := s.r.Drain(ctx)
	return &v1.DrainResponse{Worker: s.r.Status(), InFlightLeft: int32(left)}, nil
}

// Start runs a stage inside a service: it registers StageService, a drain
// hook (SIGTERM drains the runner before the server stops), the queue-depth
// gauge, and starts the runner. Logger, Tracer, Metrics, Service, Version and
// Concurrency default to the service's own.
func Start(ctx context.Context, env *service.Env, cfg Config) (*Runner, error) {
	if cfg.Service == "" {
		cfg.Service = env.Name
	}
	if cfg.Logger == nil {
		cfg.Logger = env.Logger
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = env.Config.Concurrency
	}
	if env.Telemetry != nil {
		if cfg.Tracer == nil {
			cfg.Tracer = env.Telemetry.TracerProvider.Tracer("github.com/ingestq/ingestq/shared/stage")
		}
		if cfg.Metrics == nil {
			cfg.Metrics = env.Telemetry.Metrics
		}
	}
	r, err := New(env.Queue, cfg)
	if err != nil {
		return nil, err
	}
	v1.RegisterStageServiceServer(env.Server, stageService{r: r})
	if cfg.Metrics != nil {
		if _, err := cfg.Metrics.ObserveJobsByState(func(ctx context.Context) (map[string]int64, error) {
			counts, err := env.Queue.JobCounts(ctx)
			out := make(map[string]int64, len(counts))
			for s, n := range counts {
				out[queue.JobStateName(s)] = int64(n)
			}
			return out, err
		}); err != nil {
			return nil, fmt.Errorf("stage %s: queue depth gauge: %w", cfg.Name, err)
		}
	}
	env.Server.OnShutdown(func(ctx context.Context) error {
		if left := r.Drain(ctx); left > 0 {
			return fmt.Errorf("stage %s: %d job(s) given back untouched at the drain deadline", cfg.Name, left)
		}
		return nil
	})
	go func() {
		if err := r.Run(ctx); err != nil {
			env.Logger.Error("stage runner stopped", "error", err)
		}
	}()
	return r, nil
}
