// Package service is the main of every ingestq service: it reads the
// configuration, opens the JSON logger, connects to ZooKeeper, serves the
// shared gRPC server (health following the ZooKeeper session, reflection,
// PingService and the stage's own API) and stops gracefully on SIGTERM or
// SIGINT. A stage plugs its work in through Spec.Setup.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/ping"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/telemetry"
)

// stopGrace is how long in-flight gRPC calls may run on after the drain
// timeout before they are cut off.
const stopGrace = 5 * time.Second

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
func Main(spec Spec) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// After the first signal, a second one kills the process at once.
	context.AfterFunc(ctx, stop)
	err := run(ctx, spec, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("service failed", "service", spec.Name, "error", err.Error())
		os.Exit(1)
	}
}

// run is Main without the process: it returns when ctx ends and the service
// has stopped, or on an error.
func run(ctx context.Context, spec Spec, args []string, lookupEnv config.LookupEnv, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet(spec.Name, flag.ContinueOnError)
	flags.SetOutput(stderr)
	registry := config.New(flags, lookupEnv)
	cfg := config.RegisterCommon(registry, spec.Defaults)
	printTable := flags.Bool("print-env-table", false, "print the environment variables as a Markdown table and exit")
	probe := flags.Bool("check-health", false,
		"ask the service at -listen (on loopback if unspecified, with its TLS settings) for its grpc.health.v1 status, print it and exit: 0 if SERVING, 1 otherwise")
	if spec.Config != nil {
		spec.Config(registry)
	}
	if err := registry.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("configuration: %w", err)
	}
	if *printTable {
		return registry.WriteMarkdownTable(stdout)
	}
	if *probe {
		return checkHealth(ctx, cfg, stdout)
	}
	log := telemetry.NewLogger(stderr, cfg.LogLevel).With("service", spec.Name)
	for _, d := range registry.Deprecated() {
		log.Warn("deprecated setting", "setting", d)
	}
	return serve(ctx, spec, cfg, log)
}

// serve runs the configured service until ctx ends.
func serve(ctx context.Context, spec Spec, cfg *config.Common, log *slog.Logger) (err error) {
	tel, err := telemetry.Setup(ctx, spec.Name, version())
	if err != nil {
		return err
	}
	// otelgrpc in the shared server reads the otel globals.
	tel.SetGlobal()
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace)
		defer cancel()
		err = errors.Join(err, tel.Shutdown(flushCtx))
	}()
	// Metrics are served from the start (ZooKeeper may keep the service
	// waiting) until the very end (a drain is worth watching). If they
	// cannot be served, the service stops as it would on SIGTERM.
	ctx, stopService := context.WithCancel(ctx)
	defer stopService()
	metricsCtx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	metricsDone := make(chan error, 1)
	go func() {
		var opts []telemetry.ServeOption
		if cfg.Pprof {
			opts = append(opts, telemetry.WithPprof())
		}
		err := tel.ServeMetrics(metricsCtx, cfg.MetricsListen, opts...)
		if err != nil {
			stopService()
		}
		metricsDone <- err
	}()
	defer func() {
		stopMetrics()
		err = errors.Join(err, <-metricsDone)
	}()

	srv, err := server.New(server.Options{
		Logger:       log,
		AdminToken:   cfg.AdminToken,
		TLS:          server.TLSFiles{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, ClientCAFile: cfg.TLS.ClientCA},
		DrainTimeout: cfg.DrainTimeout,
	})
	if err != nil {
		return err
	}
	ingestqv1.RegisterPingServiceServer(srv, ping.New(spec.Name))

	log.Info("connecting to ZooKeeper", "servers", cfg.ZooKeeper.Servers, "root", cfg.ZooKeeper.Root)
	q, err := session.Connect(ctx, session.Options{
		Servers:        cfg.ZooKeeper.Servers,
		Root:           cfg.ZooKeeper.Root,
		SessionTimeout: cfg.ZooKeeper.SessionTimeout,
		Auth:           cfg.ZooKeeper.Auth,
		Logger:         log,
		Worker:         queue.ProcessName(spec.Name),
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
	defer q.Close() // after the drain: ephemeral locks must outlive it
	sessionGauge, err := tel.Metrics.ObserveZooKeeperSession(q.Connected)
	if err != nil {
		return err
	}
	defer sessionGauge.Unregister()
	requestCounter, err := tel.Metrics.ObserveZooKeeperRequests(func(observe func(op, node string, count int64)) {
		for _, r := range q.Requests() {
			observe(r.Op, r.Node, r.Count)
		}
	})
	if err != nil {
		return err
	}
	defer requestCounter.Unregister()

	// Work started by Setup must survive the signal until it has drained.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	if spec.Setup != nil {
		env := &Env{Name: spec.Name, Version: version(), Config: cfg, Logger: log, Session: q, Jobs: jobs.New(q), Server: srv, Telemetry: tel}
		if err := spec.Setup(life, env); err != nil {
			return fmt.Errorf("setting up %s: %w", spec.Name, err)
		}
	}
	// Notifications may arrive out of order, so each one reads the session's
	// state now instead of trusting its argument.
	unsubscribe := q.OnSession(func(bool) { srv.SetServing(q.Connected()) })
	defer unsubscribe()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening for gRPC: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	log.Info("serving gRPC", "addr", lis.Addr().String(), "tls", cfg.TLS.Cert != "", "mutual_tls", cfg.TLS.ClientCA != "")

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping", "drain_timeout", cfg.DrainTimeout.String())
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.DrainTimeout+stopGrace)
	defer cancel()
	err = srv.Shutdown(stopCtx)
	err = errors.Join(err, <-served)
	if err != nil {
		return fmt.Errorf("stopping: %w", err)
	}
	log.Info("stopped")
	return nil
}

// version is the service's module version as the Go toolchain recorded it
// ("(devel)" for a build from a work tree).
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.Main.Version
	}
	return "unknown"
}
