package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/inventory"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_INVENTORY_DB", filepath.Join(t.TempDir(), "inventory.db"))
	servicetest.CheckBinary(t, "recorder")
}

// TestBinaryRefusesAStorageURLWithoutItsPortSayingWhy: Merritt's inventory
// service rebuilds the storage service's address from the manifest URLs
// as protocol://host:port, so the recorder, which reads those manifests,
// refuses a storage URL that leaves its port out.
func TestBinaryRefusesAStorageURLWithoutItsPortSayingWhy(t *testing.T) {
	bin := servicetest.Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","), "INGESTQ_ZK_ROOT="+zktest.Root(t),
		"INGESTQ_LISTEN="+servicetest.FreeAddr(t), "INGESTQ_METRICS_LISTEN=", "INGESTQ_INVENTORY_DB="+filepath.Join(t.TempDir(), "inventory.db"),
		"INGESTQ_MERRITT_STORAGE_URL=http://store.example.org/store")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "INGESTQ_MERRITT_STORAGE_URL") || !strings.Contains(string(out), "names no port") {
		t.Errorf("exit %v, output:\n%s\nwant a refusal of the URL without its port", err, out)
	}
}

// recordingJob puts a job in Recording whose stored version manifest lists
// one file.
func recordingJob(t *testing.T, q *session.Session) string {
	t.Helper()
	return recordingJobIn(t, q, t.TempDir())
}

// recordingJobIn is recordingJob with the version in the local store at root.
func recordingJobIn(t *testing.T, q *session.Session, root string) string {
	t.Helper()
	dir := filepath.Join(root, "ark_99999_fk4x", "v1")
	os.MkdirAll(dir, 0o755)
	p := filepath.Join(dir, "manifest.checkm")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	err = checkm.Write(f, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: checkm.FileURL(filepath.Join(dir, "producer", "a.txt")),
		HashAlgorithm: "sha256", HashValue: strings.Repeat("0", 64), FileSize: 1, FileName: "producer/a.txt"}})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"}}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording,
		Store:     &v1.Store{ManifestUrl: checkm.FileURL(p), Mode: "add", Version: 1},
		Inventory: &v1.Inventory{ManifestUrl: checkm.FileURL(p), Mode: "add", Version: 1}})
	return jid
}

