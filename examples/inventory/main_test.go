package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const token = "inventory-example-token"

// recorder builds and runs the real recorder with its built-in recorder
// off, serving the local store at storeRoot over HTTP.
func recorder(t *testing.T, zkRoot, storeRoot string) string {
	t.Helper()
	bin := servicetest.Build(t, filepath.Join("..", "..", "services", "recorder"))
	return servicetest.Start(t, bin, zkRoot, "INGESTQ_RECORDER_BUILTIN=false", "INGESTQ_ADMIN_TOKEN="+token,
		"INGESTQ_STORE_ROOT="+storeRoot, "INGESTQ_VERSIONS_LISTEN="+servicetest.FreeAddr(t)).Addr
}

// recordingJob puts a job in Recording whose version manifest is at manifest.
func recordingJob(t *testing.T, q *session.Session, manifest string) string {
	t.Helper()
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"},
		Configuration: &v1.JobConfiguration{ProfileName: "demo_profile", Collection: "demo"}, Metadata: &v1.Metadata{What: "Hello"}}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: checkm.FileURL(manifest), Mode: "add", Version: 1}})
	return jid
}

func TestTheExampleRecordsAVersionAndCompletesItsLease(t *testing.T) {
	zkRoot := zktest.Root(t)
	storeRoot := t.TempDir()
	addr := recorder(t, zkRoot, storeRoot)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := queuetest.Connect(t, zkRoot)

	manifest := filepath.Join(storeRoot, "ark_99999_fk4x", "v1", "manifest.checkm")
	os.MkdirAll(filepath.Dir(manifest), 0o755)
	f, _ := os.Create(manifest)
	err := checkm.Write(f, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: "file:///store/v1/producer/a.txt", HashAlgorithm: "sha256",
		HashValue: strings.Repeat("ab", 32), FileSize: 7, FileName: "producer/a.txt"},
		{FileURL: "file:///store/v1/producer/b%7Cc.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("cd", 32), FileSize: 3, FileName: "producer/b|c.txt"}})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	good := recordingJob(t, q, manifest)
	var out bytes.Buffer
	if err := run(ctx, addr, token, true, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded:\n%s", out.String())
	if want := "ark:/99999/fk4x version 1 (demo, demo_profile, \"Hello\"): 2 files, 10 bytes\n" +
		"ark:/99999/fk4x add producer/a.txt 7 sha256:" + strings.Repeat("ab", 32) + "\n" +
		"ark:/99999/fk4x add producer/b|c.txt 3 sha256:" + strings.Repeat("cd", 32) + "\n"; out.String() != want {
		t.Errorf("recorded %q, want %q", out.String(), want)
	}
	if st, _ := jobs.NewReader(q).JobStatus(ctx, good); st.GetStatus() != queue.Notify {
		t.Errorf("job %s, want Notify", queue.JobStateName(st.GetStatus()))
	}

	bad := recordingJob(t, q, filepath.Join(storeRoot, "ark_99999_fk4x", "v2", "manifest.checkm"))
	if err := run(ctx, addr, token, true, &out); err != nil {
		t.Fatal(err)
	}
	if st, _ := jobs.NewReader(q).JobStatus(ctx, bad); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "inventory: the lease gives no fetch_url") {
		t.Errorf("job with a missing manifest: %v", st)
	}
}
