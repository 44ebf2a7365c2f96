package stage

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/service"
)

// Worker is what StageService controls in a replica: a Runner, or what
// wraps one (the recorder's lease manager).
type Worker interface {
	// Status reports the worker: its state, jobs in flight, outcomes.
	Status() *v1.WorkerInfo
	// Pause stops taking jobs until Resume; jobs in flight go on.
	Pause()
	Resume()
	// Drain stops taking jobs for good and waits, until ctx ends, for the
	// jobs in flight; it returns how many were left and given back.
	Drain(ctx context.Context) int
}

var _ Worker = (*Runner)(nil)

// DefaultDrain is how long Drain waits for the jobs in flight when the
// call has no deadline; AnswerMargin is the most of a call's time Drain
// keeps for its answer.
const (
	DefaultDrain = 30 * time.Second
	AnswerMargin = time.Second
)

// NewService returns the StageService of a replica's workers, the one
// implementation every stage serves.
func NewService(workers ...Worker) v1.StageServiceServer {
	return stageService{workers: workers}
}

// stageService serves StageService for the workers of one replica.
type stageService struct {
	v1.UnimplementedStageServiceServer
	workers []Worker
}

func (s stageService) statuses() []*v1.WorkerInfo {
	out := make([]*v1.WorkerInfo, len(s.workers))
	for i, w := range s.workers {
		out[i] = w.Status()
	}
	return out
}

func (s stageService) GetStatus(context.Context, *v1.GetStatusRequest) (*v1.GetStatusResponse, error) {
	return &v1.GetStatusResponse{Workers: s.statuses()}, nil
}

func (s stageService) Pause(context.Context, *v1.PauseRequest) (*v1.PauseResponse, error) {
	for _, w := range s.workers {
		w.Pause()
	}
	return &v1.PauseResponse{Workers: s.statuses(), Paused: new(true)}, nil
}

func (s stageService) Resume(context.Context, *v1.ResumeRequest) (*v1.ResumeResponse, error) {
	for _, w := range s.workers {
		w.Resume()
	}
	return &v1.ResumeResponse{Workers: s.statuses(), Paused: new(false)}, nil
}

// Drain stops taking jobs for good and waits for the jobs in flight until
// shortly before the call's deadline (DefaultDrain without one); those
// left then are given back and counted in in_flight_left. A tenth of the
// time left, at most AnswerMargin, is kept for giving them back and
// answering: an answer sent at the deadline would never arrive.
func (s stageService) Drain(ctx context.Context, _ *v1.DrainRequest) (*v1.DrainResponse, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultDrain)
	}
	margin := min(time.Until(deadline)/10, AnswerMargin)
	waitCtx, cancel := context.WithDeadline(ctx, deadline.Add(-margin))
	defer cancel()
	left := drainAll(waitCtx, s.workers)
	return &v1.DrainResponse{Workers: s.statuses(), InFlightLeft: new(int32(left))}, nil
}

// drainAll drains workers in parallel and sums the jobs left in flight.
func drainAll[W Worker](ctx context.Context, workers []W) int {
	lefts := make(chan int, len(workers))
	for _, w := range workers {
		go func() { lefts <- w.Drain(ctx) }()
	}
	total := 0
	for range workers {
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
		if cfg.Version == "" {
			cfg.Version = env.Version
		}
		if cfg.Concurrency == 0 && !cfg.OnDemand {
			cfg.Concurrency = env.Config.Concurrency
		}
		if cfg.Address == "" {
			cfg.Address = env.Config.AdvertiseAddr()
		}
		if cfg.ProgressInterval == 0 {
			cfg.ProgressInterval = env.Config.ProgressInterval
		}
		if env.Telemetry != nil {
			if cfg.Tracer == nil {
				cfg.Tracer = env.Telemetry.TracerProvider.Tracer("github.com/ingestq/ingestq/shared/stage")
			}
			if cfg.Metrics == nil {
				cfg.Metrics = env.Telemetry.Metrics
			}
		}
		r, err := New(env.Jobs, cfg)
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
	workers := make([]Worker, len(runners))
	for i, r := range runners {
		workers[i] = r
	}
	v1.RegisterStageServiceServer(env.Server, NewService(workers...))
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
