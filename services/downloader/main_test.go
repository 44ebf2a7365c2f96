package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "downloader")
}

func TestBinaryDownloadsAJobAndMovesItToProcessing(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	work := t.TempDir()
	q := connect(t, root)
	content := []byte("a file the binary fetches")
	d.put("a.txt", content)
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{declared(d.URL+"/files/a.txt", "a.txt", content)}})
	runBinary(t, "downloader", root, "INGESTQ_WORK_ROOT="+work)
	j := settled(t, q, jids[0], queue.Processing)
	if got, err := os.ReadFile(filepath.Join(dirs[0], producerDir, "a.txt")); err != nil || string(got) != string(content) {
		t.Errorf("producer/a.txt: %q, %v", got, err)
	}
	if j.GetSpaceNeeded() != int64(len(content)) {
		t.Errorf("space_needed %d", j.GetSpaceNeeded())
	}
}

// runBinary builds the service in the current directory and runs it on the
// test ZooKeeper under root with extra environment, until the test ends
// (then it is stopped with SIGTERM and must exit 0).
func runBinary(t *testing.T, name, root string, env ...string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := servicetest.FreeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(),
		"INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","),
		"INGESTQ_ZK_ROOT="+root,
		"INGESTQ_LISTEN="+addr,
		"INGESTQ_METRICS_LISTEN=",
		"INGESTQ_DRAIN_TIMEOUT=5s",
	), env...)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s exit after SIGTERM: %v", name, err)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("%s still running 20s after SIGTERM", name)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, logs)
		}
	})
	servicetest.WaitHealth(t, servicetest.Dial(t, addr), healthpb.HealthCheckResponse_SERVING, 30*time.Second)
}
