package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/waittest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const adminToken = "test-admin-token"

// pingService answers like the real PingService, and on request panics or
// blocks so tests can watch the server around a failing or slow handler.
type pingService struct {
	ingestqv1.UnimplementedPingServiceServer
	started chan struct{} // receives when a "block" call has begun
	release chan struct{} // closed to let blocked calls return
}

func newPingService() *pingService {
	return &pingService{started: make(chan struct{}, 8), release: make(chan struct{})}
}

func (p *pingService) answer(ctx context.Context, msg string) (string, error) {
	switch msg {
	case "panic":
		panic("handler panicked on purpose")
	case "block":
		p.started <- struct{}{}
		select {
		case <-p.release:
		case <-ctx.Done():
			return "", status.FromContextError(ctx.Err()).Err()
		}
	}
	return msg, nil
}

func (p *pingService) Ping(ctx context.Context, req *ingestqv1.PingRequest) (*ingestqv1.PingResponse, error) {
	msg, err := p.answer(ctx, req.GetMessage())
	return &ingestqv1.PingResponse{Message: msg, Service: "test"}, err
}

func (p *pingService) AdminPing(ctx context.Context, req *ingestqv1.AdminPingRequest) (*ingestqv1.AdminPingResponse, error) {
	msg, err := p.answer(ctx, req.GetMessage())
	return &ingestqv1.AdminPingResponse{Message: msg, Service: "test"}, err
}

// syncBuffer collects log output written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testServer is a Server serving on a loopback port.
type testServer struct {
	*Server
	addr string
	logs *syncBuffer
}

