package program

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var testDefaults = config.Defaults{Listen: "127.0.0.1:7499", MetricsListen: ""}

func noEnv(string) (string, bool) { return "", false }

// running is a program run in the background.
type running struct {
	addr string
	stop context.CancelFunc
	done chan struct{} // closed when Run returned err
	err  error
}

// startProgram runs spec with extra command-line args on a free port.
func startProgram(t *testing.T, spec Spec, args ...string) *running {
	t.Helper()
	r := &running{addr: servicetest.FreeAddr(t), done: make(chan struct{})}
	args = append([]string{"-listen", r.addr}, args...)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		r.err = Run(ctx, spec, args, noEnv, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// TestAProgramServesWithoutZooKeeperAndStopsInOrder: a program of this
// package needs no ZooKeeper (none is given): it serves health SERVING,
// PingService and reflection; on cancel its drain hooks run, then what
// AfterStop registered, last first, after Setup's context ended.
func TestAProgramServesWithoutZooKeeperAndStopsInOrder(t *testing.T) {
	var order []string
	spec := Spec{
		Name:     "testprogram",
		Defaults: testDefaults,
		Setup: func(ctx context.Context, env *Env) error {
			env.Server.OnShutdown(func(context.Context) error {
				order = append(order, "drain")
				return nil
			})
			env.AfterStop(func() { order = append(order, "first registered") })
			env.AfterStop(func() {
				if ctx.Err() == nil {
					order = append(order, "Setup's context still open")
				}
				order = append(order, "last registered")
			})
			return nil
		},
	}
	p := startProgram(t, spec)
	waitListening(t, p)
	conn := servicetest.Dial(t, p.addr)
	servicetest.WaitHealth(t, conn, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ingestqv1.NewPingServiceClient(conn).Ping(ctx, &ingestqv1.PingRequest{Message: "hi"})
	if err != nil || resp.GetService() != "testprogram" {
		t.Errorf("Ping: %v, %v; want an answer from testprogram", resp, err)
	}
	if services := servicetest.ListServices(t, conn); !slices.Contains(services, "ingestq.v1.PingService") {
		t.Errorf("reflection lists %v", services)
	}
	p.stop()
	<-p.done
	if p.err != nil {
		t.Errorf("Run after cancel: %v, want a clean stop", p.err)
	}
	if got := strings.Join(order, ", "); got != "drain, last registered, first registered" {
		t.Errorf("stopped in the order %q", got)
	}
}

// TestAProgramReadsNoQueueSettings: the settings table of a program lists
// the common settings and its own, none of the queue's.
func TestAProgramReadsNoQueueSettings(t *testing.T) {
	spec := Spec{Name: "testprogram", Defaults: testDefaults, Config: func(r *config.Registry, _ *config.Common) {
		r.String("batcher-addr", "INGESTQ_BATCHER_ADDR", "127.0.0.1:7401", "the batcher")
	}}
	var out bytes.Buffer
	if err := Run(context.Background(), spec, []string{"-print-env-table"}, noEnv, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`INGESTQ_LISTEN`", "`INGESTQ_ADMIN_TOKEN`", "`INGESTQ_BATCHER_ADDR`"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %s:\n%s", want, out.String())
		}
	}
	for _, unwanted := range []string{"INGESTQ_ZK_", "INGESTQ_CONCURRENCY", "INGESTQ_ADVERTISE_ADDR"} {
		if strings.Contains(out.String(), unwanted) {
			t.Errorf("table lists %s:\n%s", unwanted, out.String())
		}
	}
}

// TestAFailedSetupStopsTheProgramAndClosesWhatItOpened: an error of Setup
// is Run's, naming the program, and what Setup registered with AfterStop
// runs all the same.
func TestAFailedSetupStopsTheProgramAndClosesWhatItOpened(t *testing.T) {
	closed := false
	spec := Spec{Name: "testprogram", Defaults: testDefaults, Setup: func(_ context.Context, env *Env) error {
		env.AfterStop(func() { closed = true })
		return errors.New("no way")
	}}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	err = Run(context.Background(), spec, []string{"-listen", taken.Addr().String()}, noEnv, io.Discard, io.Discard)
	if err == nil || err.Error() != "setting up testprogram: no way" || !closed {
		t.Errorf("Run: %v, closed %t; want the setup's error and its AfterStop run", err, closed)
	}
}
