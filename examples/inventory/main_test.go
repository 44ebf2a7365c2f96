package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const token = "inventory-example-token"

// recorder builds and runs the real recorder with its built-in recorder off.
func recorder(t *testing.T, zkRoot string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "recorder")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "..", "services", "recorder")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := servicetest.FreeAddr(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","), "INGESTQ_ZK_ROOT="+zkRoot,
		"INGESTQ_LISTEN="+addr, "INGESTQ_METRICS_LISTEN=", "INGESTQ_RECORDER_BUILTIN=false", "INGESTQ_ADMIN_TOKEN="+token)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("recorder output:\n%s", logs.String())
		}
	})
	servicetest.WaitHealth(t, servicetest.Dial(t, addr), healthpb.HealthCheckResponse_SERVING, 30*time.Second)
	return addr
}

// recordingJob puts a job in Recording whose version manifest is at manifest.
func recordingJob(t *testing.T, q *queue.Client, manifest string) string {
	t.Helper()
	ctx := context.Background()
	bid, err := q.CreateBatch(ctx, &v1.Submission{ProfileName: "demo", Submitter: "test", PayloadUrl: "http://127.0.0.1:1/x",
		Type: v1.PayloadType_PAYLOAD_TYPE_FILE})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := q.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, queue.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	jids, err := bc.CreateJobs(ctx, []queue.NewJob{{Configuration: &v1.JobConfiguration{ProfileName: "demo", BatchId: bid},
		Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"}}})
	if err != nil {
		t.Fatal(err)
	}
	bc.FinishSpawning(ctx)
	for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Recording} {
		cl, err := q.ClaimJob(ctx, jids[0])
		if err != nil {
			t.Fatal(err)
		}
		ch := queue.Change{To: s}
		if s == queue.Recording {
			ch.Inventory = &v1.Inventory{ManifestUrl: "file://" + manifest, Mode: "add"}
		}
		if err := cl.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	return jids[0]
}

func TestTheExampleRecordsAVersionAndCompletesItsLease(t *testing.T) {
	zkRoot := zktest.Root(t)
	addr := recorder(t, zkRoot)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := queue.Connect(ctx, queue.Options{Servers: zktest.Servers(t), Root: zkRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	manifest := filepath.Join(t.TempDir(), "manifest.checkm")
	f, _ := os.Create(manifest)
	err = checkm.Write(f, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: "file:///store/v1/producer/a.txt", HashAlgorithm: "sha256",
		HashValue: strings.Repeat("ab", 32), FileSize: 7, FileName: "producer/a.txt"}})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	good := recordingJob(t, q, manifest)
	var out bytes.Buffer
	if err := run(ctx, addr, token, true, &out); err != nil {
		t.Fatal(err)
	}
	if want := "ark:/99999/fk4x add producer/a.txt 7 sha256:" + strings.Repeat("ab", 32) + "\n"; out.String() != want {
		t.Errorf("recorded %q, want %q", out.String(), want)
	}
	if st, _ := q.JobStatus(ctx, good); st.GetStatus() != queue.Notify {
		t.Errorf("job %s, want Notify", queue.JobStateName(st.GetStatus()))
	}

	bad := recordingJob(t, q, filepath.Join(t.TempDir(), "missing.checkm"))
	if err := run(ctx, addr, token, true, &out); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.JobStatus(ctx, bad); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "inventory: open ") {
		t.Errorf("job with a missing manifest: %v", st)
	}
}