// start builds a Server with opts, lets register add services, and serves
// it on a loopback port until the test ends.
func start(t *testing.T, opts Options, register func(*Server)) *testServer {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if register != nil {
		register(srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{Server: srv, addr: lis.Addr().String(), logs: logs}
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withAuthorization(ctx context.Context, value string) context.Context {
	if value == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", value)
}

// callUnary calls Ping or AdminPing and returns the echoed message.
func callUnary(ctx context.Context, conn *grpc.ClientConn, admin bool, msg string) (string, error) {
	c := ingestqv1.NewPingServiceClient(conn)
	if admin {
		resp, err := c.AdminPing(ctx, &ingestqv1.AdminPingRequest{Message: msg})
		return resp.GetMessage(), err
	}
	resp, err := c.Ping(ctx, &ingestqv1.PingRequest{Message: msg})
	return resp.GetMessage(), err
}

// streamPingDesc serves PingService's two methods as server streams, so
// the same cases can prove that the stream chain applies the same rules.
// The method names are the real ones: the auth lookup finds AdminPing's
// admin option in the registered descriptors.
func streamPingDesc(p *pingService) *grpc.ServiceDesc {
	handler := func(admin bool) grpc.StreamHandler {
		return func(_ any, stream grpc.ServerStream) error {
			var msg string
			if admin {
				req := &ingestqv1.AdminPingRequest{}
				if err := stream.RecvMsg(req); err != nil {
					return err
				}
				msg = req.GetMessage()
			} else {
				req := &ingestqv1.PingRequest{}
				if err := stream.RecvMsg(req); err != nil {
					return err
				}
				msg = req.GetMessage()
			}
			answer, err := p.answer(stream.Context(), msg)
			if err != nil {
				return err
			}
			return stream.SendMsg(&ingestqv1.PingResponse{Message: answer})
		}
	}
	return &grpc.ServiceDesc{
		ServiceName: ingestqv1.PingService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{
			{StreamName: "Ping", Handler: handler(false), ClientStreams: true, ServerStreams: true},
			{StreamName: "AdminPing", Handler: handler(true), ClientStreams: true, ServerStreams: true},
		},
	}
}

// callStream sends one message on a stream to Ping or AdminPing and returns
// the echoed message.
func callStream(ctx context.Context, conn *grpc.ClientConn, admin bool, msg string) (string, error) {
	method, req := "/ingestq.v1.PingService/Ping", any(&ingestqv1.PingRequest{Message: msg})
	if admin {
		method, req = "/ingestq.v1.PingService/AdminPing", &ingestqv1.AdminPingRequest{Message: msg}
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		return "", err
	}
	if err := stream.SendMsg(req); err != nil && err != io.EOF {
		return "", err
	}
	if err := stream.CloseSend(); err != nil {
		return "", err
	}
	resp := &ingestqv1.PingResponse{}
	if err := stream.RecvMsg(resp); err != nil {
		return "", err
	}
	return resp.GetMessage(), nil
}

func TestInterceptorChainDecidesEachCall(t *testing.T) {
	long := strings.Repeat("x", 2000)
	tests := []struct {
		name          string
		token         string // configured admin token
		authorization string // metadata sent by the caller
		admin         bool   // AdminPing instead of Ping
		message       string
		wantCode      codes.Code
		wantMessage   string // substring of the status message
	}{
		{name: "open method needs no token", token: adminToken,
			message: "hi", wantCode: codes.OK},
		{name: "admin method without token is Unauthenticated", token: adminToken, admin: true,
			message: "hi", wantCode: codes.Unauthenticated, wantMessage: "Bearer"},
		{name: "admin method with another scheme is Unauthenticated", token: adminToken, admin: true,
			authorization: "Basic " + adminToken, message: "hi", wantCode: codes.Unauthenticated},
		{name: "admin method with an empty bearer token says it is empty", token: adminToken, admin: true,
			authorization: "Bearer ", message: "hi", wantCode: codes.Unauthenticated, wantMessage: "the bearer token sent is empty"},
		{name: "admin method with the scheme alone says the token is empty", token: adminToken, admin: true,
			authorization: "Bearer", message: "hi", wantCode: codes.Unauthenticated, wantMessage: "the bearer token sent is empty"},
		{name: "admin method with a wrong token is PermissionDenied", token: adminToken, admin: true,
			authorization: "Bearer not-the-token", message: "hi", wantCode: codes.PermissionDenied},
		{name: "admin method with a token of the same length but wrong is PermissionDenied", token: adminToken, admin: true,
			authorization: "Bearer " + strings.Repeat("x", len(adminToken)), message: "hi", wantCode: codes.PermissionDenied},
		{name: "admin method with the token is answered", token: adminToken, admin: true,
			authorization: "bearer " + adminToken, message: "hi", wantCode: codes.OK},
		{name: "admin method is open when no token is configured", admin: true,
			message: "hi", wantCode: codes.OK},
		{name: "invalid request is InvalidArgument with the reason", token: adminToken,
			message: long, wantCode: codes.InvalidArgument, wantMessage: "message is 2000 bytes, at most 1024 allowed"},
		{name: "auth refuses before validation looks at the request", token: adminToken, admin: true,
			message: long, wantCode: codes.Unauthenticated},
		{name: "panicking handler is Internal without details", token: adminToken,
			message: "panic", wantCode: codes.Internal, wantMessage: "internal error"},
	}
	calls := []struct {
		kind     string
		register func(*Server, *pingService)
		call     func(context.Context, *grpc.ClientConn, bool, string) (string, error)
	}{
		{"unary", func(s *Server, p *pingService) { ingestqv1.RegisterPingServiceServer(s, p) }, callUnary},
		{"stream", func(s *Server, p *pingService) { s.RegisterService(streamPingDesc(p), nil) }, callStream},
	}
	for _, c := range calls {
		servers := map[string]*grpc.ClientConn{}
		for _, token := range []string{"", adminToken} {
			srv := start(t, Options{AdminToken: token}, func(s *Server) { c.register(s, newPingService()) })
			servers[token] = dial(t, srv.addr)
		}
		for _, tt := range tests {
			t.Run(c.kind+"/"+tt.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				got, err := c.call(withAuthorization(ctx, tt.authorization), servers[tt.token], tt.admin, tt.message)
				st := status.Convert(err)
				if st.Code() != tt.wantCode || !strings.Contains(st.Message(), tt.wantMessage) {
					t.Fatalf("got %s %q, want %s containing %q", st.Code(), st.Message(), tt.wantCode, tt.wantMessage)
				}
				if tt.wantCode == codes.OK && got != tt.message {
					t.Errorf("echo %q, want %q", got, tt.message)
				}
			})
		}
	}
}

func TestPanicIsLoggedWithStackAndServerKeepsAnswering(t *testing.T) {
	srv := start(t, Options{}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, newPingService()) })
	conn := dial(t, srv.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := callUnary(ctx, conn, false, "panic"); status.Code(err) != codes.Internal {
		t.Fatalf("panicking call: %v, want Internal", err)
	}
	if got, err := callUnary(ctx, conn, false, "still there?"); err != nil || got != "still there?" {
		t.Fatalf("call after the panic: %q, %v", got, err)
	}
	logs := srv.logs.String()
	for _, want := range []string{`"msg":"panic in gRPC call"`, `"panic":"handler panicked on purpose"`,
		`"grpc.method":"/ingestq.v1.PingService/Ping"`, "pingService).answer"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

func TestHealthAndReflectionAreOpenWhenATokenIsConfigured(t *testing.T) {
	srv := start(t, Options{AdminToken: adminToken}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, newPingService()) })
	conn := dial(t, srv.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without token: %v", err)
	}
	got := servicetest.ListServices(t, conn)
	for _, want := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection", "ingestq.v1.PingService"} {
		if !slices.Contains(got, want) {
			t.Errorf("reflection lists %s, lacks %s", got, want)
		}
	}
}

