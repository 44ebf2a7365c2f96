// Package servicetest runs ingestq services for tests and checks them from
// the outside: it builds a service's binary and keeps it running against
// the test ZooKeeper of zktest (Build, Start), serves a gRPC server on a
// loopback port (Serve), and talks to either over gRPC.
package servicetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// FreeAddr returns a free loopback address that no other test is given
// while this one runs (freeport holds it until the test ends).
func FreeAddr(t testing.TB) string {
	t.Helper()
	reserved := freeport.Reserve()
	t.Cleanup(reserved.Close)
	addrs, err := reserved.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0].String()
}

// Dial opens a plaintext client connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Server is what Serve runs: the shared gRPC server (shared/server.Server),
// named by its methods so that the server's own tests may use this package.
type Server interface {
	Serve(lis net.Listener) error
	Shutdown(ctx context.Context) error
}

// Serve runs srv on a free loopback port and returns a plaintext client
// connection to it. When the test ends the connection is closed and the
// server shut down (cleanups the test registers later run before).
func Serve(t testing.TB, srv Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Tests check their own calls; a late call cut off here is logged.
		if err := srv.Shutdown(ctx); err != nil {
			t.Logf("shutting the test server down: %v", err)
		}
	})
	return Dial(t, lis.Addr().String())
}

// WaitHealth polls the overall health of the server behind conn until it
// reports want, failing the test after timeout.
func WaitHealth(t testing.TB, conn *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration) {
	t.Helper()
	if err := awaitHealth(conn, want, timeout, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// awaitHealth polls the health of the server behind conn until it reports
// want and then accept (if any) passes, or timeout passes. It gives up
// early when stop is closed (stop may be nil).
func awaitHealth(conn *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration,
	stop <-chan struct{}, accept func(context.Context) error) error {
	client := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return errors.New("stopped waiting for health")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == want {
			if accept == nil {
				cancel()
				return nil
			}
			if err = accept(ctx); err == nil {
				cancel()
				return nil
			}
		}
		cancel()
		last = resp.GetStatus().String()
		if err != nil {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("health is not %s after %s; last answer: %s", want, timeout, last)
}

// ListServices asks the server behind conn, through reflection v1, which
// services it serves.
func ListServices(t testing.TB, conn *grpc.ClientConn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	err = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Build builds the main package in dir ("." for the service under test)
// into the test's temporary folder and returns the binary's path. A test
// that runs the binary twice builds it twice: Go's build cache makes the
// second build a link step.
func Build(t testing.TB, dir string) string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(abs))
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = abs
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", abs, err, out)
	}
	return bin
}

// ExampleProfiles is the absolute path of the sample collection profiles
// the repository ships (examples/profiles), looked for from the current
// directory upwards: a service's tests load what a first deployment loads.
func ExampleProfiles(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "examples", "profiles")
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no examples/profiles in the current directory or above it")
		}
		dir = parent
	}
}

// StopWait is how long a process may take to exit after SIGTERM before it
// is killed and the test fails.
const StopWait = 20 * time.Second

// Process is a service binary started by Start.
type Process struct {
	// Addr is its gRPC address on loopback.
	Addr string
	// Env is the environment it runs with.
	Env []string

	name   string
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{} // closed once the process has exited; then err is set
	err    error

	stopOnce sync.Once
	stopErr  error
}

// Start runs bin against the test ZooKeeper under root with env added to
// this process's environment after what Start sets (INGESTQ_ZK_SERVERS,
// INGESTQ_ZK_ROOT, INGESTQ_LISTEN on a free loopback port, no metrics
// listener, a 5 s drain), so env may override them. A root of "" runs a
// program without the queue (the console): no ZooKeeper is set. It
// returns once the server's health is SERVING. When the test ends the
// process is stopped (see Stop), the test fails unless it exited 0, and
// its output is logged if the test failed. Call zktest.Main from TestMain
// for a service of the queue.
//
// The port was free when it was picked, but another test's server may
// bind it before this one does: such a start is tried again on another.
func Start(t testing.TB, bin, root string, env ...string) *Process {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := launch(t, bin, root, env)
		err := p.waitServing(30 * time.Second)
		if err == nil {
			t.Cleanup(func() {
				if err := p.Stop(); err != nil {
					t.Errorf("%s: %v", p.name, err)
				}
				if t.Failed() {
					t.Logf("%s output:\n%s", p.name, p.Output())
				}
			})
			return p
		}
		p.cmd.Process.Kill()
		<-p.exited
		if attempt < 3 && strings.Contains(p.Output(), "address already in use") {
			t.Logf("%s on %s: %v; starting it again on another port; its output:\n%s", p.name, p.Addr, err, p.Output())
			continue
		}
		t.Fatalf("%s on %s: %v; its output:\n%s", p.name, p.Addr, err, p.Output())
	}
}

