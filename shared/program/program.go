// Package program is the main of an ingestq program: it reads the
// configuration, opens the JSON logger and the telemetry, serves the
// shared gRPC server (health, reflection, PingService and the program's
// own API) and its metrics, and stops gracefully on SIGTERM or SIGINT. A
// program plugs its work in through Spec.Setup. Package service builds
// every stage service on it with a ZooKeeper session; the console, which
// reaches the queue only through the batcher's API, runs on it alone.
package program

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
	"slices"
	"syscall"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/ping"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/telemetry"
)

// stopGrace is how long in-flight gRPC calls may run on after the drain
// timeout before they are cut off.
const stopGrace = 5 * time.Second

// Spec describes one ingestq program.
type Spec struct {
	// Name names the program in logs and in PingService answers ("batcher").
	Name string
	// Defaults are the program's own listen addresses.
	Defaults config.Defaults
	// Config, if set, defines the program's own settings on r before the
	// command line is parsed (c holds the common ones, RegisterCommon's);
	// the values it gets back are filled in by the time Setup runs.
	Config func(r *config.Registry, c *config.Common)
	// Setup, if set, registers the program's gRPC API on env.Server and
	// starts its work, before the server serves. The server's health is
	// SERVING from then until the drain unless Setup sets it otherwise
	// (env.Server.SetServing). ctx lives until the program has drained and
	// stopped: work stops in a drain hook (env.Server.OnShutdown), not when
	// ctx ends. An error stops the program.
	Setup func(ctx context.Context, env *Env) error
}

// Env is what a program's Setup works with.
type Env struct {
	Name string
	// Version is the program's build version (its module version as the
	// Go toolchain recorded it).
	Version string
	Config  *config.Common
	// Logger writes JSON lines carrying the trace and job of their context.
	Logger *slog.Logger
	// Server takes the program's gRPC services (it is a
	// grpc.ServiceRegistrar) and its drain hooks (OnShutdown).
	Server *server.Server
	// Telemetry holds the metrics and the tracer provider.
	Telemetry *telemetry.Telemetry
	// Starting ends when the program is told to stop: Setup waits with it
	// for what it needs first (a ZooKeeper session), so that a stop during
	// the wait ends the wait.
	Starting  context.Context
	afterStop []func()
}

// AfterStop registers f to run once the gRPC server has stopped, after the
// drain: what the drain needed until its end (a ZooKeeper session whose
// ephemeral locks must outlive it) is closed there. The last registered
// runs first.
func (e *Env) AfterStop(f func()) { e.afterStop = append(e.afterStop, f) }

// Main runs the program until SIGTERM or SIGINT and exits the process: 0
// after a clean stop, 1 after an error (logged as JSON on stderr). With
// -check-health it probes the running program instead (the container
// health check of an image without a shell): 0 if it is SERVING, 1 if not.
func Main(spec Spec) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	// After the first signal, a second one kills the process at once.
	context.AfterFunc(ctx, stop)
	err := Run(ctx, spec, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("service failed", "service", spec.Name, "error", err.Error())
		os.Exit(1)
	}
}

// Run is Main without the process: it returns when ctx ends and the
// program has stopped, or on an error.
func Run(ctx context.Context, spec Spec, args []string, lookupEnv config.LookupEnv, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet(spec.Name, flag.ContinueOnError)
	flags.SetOutput(stderr)
	registry := config.New(flags, lookupEnv)
	cfg := config.RegisterCommon(registry, spec.Defaults)
	printTable := flags.Bool("print-env-table", false, "print the environment variables as a Markdown table and exit")
	probe := flags.Bool("check-health", false,
		"ask the service at -listen (on loopback if unspecified, with its TLS settings) for its grpc.health.v1 status, print it and exit: 0 if SERVING, 1 otherwise")
	if spec.Config != nil {
		spec.Config(registry, cfg)
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

// serve runs the configured program until ctx ends.
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
	// Metrics are served from the start (a service may wait for ZooKeeper)
	// until the very end (a drain is worth watching). If they cannot be
	// served, the program stops as it would on SIGTERM.
	ctx, stopProgram := context.WithCancel(ctx)
	defer stopProgram()
	metricsCtx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	metricsDone := make(chan error, 1)
	go func() {
		var opts []telemetry.ServeOption
		if cfg.Pprof {
			opts = append(opts, telemetry.WithPprof())
		}
		err := tel.ServeMetrics(metricsCtx, cfg.MetricsListen, opts...)
		if err != nil {
			stopProgram()
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

	env := &Env{Name: spec.Name, Version: version(), Config: cfg, Logger: log, Server: srv, Telemetry: tel, Starting: ctx}
	defer func() {
		for _, f := range slices.Backward(env.afterStop) {
			f()
		}
	}()
	// Work started by Setup must survive the signal until it has drained,
	// and ends before what AfterStop closes.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	srv.SetServing(true)
	if spec.Setup != nil {
		if err := spec.Setup(life, env); err != nil {
			return fmt.Errorf("setting up %s: %w", spec.Name, err)
		}
	}

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

// version is the program's module version as the Go toolchain recorded it
// ("(devel)" for a build from a work tree).
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.Main.Version
	}
	return "unknown"
}