func TestHealthFollowsSetServing(t *testing.T) {
	srv := start(t, Options{}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, newPingService()) })
	health := healthpb.NewHealthClient(dial(t, srv.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	steps := []struct {
		name    string
		serving *bool // nil: leave as is
		want    healthpb.HealthCheckResponse_ServingStatus
	}{
		{"not serving before SetServing", nil, healthpb.HealthCheckResponse_NOT_SERVING},
		{"serving after SetServing(true)", ptr(true), healthpb.HealthCheckResponse_SERVING},
		{"not serving after SetServing(false)", ptr(false), healthpb.HealthCheckResponse_NOT_SERVING},
	}
	for _, step := range steps {
		if step.serving != nil {
			srv.SetServing(*step.serving)
		}
		for _, service := range []string{"", "ingestq.v1.PingService"} {
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				t.Fatalf("%s: health of %q: %v", step.name, service, err)
			}
			if resp.GetStatus() != step.want {
				t.Errorf("%s: health of %q is %s, want %s", step.name, service, resp.GetStatus(), step.want)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestShutdownDrainsThenWaitsForInFlightCalls(t *testing.T) {
	ping := newPingService()
	srv := start(t, Options{}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, ping) })
	srv.SetServing(true)
	conn := dial(t, srv.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	healthDuringDrain := make(chan healthpb.HealthCheckResponse_ServingStatus, 1)
	srv.OnShutdown(func(ctx context.Context) error {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		healthDuringDrain <- resp.GetStatus()
		return nil
	})

	callDone := make(chan error, 1)
	go func() {
		_, err := callUnary(ctx, conn, false, "block")
		callDone <- err
	}()
	<-ping.started

	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- srv.Shutdown(ctx) }()
	if st := <-healthDuringDrain; st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while draining: %s, want NOT_SERVING", st)
	}
	select {
	case err := <-shutdownDone:
		t.Fatalf("Shutdown returned (%v) while a call was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(ping.release)
	if err := <-callDone; err != nil {
		t.Errorf("in-flight call: %v, want it answered", err)
	}
	if err := <-shutdownDone; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := callUnary(ctx, conn, false, "hi"); status.Code(err) != codes.Unavailable {
		t.Errorf("call after Shutdown: %v, want Unavailable", err)
	}
}

func TestShutdownCutsOffCallsWhenItsContextEnds(t *testing.T) {
	ping := newPingService()
	srv := start(t, Options{DrainTimeout: 50 * time.Millisecond}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, ping) })
	conn := dial(t, srv.addr)
	// A drain that does not finish in time: it ignores its context, so
	// its answer cannot reach Shutdown before the drain deadline does.
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	srv.OnShutdown(func(context.Context) error {
		<-stuck
		return nil
	})
	callDone := make(chan error, 1)
	go func() {
		_, err := callUnary(context.Background(), conn, false, "block")
		callDone <- err
	}()
	<-ping.started

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	shutdownDone := make(chan error, 1)
	go func() { shutdownDone <- srv.Shutdown(ctx) }()
	var err error
	select {
	case err = <-shutdownDone:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return after its context ended")
	}
	if err == nil || !strings.Contains(err.Error(), "drain hooks still running") || !strings.Contains(err.Error(), "cut off in-flight calls") {
		t.Errorf("Shutdown: %v, want it to report the unfinished drain and the cut-off calls", err)
	}
	if err := <-callDone; err == nil {
		t.Error("in-flight call succeeded after a hard stop")
	}
}

// TestHealthAndReflectionCallsMakeNoSpans: probes and grpcurl would bury
// the jobs' traces in a tracing backend; the service's own calls are traced.
func TestHealthAndReflectionCallsMakeNoSpans(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	srv := start(t, Options{TracerProvider: provider}, func(s *Server) { ingestqv1.RegisterPingServiceServer(s, newPingService()) })
	srv.SetServing(true)
	conn := dial(t, srv.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check: %v", err)
		}
	}
	servicetest.ListServices(t, conn)
	if _, err := callUnary(ctx, conn, false, "hello"); err != nil {
		t.Fatal(err)
	}
	// The server ends a call's span after its answer is on the wire, so
	// the client can see the answer first: wait for the Ping span.
	var names []string
	waittest.Until(t, 5*time.Second, func() error {
		names = names[:0]
		for _, s := range exporter.GetSpans() {
			names = append(names, s.Name)
		}
		if !slices.Contains(names, "ingestq.v1.PingService/Ping") {
			return fmt.Errorf("spans %q, no Ping call's", names)
		}
		return nil
	})
	if !slices.Equal(names, []string{"ingestq.v1.PingService/Ping"}) {
		t.Errorf("spans %q, want only the Ping call's", names)
	}
}