// launch starts bin on a free port (see Start).
func launch(t testing.TB, bin, root string, env []string) *Process {
	t.Helper()
	addr := FreeAddr(t)
	own := []string{"INGESTQ_LISTEN=" + addr, "INGESTQ_METRICS_LISTEN=", "INGESTQ_DRAIN_TIMEOUT=5s"}
	if root != "" {
		own = append(own, "INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","), "INGESTQ_ZK_ROOT="+root)
	}
	p := &Process{
		Addr:   addr,
		Env:    append(append(os.Environ(), own...), env...),
		name:   filepath.Base(bin),
		out:    &lockedBuffer{},
		exited: make(chan struct{}),
	}
	p.cmd = exec.Command(bin)
	p.cmd.Env = p.Env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

// waitServing waits until the process answers SERVING on its address and
// Ping names it: another server that took the port answers otherwise.
func (p *Process) waitServing(timeout time.Duration) error {
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	pings := ingestqv1.NewPingServiceClient(conn)
	err = awaitHealth(conn, healthpb.HealthCheckResponse_SERVING, timeout, p.exited, func(ctx context.Context) error {
		pong, err := pings.Ping(ctx, &ingestqv1.PingRequest{})
		if err == nil && pong.GetService() != p.name {
			err = fmt.Errorf("the port is served by %s", pong.GetService())
		}
		return err
	})
	select {
	case <-p.exited:
		return fmt.Errorf("exited before serving: %v", p.err)
	default:
		return err
	}
}

// Stop sends the process SIGTERM and waits up to StopWait for it to exit.
// It returns nil when it exited 0, its exit error otherwise, and an error
// saying so when it had to be killed. Later calls return the first result.
func (p *Process) Stop() error {
	p.stopOnce.Do(func() {
		select {
		case <-p.exited:
			p.stopErr = exitError(p.err, "before it was stopped")
			return
		default:
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			p.stopErr = fmt.Errorf("sending SIGTERM: %w", err)
		}
		select {
		case <-p.exited:
			if p.stopErr == nil {
				p.stopErr = exitError(p.err, "after SIGTERM")
			}
		case <-time.After(StopWait):
			p.cmd.Process.Kill()
			<-p.exited
			p.stopErr = fmt.Errorf("still running %s after SIGTERM; killed", StopWait)
		}
	})
	return p.stopErr
}

// exitError describes a process's exit other than 0, or is nil.
func exitError(err error, when string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("exit %s: %w, want 0", when, err)
}

// Output is what the process has written to its standard output and error
// so far.
func (p *Process) Output() string { return p.out.String() }

// CheckBinary builds the main package in the current directory (the
// service under test), runs it against the test ZooKeeper and checks that
// it turns SERVING, answers Ping as name, guards AdminPing with the admin
// token, and exits 0 soon after SIGTERM. Call zktest.Main from TestMain.
func CheckBinary(t *testing.T, name string) { checkBinary(t, name, zktest.Root(t)) }

// CheckProgram is CheckBinary for a program without the queue (the
// console): it runs without ZooKeeper.
func CheckProgram(t *testing.T, name string) { checkBinary(t, name, "") }

func checkBinary(t *testing.T, name, root string) {
	t.Helper()
	bin := Build(t, ".")
	const token = "servicetest-admin-token"
	p := Start(t, bin, root, "INGESTQ_ADMIN_TOKEN="+token)
	if out, code := probeHealth(t, bin, p.Env); code != 0 || out != p.Addr+" SERVING\n" {
		t.Errorf("-check-health of a serving %s: exit %d, printed %q; want 0 and %q", name, code, out, p.Addr+" SERVING\n")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pings := ingestqv1.NewPingServiceClient(Dial(t, p.Addr))
	resp, err := pings.Ping(ctx, &ingestqv1.PingRequest{Message: "hello"})
	if err != nil || resp.GetMessage() != "hello" || resp.GetService() != name {
		t.Errorf("Ping: %v, %v; want hello from %s", resp, err, name)
	}
	if _, err := pings.AdminPing(ctx, &ingestqv1.AdminPingRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("AdminPing without token: %v, want Unauthenticated", err)
	}
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := pings.AdminPing(admin, &ingestqv1.AdminPingRequest{}); err != nil {
		t.Errorf("AdminPing with the token: %v", err)
	}

	p.Stop() // an exit other than 0 fails the test when it ends
	if !strings.Contains(p.Output(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line")
	}
	if out, code := probeHealth(t, bin, p.Env); code != 1 {
		t.Errorf("-check-health with nothing listening: exit %d, printed %q; want 1", code, out)
	}
}

// probeHealth runs bin -check-health with env, as a container runtime
// would, and returns its standard output and exit code.
func probeHealth(t testing.TB, bin string, env []string) (stdout string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	probe := exec.CommandContext(ctx, bin, "-check-health")
	probe.Env = env
	probe.Stdout = &out
	err := probe.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	default:
		t.Fatalf("running %s -check-health: %v", bin, err)
		return "", 0
	}
}
