// Package servicetest checks ingestq services from the outside: over gRPC
// on a loopback port, against the test ZooKeeper of zktest.
package servicetest

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
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

// WaitHealth polls the overall health of the server behind conn until it
// reports want, failing the test after timeout.
func WaitHealth(t testing.TB, conn *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration) {
	t.Helper()
	client := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == want {
			return
		}
		last = resp.GetStatus().String()
		if err != nil {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("health is not %s after %s; last answer: %s", want, timeout, last)
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

// CheckBinary builds the main package in the current directory (the
// service under test), runs it against the test ZooKeeper and checks that
// it turns SERVING, answers Ping as name, guards AdminPing with the admin
// token, and exits 0 soon after SIGTERM. Call zktest.Main from TestMain.
func CheckBinary(t *testing.T, name string) {
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := FreeAddr(t)
	const token = "servicetest-admin-token"
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","),
		"INGESTQ_ZK_ROOT="+zktest.Root(t),
		"INGESTQ_LISTEN="+addr,
		"INGESTQ_METRICS_LISTEN=",
		"INGESTQ_ADMIN_TOKEN="+token,
		"INGESTQ_DRAIN_TIMEOUT=5s",
	)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, logs)
		}
	})

	conn := Dial(t, addr)
	WaitHealth(t, conn, healthpb.HealthCheckResponse_SERVING, 30*time.Second)
	if out, code := probeHealth(t, bin, cmd.Env); code != 0 || out != addr+" SERVING\n" {
		t.Errorf("-check-health of a serving %s: exit %d, printed %q; want 0 and %q", name, code, out, addr+" SERVING\n")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pings := ingestqv1.NewPingServiceClient(conn)
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

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line")
	}
	if out, code := probeHealth(t, bin, cmd.Env); code != 1 {
		t.Errorf("-check-health with nothing listening: exit %d, printed %q; want 1", code, out)
	}
}

// probeHealth runs bin -check-health with env, as a container runtime
// would, and returns its standard output and exit code.
func probeHealth(t *testing.T, bin string, env []string) (stdout string, code int) {
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
