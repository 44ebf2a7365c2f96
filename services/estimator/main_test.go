package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	servicetest.CheckBinary(t, "estimator")
}

func TestBinaryTakesAJobFromPendingToProvisioning(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	q := connect(t, root)
	url := d.putManifest(t, "object.checkm", checkm.ProfileObject, checkm.Entry{FileURL: d.URL + "/sized/1234", FileSize: -1, FileName: "a.bin"})
	jid := createJobs(t, q, queue.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}})[0]
	runBinary(t, "estimator", root)
	job := settled(t, q, jid, queue.Provisioning)
	if job.GetSpaceNeeded() != 1234 || job.GetStatus().GetLastSuccessfulStatus() != queue.Estimating {
		t.Errorf("job after the estimator: space_needed %d, status %v", job.GetSpaceNeeded(), job.GetStatus())
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
