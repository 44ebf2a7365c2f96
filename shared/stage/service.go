package stage

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/service"
)

// stageService serves StageService for the runners of one replica.
type stageService struct {
	v1.UnimplementedStageServiceServer
	runners []*Runner
}

func (s stageService) statuses() []*v1.WorkerInfo {
	out := make([]*v1.WorkerInfo, len(s.runners))
	for i, r := range s.runners {
		out[i] = r.Status()
	}
	return out
}

func (s stageService) GetStatus(context.Context, *v1.GetStatusRequest) (*v1.GetStatusResponse, error) {
	return &v1.GetStatusResponse{Workers: s.statuses()}, nil
}

func (s stageService) Pause(context.Context, *v1.PauseRequest) (*v1.PauseResponse, error) {
	for _, r := range s.runners {
		r.Pause()
	}
	return &v1.PauseResponse{Workers: s.statuses()}, nil
}

func (s stageService) Resume(context.Context, *v1.ResumeRequest) (*v1.ResumeResponse, error) {
	for _, r := range s.runners {
		r.Resume()
	}
	return &v1.ResumeResponse{Workers: s.statuses()}, nil
}

// Drain waits up to the call's deadline (default 30 s) for jobs in flight.
func (s stageService) Drain(ctx context.Context, _ *v1.DrainRequest) (*v1.DrainResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	left := drainAll(ctx, s.runners)
	return &v1.DrainResponse{Workers: s.statuses(), InFlightLeft: int32(left)}, nil
}

// drainAll drains runners in parallel and sums the jobs left running.
func drainAll(ctx context.Context, runners []*Runner) int {
	lefts := make(chan int, len(runners))
	for _, r := range runners {
		go func() { lefts <- r.Drain(ctx) }()
	}
	total := 0
	for range runners {
		total += <-lefts
	}
	return total
}

// Start runs a replica's stage runners inside a service: it chains runners
// of consecutive states (Runner.Chain), registers one StageService for all
// of them, a drain hook (SIGTERM drains the runners before the server
// stops), and starts the runners. The queue's figures (depth per state)
// are the batcher's to export, once for the whole queue.
// Logger, Tracer, Metrics, Service, Version and Concurrency default to the
// service's own.
func Start(ctx context.Context, env *service.Env, cfgs ...Config) ([]*Runner, error) {
	var runners []*Runner
	for _, cfg := range cfgs {
		if cfg.Service == "" {
			cfg.Service = env.Name
		}
		if cfg.Logger == nil {
			cfg.Logger = env.Logger
		}
		if cfg.Concurrency == 0 {
			cfg.Concurrency = env.Config.Concurrency
		}
		if cfg.Address == "" {
			cfg.Address = env.Config.AdvertiseAddr()
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
		runners = append(runners, r)
	}
	// A job one runner moves on goes straight to the runner of the next
	// state, when this replica runs both (the estimator's two stages).
	for _, r := range runners {
		for _, next := range runners {
			if next != r && next.cfg.From == r.cfg.To {
				if err := r.Chain(next); err != nil {
					return nil, err
				}
			}
		}
	}
	v1.RegisterStageServiceServer(env.Server, stageService{runners: runners})
	env.Server.OnShutdown(func(ctx context.Context) error {
		if left := drainAll(ctx, runners); left > 0 {
			return fmt.Errorf("stage: %d job(s) given back untouched at the drain deadline", left)
		}
		return nil
	})
	for _, r := range runners {
		go func() {
			if err := r.Run(ctx); err != nil {
				env.Logger.Error("stage runner stopped", "error", err)
			}
		}()
	}
	return runners, nil
}