func TestBuiltRecorderRecordsIntoItsInventory(t *testing.T) {
	zkRoot := zktest.Root(t)
	dbPath := filepath.Join(t.TempDir(), "inventory.db")
	servicetest.Start(t, servicetest.Build(t, "."), zkRoot, "INGESTQ_INVENTORY_DB="+dbPath)
	q := queuetest.Connect(t, zkRoot)
	jid := recordingJob(t, q)
	queuetest.Eventually(t, "the job reaches Notify", func() bool { return queuetest.Status(t, q, jid).GetStatus() == queue.Notify })
	dsn, err := inventory.DSN(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM files f JOIN versions v ON v.ark = f.ark AND v.number = f.version
		WHERE v.jid = ? AND v.number = 1 AND f.name = 'producer/a.txt'`, jid).Scan(&n); err != nil || n != 1 {
		t.Errorf("inventory rows for %s: %d, %v", jid, n, err)
	}
}

func TestBuiltRecorderLeasesToAnExternalInventory(t *testing.T) {
	zkRoot := zktest.Root(t)
	const token = "inventory-team-token"
	p := servicetest.Start(t, servicetest.Build(t, "."), zkRoot, "INGESTQ_RECORDER_BUILTIN=false", "INGESTQ_ADMIN_TOKEN="+token)
	conn := servicetest.Dial(t, p.Addr)
	for _, name := range []string{"ingestq.v1.RecordingService", "ingestq.v1.StageService"} {
		if !slices.Contains(servicetest.ListServices(t, conn), name) {
			t.Fatalf("%s is not served", name)
		}
	}
	q := queuetest.Connect(t, zkRoot)
	jid := recordingJob(t, q)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	c := v1.NewRecordingServiceClient(conn)
	l, err := c.Lease(ctx, &v1.LeaseRequest{Wait: durationpb.New(10 * time.Second)})
	if err != nil || l.GetJobId() != jid {
		t.Fatalf("Lease = %v, %v; want %s (the built-in recorder is off)", l, err, jid)
	}
	// The worker registry shows the lease as the recorder's job in flight.
	queuetest.Eventually(t, "the registry shows the lease", func() bool {
		workers, err := admin.New(q).Queue.ListWorkers(context.Background())
		for _, w := range workers {
			if w.GetService() == "recorder" && w.GetStage() == "Recording" && len(w.GetInFlight()) == 1 && w.GetInFlight()[0].GetJobId() == jid {
				return err == nil
			}
		}
		return false
	})
	// Its entry gives the address of its StageService, where the console
	// pauses, resumes and drains it as any stage replica.
	workers, err := admin.New(q).Queue.ListWorkers(context.Background())
	for _, w := range workers {
		if w.GetService() == "recorder" && (w.GetAddress() != p.Addr || w.GetConcurrency() != 0) {
			t.Errorf("the recorder's entry has address %q and concurrency %d, want %s and 0 (no built-in recorder)", w.GetAddress(), w.GetConcurrency(), p.Addr)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	// So does the replica's StageService.
	st, err := v1.NewStageServiceClient(conn).GetStatus(ctx, &v1.GetStatusRequest{})
	if ws := st.GetWorkers(); err != nil || len(ws) != 1 || len(ws[0].GetInFlight()) != 1 || ws[0].GetInFlight()[0].GetJobId() != jid {
		t.Errorf("StageService.GetStatus = %v, %v; want the recorder with lease %s in flight", st, err, jid)
	}
	if _, err := c.Complete(ctx, &v1.CompleteRequest{LeaseId: l.GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	if st := queuetest.Status(t, q, jid); st.GetStatus() != queue.Notify {
		t.Errorf("job %s, want Notify", queue.JobStateName(st.GetStatus()))
	}
}

// TestBuiltRecorderServesVersionsOnLoopbackWithoutAToken: without an admin
// token the recorder serves the local store's versions on a loopback
// address (as make up runs it), and a lease's fetch_url there answers
// without a token; on an address other hosts reach it refuses to start,
// saying why.
func TestBuiltRecorderServesVersionsOnLoopbackWithoutAToken(t *testing.T) {
	bin := servicetest.Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused := exec.CommandContext(ctx, bin)
	refused.Env = append(os.Environ(), "INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","), "INGESTQ_ZK_ROOT="+zktest.Root(t),
		"INGESTQ_LISTEN="+servicetest.FreeAddr(t), "INGESTQ_METRICS_LISTEN=", "INGESTQ_RECORDER_BUILTIN=false",
		"INGESTQ_VERSIONS_LISTEN=0.0.0.0:0")
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "INGESTQ_VERSIONS_LISTEN 0.0.0.0:0 needs INGESTQ_ADMIN_TOKEN") {
		t.Errorf("serving versions to other hosts without a token: exit %v, output:\n%s", err, out)
	}

	zkRoot, store := zktest.Root(t), t.TempDir()
	versions := servicetest.FreeAddr(t)
	p := servicetest.Start(t, bin, zkRoot, "INGESTQ_RECORDER_BUILTIN=false", "INGESTQ_STORE_ROOT="+store, "INGESTQ_VERSIONS_LISTEN="+versions)
	jid := recordingJobIn(t, queuetest.Connect(t, zkRoot), store)
	c := v1.NewRecordingServiceClient(servicetest.Dial(t, p.Addr))
	l, err := c.Lease(ctx, &v1.LeaseRequest{Wait: durationpb.New(10 * time.Second)})
	if err != nil || l.GetJobId() != jid {
		t.Fatalf("Lease = %v, %v; want %s", l, err, jid)
	}
	defer func() {
		if _, err := c.Complete(ctx, &v1.CompleteRequest{LeaseId: l.GetLeaseId()}); err != nil {
			t.Errorf("completing the lease: %v", err)
		}
	}()
	if want := "http://" + versions + "/versions/ark_99999_fk4x/v1/manifest.checkm"; l.GetFetchUrl() != want {
		t.Errorf("fetch_url %q, want %q", l.GetFetchUrl(), want)
	}
	resp, err := http.Get(l.GetFetchUrl())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "#%checkm") {
		t.Errorf("GET fetch_url without a token: %s %q", resp.Status, body)
	}
}
