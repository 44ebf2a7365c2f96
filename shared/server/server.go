// Package server builds the gRPC server every ingestq service runs: the
// interceptor chain (recovery, logging, admin auth, validation), OpenTelemetry
// instrumentation, grpc.health.v1, server reflection, optional (mutual) TLS
// and a graceful stop that first lets the service drain its work.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
)

// Options configure a Server.
type Options struct {
	// Logger receives call logs, panics and lifecycle messages.
	Logger *slog.Logger
	// AdminToken, when not empty, is the bearer token that methods marked
	// with the ingestq.v1.admin option require. Empty leaves them open.
	AdminToken string
	// TLS names the certificate files; the zero value serves plaintext.
	TLS TLSFiles
	// DrainTimeout bounds how long Shutdown waits for the drain hooks
	// (default 30s).
	DrainTimeout time.Duration
	// TracerProvider makes the calls' spans (nil: the otel global).
	TracerProvider trace.TracerProvider
}

// Server is a gRPC server with ingestq's interceptors, health and
// reflection. It implements grpc.ServiceRegistrar, so generated
// Register…Server functions take it directly.
type Server struct {
	grpc         *grpc.Server
	health       *health.Server
	log          *slog.Logger
	drainTimeout time.Duration

	mu         sync.Mutex
	serving    bool
	drainHooks []func(context.Context) error
}

// New builds a Server. Health reports NOT_SERVING until SetServing(true).
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 30 * time.Second
	}
	otelOpts := []otelgrpc.Option{otelgrpc.WithFilter(traced)}
	if opts.TracerProvider != nil {
		otelOpts = append(otelOpts, otelgrpc.WithTracerProvider(opts.TracerProvider))
	}
	grpcOpts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelOpts...)),
		// Requests with invalid UTF-8 reach the interceptors (utf8.go).
		grpc.ForceServerCodecV2(newRequestCodec()),
	}
	grpcOpts = append(grpcOpts, interceptors(opts.Logger, opts.AdminToken)...)
	if opts.TLS != (TLSFiles{}) {
		creds, err := opts.TLS.credentials()
		if err != nil {
			return nil, err
		}
		grpcOpts = append(grpcOpts, grpc.Creds(creds))
	}
	if opts.AdminToken == "" {
		opts.Logger.Warn("no admin token configured: admin methods are open to every caller")
	}
	s := &Server{
		grpc:         grpc.NewServer(grpcOpts...),
		health:       health.NewServer(),
		log:          opts.Logger,
		drainTimeout: opts.DrainTimeout,
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc) // v1 and v1alpha: grpcurl and older tools
	s.setHealth()
	return s, nil
}

// untracedServices are called by machines, often (Kubernetes probes every
// few seconds, grpcurl listing methods): a span for each would bury the
// traces of jobs in a tracing backend.
var untracedServices = []string{
	"/" + healthpb.Health_ServiceDesc.ServiceName + "/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// traced says whether a call gets a span (and otelgrpc's RPC metrics).
func traced(info *stats.RPCTagInfo) bool {
	for _, prefix := range untracedServices {
		if strings.HasPrefix(info.FullMethodName, prefix) {
			return false
		}
	}
	return true
}

// RegisterService registers a gRPC service; call it before Serve.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s.grpc.RegisterService(desc, impl)
}

// OnShutdown adds a drain hook. Shutdown calls every hook at once with a
// context that ends at the drain deadline; a hook stops taking work and
// finishes or releases what it holds before it returns.
func (s *Server) OnShutdown(hook func(ctx context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainHooks = append(s.drainHooks, hook)
}

// SetServing sets the health of the server and of every registered service:
// SERVING while the service's dependency (its ZooKeeper session) is up,
// NOT_SERVING otherwise. After Shutdown began it has no effect.
func (s *Server) SetServing(serving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving = serving
	s.setHealthLocked()
}

func (s *Server) setHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setHealthLocked()
}

// setHealthLocked gives "" (the whole server) and every registered service
// the current status.
func (s *Server) setHealthLocked() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if s.serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, st)
	}
}

// Serve accepts connections on lis until Shutdown. It returns nil after a
// Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	// Services registered since New get a status too.
	s.setHealth()
	if err := s.grpc.Serve(lis); err != nil {
		return fmt.Errorf("serving gRPC on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Shutdown stops the server in order: health turns NOT_SERVING (load
// balancers and peers stop sending), the drain hooks run until they return
// or the drain timeout passes, then the server stops accepting calls and
// waits for the running ones. When ctx ends first, the remaining calls are
// cut off.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	err := s.drain(ctx)
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
		err = errors.Join(err, fmt.Errorf("cut off in-flight calls: %w", ctx.Err()))
	}
	return err
}

// drain runs the drain hooks concurrently and waits for them until the
// drain timeout or ctx ends. A hook still running then gets a cancelled
// context and is left behind: the process is on its way out.
func (s *Server) drain(ctx context.Context) error {
	s.mu.Lock()
	hooks := s.drainHooks
	s.mu.Unlock()
	if len(hooks) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.drainTimeout)
	defer cancel()
	errs := make(chan error, len(hooks))
	for _, hook := range hooks {
		go func() { errs <- hook(ctx) }()
	}
	var all []error
	for range hooks {
		select {
		case err := <-errs:
			if err != nil {
				all = append(all, fmt.Errorf("drain: %w", err))
			}
		case <-ctx.Done():
			return errors.Join(append(all, fmt.Errorf("drain hooks still running: %w", ctx.Err()))...)
		}
	}
	return errors.Join(all...)
}
