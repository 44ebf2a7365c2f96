package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/notifier/internal/jobtest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// examplesProfiles is the sample profile directory the repository ships.
func examplesProfiles(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "profiles"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_PROFILES_DIR", examplesProfiles(t))
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "notifier")
}

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

func TestBuiltNotifierCallsBackAndCompletesTheJob(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "notifier")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got := make(chan map[string]any, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		data, _ := io.ReadAll(r.Body)
		json.Unmarshal(data, &body)
		got <- body
	}))
	defer rcv.Close()
	profiles := t.TempDir()
	os.WriteFile(filepath.Join(profiles, "demo.yaml"), []byte("name: demo\ncollection: demo\ncallback_url: "+rcv.URL+"/done\n"), 0o644)

	zkRoot, workRoot, addr := zktest.Root(t), t.TempDir(), servicetest.FreeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","),
		"INGESTQ_ZK_ROOT="+zkRoot,
		"INGESTQ_LISTEN="+addr,
		"INGESTQ_METRICS_LISTEN=",
		"INGESTQ_PROFILES_DIR="+profiles,
		"INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_DRAIN_TIMEOUT=5s",
	)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("exit after SIGTERM: %v", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Error("still running 15s after SIGTERM")
		}
		if t.Failed() {
			t.Logf("notifier output:\n%s", logs)
		}
	}()
	servicetest.WaitHealth(t, servicetest.Dial(t, addr), healthpb.HealthCheckResponse_SERVING, 30*time.Second)

	q := jobtest.Connect(t, zkRoot)
	wd := filepath.Join(workRoot, "bid0000000001", "jid0000000001")
	os.MkdirAll(filepath.Join(wd, "producer"), 0o755)
	jid := jobtest.Spawn(t, q, queue.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: "demo", WorkingDir: wd},
		Identifiers:   &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"},
	}, queue.Notify)
	select {
	case body := <-got:
		if body["jid"] != jid || body["ark"] != "ark:/99999/fk4x" || body["status"] != "completed" {
			t.Errorf("callback body %v", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no callback within 30s")
	}
	jobtest.Eventually(t, "the job is Completed", func() bool { return jobtest.Status(t, q, jid).GetStatus() == queue.Completed })
	if _, err := os.Stat(wd); !os.IsNotExist(err) {
		t.Errorf("working folder still there: %v", err)
	}
}
