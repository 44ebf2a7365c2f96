// Package service is the main of every ingestq stage service: package
// program's (configuration, logging, telemetry, the shared gRPC server, a
// graceful stop on SIGTERM or SIGINT) with a ZooKeeper session,
// which the server's health follows. A stage plugs its work in through
// Spec.Setup.
package service

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/program"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/telemetry"
)

// Spec describes one ingestq service.
type Spec struct {
	// Name names the service in logs and in PingService answers ("batcher").
	Name string
	// Defaults are the service's own listen addresses.
	Defaults config.Defaults
	// Config, if set, defines the service's own settings on r before the
	// command line is parsed; the values it gets back are filled in by the
	// time Setup runs.
	Config func(r *config.Registry)
	// Setup, if set, registers the service's gRPC API on env.Server and
	// starts its work. It runs once ZooKeeper is connected and before the
	// server serves. ctx lives until the service has drained and stopped: a
	// stage stops taking work in a drain hook (env.Server.OnShutdown), not
	// when ctx ends. An error stops the service.
	Setup func(ctx context.Context, env *Env) error
}

// Env is what a service's Setup works with.
type Env struct {
	Name string
	// Version is the service's build version (its module version as the
	// Go toolchain recorded it), shown in the worker registry.
	Version string
	Config  *config.Common
	// Logger writes JSON lines carrying the trace and job of their context.
	Logger *slog.Logger
	// Session is the service's ZooKeeper session, its queue's one door;
	// Jobs is the stages' side of the queue over it, which the process's
	// stages share.
	Session *session.Session
	Jobs    *jobs.Client
	// Server takes the stage's gRPC services (it is a grpc.ServiceRegistrar)
	// and its drain hooks (OnShutdown).
	Server *server.Server
	// Telemetry holds the stage runner's metrics and the tracer provider.
	Telemetry *telemetry.Telemetry
}

// Main runs the service until SIGTERM or SIGINT and exits the process: 0
// after a clean stop, 1 after an error (logged as JSON on stderr). With
// -check-health it probes the running service instead (the container
// health check of an image without a shell): 0 if it is SERVING, 1 if not.
func Main(spec Spec) { program.Main(spec.programSpec()) }

// run is Main without the process: it returns when ctx ends and the service
// has stopped, or on an error.
func run(ctx context.Context, spec Spec, args []string, lookupEnv config.LookupEnv, stdout, stderr io.Writer) error {
	return program.Run(ctx, spec.programSpec(), args, lookupEnv, stdout, stderr)
}

// program is the service as a program: the queue's settings beside the
// service's own, and a ZooKeeper session before its Setup.
func (spec Spec) programSpec() program.Spec {
	return program.Spec{
		Name:     spec.Name,
		Defaults: spec.Defaults,
		Config: func(r *config.Registry, c *config.Common) {
			c.RegisterQueue(r)
			if spec.Config != nil {
				spec.Config(r)
			}
		},
		Setup: spec.setup,
	}
}

// setup connects to ZooKeeper, makes the server's health follow the
// session, and runs the service's own Setup.
func (spec Spec) setup(ctx context.Context, penv *program.Env) error {
	cfg, log, tel := penv.Config, penv.Logger, penv.Telemetry
	log.Info("connecting to ZooKeeper", "servers", cfg.ZooKeeper.Servers, "root", cfg.ZooKeeper.Root)
	q, err := session.Connect(penv.Starting, session.Options{
		Servers:        cfg.ZooKeeper.Servers,
		Root:           cfg.ZooKeeper.Root,
		SessionTimeout: cfg.ZooKeeper.SessionTimeout,
		Auth:           cfg.ZooKeeper.Auth,
		Logger:         log,
		Worker:         session.ProcessName(spec.Name),
		// Each change is counted by the process that made it: summed over
		// processes, every change counts once.
		OnStateChange: func(sc queue.StateChange) {
			h := sc.Change
			inState, latency := time.Duration(-1), time.Duration(-1)
			if h.GetInState() != nil {
				inState = h.GetInState().AsDuration()
			}
			if !sc.Created.IsZero() {
				latency = h.GetAt().AsTime().Sub(sc.Created)
			}
			from := ""
			if h.GetFrom() != ingestqv1.JobState_JOB_STATE_UNSPECIFIED {
				from = strings.ToLower(queue.JobStateName(h.GetFrom()))
			}
			tel.Metrics.StateChanged(context.Background(), from, strings.ToLower(queue.JobStateName(h.GetTo())), inState, latency)
		},
	})
	if err != nil {
		return err
	}
	penv.AfterStop(q.Close) // after the drain: ephemeral locks must outlive it
	sessionGauge, err := tel.Metrics.ObserveZooKeeperSession(q.Connected)
	if err != nil {
		return err
	}
	penv.AfterStop(func() { sessionGauge.Unregister() })
	requestCounter, err := tel.Metrics.ObserveZooKeeperRequests(func(observe func(op, node string, count int64)) {
		for _, r := range q.Requests() {
			observe(r.Op, r.Node, r.Count)
		}
	})
	if err != nil {
		return err
	}
	penv.AfterStop(func() { requestCounter.Unregister() })
	if spec.Setup != nil {
		env := &Env{Name: penv.Name, Version: penv.Version, Config: cfg, Logger: log, Session: q, Jobs: jobs.New(q), Server: penv.Server, Telemetry: tel}
		if err := spec.Setup(ctx, env); err != nil {
			return err
		}
	}
	// Notifications may arrive out of order, so each one reads the session's
	// state now instead of trusting its argument.
	srv := penv.Server
	penv.AfterStop(q.OnSession(func(bool) { srv.SetServing(q.Connected()) }))
	return nil
}
