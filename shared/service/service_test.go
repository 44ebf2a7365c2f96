package service

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

var testDefaults = config.Defaults{Listen: "127.0.0.1:7499", MetricsListen: ""}

func noEnv(string) (string, bool) { return "", false }

// running is a service run in the background.
type running struct {
	addr string
	stop context.CancelFunc
	done chan struct{} // closed when run returned err
	err  error
}

// startService runs spec against the ZooKeeper at servers under a fresh
// root, with extra command-line args.
func startService(t *testing.T, spec Spec, servers []string, args ...string) *running {
	t.Helper()
	r := &running{addr: servicetest.FreeAddr(t), done: make(chan struct{})}
	args = append([]string{
		"-zk-servers", strings.Join(servers, ","),
		"-zk-root", zktest.Root(t),
		"-listen", r.addr,
	}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		r.err = run(ctx, spec, args, noEnv, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func TestServiceServesWhileConnectedAndStopsCleanlyOnCancel(t *testing.T) {
	drained := make(chan struct{})
	spec := Spec{
		Name:     "teststage",
		Defaults: testDefaults,
		Setup: func(ctx context.Context, env *Env) error {
			if !env.Session.Connected() {
				t.Error("Setup ran before the ZooKeeper session was up")
			}
			env.Server.OnShutdown(func(context.Context) error {
				close(drained)
				return nil
			})
			return nil
		},
	}
	metricsAddr := servicetest.FreeAddr(t)
	svc := startService(t, spec, zktest.Servers(t), "-metrics-listen", metricsAddr)
	conn := servicetest.Dial(t, svc.addr)
	servicetest.WaitHealth(t, conn, healthpb.HealthCheckResponse_SERVING, 30*time.Second)
	if !sessionGaugeIsOne(t, metricsAddr) {
		t.Error("metrics do not show ingestq_zookeeper_session_connected 1")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ingestqv1.NewPingServiceClient(conn).Ping(ctx, &ingestqv1.PingRequest{Message: "hi"})
	if err != nil || resp.GetService() != "teststage" {
		t.Errorf("Ping: %v, %v; want an answer from teststage", resp, err)
	}
	services := servicetest.ListServices(t, conn)
	for _, want := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection", "ingestq.v1.PingService"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, lacks %s", services, want)
		}
	}

	svc.stop()
	select {
	case <-svc.done:
		if svc.err != nil {
			t.Errorf("run after cancel: %v, want a clean stop", svc.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run still going 15s after cancel")
	}
	select {
	case <-drained:
	default:
		t.Error("the drain hook did not run")
	}
}

// sessionGaugeIsOne scrapes /metrics for the ZooKeeper session gauge.
func sessionGaugeIsOne(t *testing.T, addr string) bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		// The gauge has no label: no otel_scope_* ones either.
		if line == "ingestq_zookeeper_session_connected 1\n" {
			return true
		}
	}
	return false
}

func TestHealthFollowsTheZooKeeperSession(t *testing.T) {
	zk, err := zktest.Start(context.Background(), t.TempDir(), zktest.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zk.Stop)
	svc := startService(t, Spec{Name: "teststage", Defaults: testDefaults}, []string{zk.Addr}, "-zk-session-timeout", "1s")
	conn := servicetest.Dial(t, svc.addr)
	servicetest.WaitHealth(t, conn, healthpb.HealthCheckResponse_SERVING, 30*time.Second)

	zk.Kill()
	servicetest.WaitHealth(t, conn, healthpb.HealthCheckResponse_NOT_SERVING, 15*time.Second)
	// The container probe sees what the health service says.
	var out bytes.Buffer
	err = run(context.Background(), Spec{Name: "teststage", Defaults: testDefaults},
		[]string{"-check-health", "-listen", svc.addr}, noEnv, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "NOT_SERVING, want SERVING") || out.String() != svc.addr+" NOT_SERVING\n" {
		t.Errorf("-check-health without ZooKeeper: %v, printed %q; want NOT_SERVING and an error", err, out.String())
	}

	if err := zk.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	servicetest.WaitHealth(t, conn, healthpb.HealthCheckResponse_SERVING, 30*time.Second)
}

func TestStartupErrorsStopTheService(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"bad flag value", []string{"-drain-timeout", "ten"}, "-drain-timeout"},
		{"unknown flag", []string{"-no-such-flag"}, "no-such-flag"},
		{"ZooKeeper not answering", []string{"-zk-servers", servicetest.FreeAddr(t)}, "waiting for a ZooKeeper session"},
		{"metrics port taken", []string{"-zk-servers", strings.Join(zktest.Servers(t), ","),
			"-zk-root", zktest.Root(t), "-metrics-listen", taken.Addr().String()}, "listening for /metrics"},
		{"gRPC port taken", []string{"-zk-servers", strings.Join(zktest.Servers(t), ","),
			"-zk-root", zktest.Root(t), "-metrics-listen", "", "-listen", taken.Addr().String()}, "listening for gRPC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := run(ctx, Spec{Name: "teststage", Defaults: testDefaults}, tt.args, noEnv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("run: %v, want an error mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestPrintEnvTableListsCommonAndServiceVariables(t *testing.T) {
	spec := Spec{
		Name:     "teststage",
		Defaults: config.Defaults{Listen: "127.0.0.1:7401", MetricsListen: "127.0.0.1:9401"},
		Config: func(r *config.Registry) {
			r.String("work-root", "INGESTQ_WORK_ROOT", "/var/lib/ingestq/work", "where payloads are downloaded")
		},
	}
	var out bytes.Buffer
	// No ZooKeeper is given: printing the table must not need one.
	if err := run(context.Background(), spec, []string{"-print-env-table"}, noEnv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| `INGESTQ_LISTEN` | `-listen` | `127.0.0.1:7401` |",
		"| `INGESTQ_ZK_SERVERS` |", "| `INGESTQ_WORK_ROOT` | `-work-root` | `/var/lib/ingestq/work` |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
