package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_PROFILES_DIR", servicetest.ExampleProfiles(t))
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	t.Setenv("INGESTQ_STORE_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "processor")
}

func TestBuiltProcessorStoresAJobAndHandsItToRecording(t *testing.T) {
	bin := servicetest.Build(t, ".")
	zkRoot := zktest.Root(t)
	workRoot, storeRoot := t.TempDir(), t.TempDir()
	servicetest.Start(t, bin, zkRoot, "INGESTQ_PROFILES_DIR="+servicetest.ExampleProfiles(t), "INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_STORE_ROOT="+storeRoot, "INGESTQ_MINT_SHOULDER=ark:/99999/fk5")

	q := queuetest.Connect(t, zkRoot)
	wd := filepath.Join(workRoot, "bid0000000001", "jid0000000001")
	if err := os.MkdirAll(filepath.Join(wd, "producer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "producer", "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	jid := queuetest.Spawn(t, q, queue.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: "demo", Collection: "demo", WorkingDir: wd,
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE},
		Identifiers: &v1.Identifiers{LocalId: []string{"hello-1"}},
		Metadata:    &v1.Metadata{Who: "Doe, Jane", What: "Hello", When: "2026"},
		Manifest:    &v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://127.0.0.1:1/hello.txt", Name: "hello.txt", Size: 5}}},
	}, queue.Processing)
	var job *v1.Job
	queuetest.Eventually(t, "the job reaches Recording", func() bool {
		var err error
		job, err = q.GetJob(context.Background(), jid)
		return err == nil && job.GetStatus().GetStatus() != queue.Processing
	})
	if job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job %s %q, want Recording", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if !strings.HasPrefix(ark, "ark:/99999/fk5") {
		t.Errorf("ARK %q is not on the configured shoulder", ark)
	}
	want := "file://" + filepath.Join(storeRoot, queue.LockName(ark), "v1", "manifest.checkm")
	if job.GetInventory().GetManifestUrl() != want || job.GetInventory().GetVersion() != 1 {
		t.Errorf("inventory %v, want version 1 at %q", job.GetInventory(), want)
	}
	stored, err := os.ReadFile(filepath.Join(storeRoot, queue.LockName(ark), "v1", "producer", "hello.txt"))
	if err != nil || string(stored) != "hello" {
		t.Errorf("stored file: %q, %v", stored, err)
	}
	// The sample profile's owner binds the local id.
	if bound, err := q.LookupLocalID(context.Background(), "ark:/99999/fk4owner", "hello-1"); err != nil || bound != ark {
		t.Errorf("hello-1 bound to %q (%v), want %s", bound, err, ark)
	}
}
