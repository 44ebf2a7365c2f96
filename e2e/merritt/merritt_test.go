// Package merritt tests ingestq beside Merritt's programs on one queue:
// storing handed over to Merritt's storage consumer, recording to its
// inventory service, and a running Merritt site switched from Merritt's
// ingest service to ingestq as docs/merritt.md says, against a stand-in for
// Merritt's storage service (shared/merritttest) and Merritt's consumers
// played through merrittzk (site_test.go); and ingestq storing into the
// service itself as it really fails (store_test.go).
package merritt

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// node is the storage node of the site.
const node = 9501

// queueFolder is where the depositor's server plays Merritt's ingest
// service's queue folder.
const queueFolder = "ingestqueue"

// site is what a test runs beside the stack: the binaries, profiles,
// deposits served by a depositor, and the stand-in storage service.
type site struct {
	dir, bin, profiles, depDir string
	dep                        *depositor.Server
	storage                    *merritttest.Service
}

func newSite(t *testing.T) *site {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := &site{dir: t.TempDir()}
	s.bin = filepath.Join(s.dir, "bin")
	if err := stack.Build(ctx, filepath.Join("..", ".."), s.bin); err != nil {
		t.Fatal(err)
	}
	s.profiles = filepath.Join(s.dir, "profiles")
	if err := os.MkdirAll(s.profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.profiles, "demo.yaml"),
		[]byte("name: demo\ncollection: demo\nowner: ark:/99999/fk4owner\nnotification_addresses: [depositor@example.org]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.depDir = filepath.Join(s.dir, "deposits")
	if err := os.CopyFS(s.depDir, os.DirFS(filepath.Join("..", "..", "examples", "demo"))); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.dep, err = depositor.Start(s.depDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.dep.Close() })
	s.storage = merritttest.Start(t, node)
	return s
}

// start starts ingestq's seven services with env beside the stack's own
// settings, on the ZooKeeper servers given (none: one of the stack's).
func (s *site) start(t *testing.T, servers []string, root string, env map[string]string) *stack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := stack.Start(ctx, stack.Options{Dir: filepath.Join(s.dir, "stack"), BinDir: s.bin, ProfilesDir: s.profiles,
		ZooKeeper: servers, Root: root, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := st.Stop(ctx); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
		if t.Failed() {
			t.Logf("the stack's logs are in %s", st.LogDir)
		}
	})
	return st
}

// merrittEnv is ingestq's settings for the site's storage node, storing
// handed over to Merritt's storage consumer.
func (s *site) merrittEnv() map[string]string {
	return map[string]string{"INGESTQ_STORING": "false", "INGESTQ_MERRITT_STORAGE_URL": s.storage.URL,
		"INGESTQ_MERRITT_NODE": strconv.Itoa(node), "INGESTQ_MERRITT_QUEUE_URL": s.dep.URL + "/" + queueFolder}
}

// waitBatch waits for a batch to reach one of states.
func waitBatch(t *testing.T, q *session.Session, bid string, states ...queue.BatchState) *v1.Batch {
	t.Helper()
	var b *v1.Batch
	waittest.Until(t, 4*time.Minute, func() error {
		var err error
		if b, err = batches.New(q).GetBatch(context.Background(), bid); err != nil || !slices.Contains(states, b.GetStatus().GetStatus()) {
			return fmt.Errorf("batch %s never reached %v: %v (%v)", bid, states, b.GetStatus(), err)
		}
		return nil
	})
	return b
}

// batchJobs reads every job of a batch.
func batchJobs(t *testing.T, q *session.Session, bid string) []*v1.Job {
	t.Helper()
	ids, err := jobs.NewReader(q).BatchJobIDs(context.Background(), bid)
	if err != nil {
		t.Fatal(err)
	}
	var out []*v1.Job
	for _, folder := range ids {
		for _, jid := range folder {
			j, err := jobs.NewReader(q).GetJob(context.Background(), jid)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, j)
		}
	}
	return out
}

// completedOnce is how many times a job's history says it was Completed.
func completedOnce(j *v1.Job) bool {
	n := 0
	for _, h := range j.GetStatus().GetHistory() {
		if h.GetTo() == queue.Completed {
			n++
		}
	}
	return n == 1 && j.GetStatus().GetStatus() == queue.Completed
}

// TestStoringHandedOverMerrittsStorageConsumerStoresEveryJobAndIngestqRecordsIt:
// the processor leaves each processed job in Storing with the store node
// Merritt's storage consumer reads, the consumer stores it from the
// versions the processor serves and moves it on, and ingestq's recorder
// records the version the job's ingest record names.
func TestStoringHandedOverMerrittsStorageConsumerStoresEveryJobAndIngestqRecordsIt(t *testing.T) {
	s := newSite(t)
	st := s.start(t, nil, "", s.merrittEnv())
	q, err := session.Connect(context.Background(), session.Options{Servers: st.Servers, Root: st.Root})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	peer := merrittzk.Connect(t, st.Servers, st.Root)
	sc := &storeConsumer{peer: peer, storage: s.storage.URL, lockRetry: 100 * time.Millisecond}
	run(t, "Merritt's storage consumer", sc.step)

	conn, err := grpc.NewClient(st.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := v1.NewBatchServiceClient(conn).Submit(context.Background(), &v1.SubmitRequest{Submitter: "e2e", Profile: "demo",
		PayloadUrl: s.dep.URL + "/batch.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
	if err != nil {
		t.Fatal(err)
	}
	sub := resp.GetBatchId()
	b := waitBatch(t, q, sub, queue.BatchCompleted, queue.BatchFailed)
	js := batchJobs(t, q, sub)
	db, err := sql.Open("sqlite", st.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	completed := 0
	for _, j := range js {
		if j.GetStatus().GetStatus() != queue.Completed {
			continue
		}
		completed++
		ark := j.GetIdentifiers().GetPrimaryId()
		if !completedOnce(j) || sc.stored.get(j.GetId()) != 1 || s.storage.Versions(node, ark) != 1 {
			t.Errorf("%s: completed once %v, stored by Merritt's consumer %d times, %d versions of %s", j.GetId(), completedOnce(j),
				sc.stored.get(j.GetId()), s.storage.Versions(node, ark), ark)
		}
		if got, err := merrittstore.ObjectFromManifestURL(j.GetInventory().GetManifestUrl()); err != nil || got != ark {
			t.Errorf("%s: the inventory node %q gives %q (%v), not %s", j.GetId(), j.GetInventory().GetManifestUrl(), got, err, ark)
		}
		var number, files int
		if err := db.QueryRow(`SELECT number FROM versions WHERE ark = ? AND jid = ?`, ark, j.GetId()).Scan(&number); err != nil || number != 1 {
			t.Errorf("%s: recorded version %d (%v), want 1", j.GetId(), number, err)
		}
		if err := db.QueryRow(`SELECT count(*) FROM files WHERE ark = ? AND version = 1`, ark).Scan(&files); err != nil || files != len(s.storage.Files(node, ark, 1)) {
			t.Errorf("%s: %d files recorded (%v), the service holds %d", j.GetId(), files, err, len(s.storage.Files(node, ark, 1)))
		}
	}
	if completed != 3 || b.GetStatus().GetStatus() != queue.BatchFailed {
		t.Errorf("%d jobs completed and the batch %s, want 3 and Failed (the demo's one bad object)", completed, queue.BatchStateName(b.GetStatus().GetStatus()))
	}
}

// TestASiteSwitchesFromMerrittsIngestToIngestqWithNothingLost follows
// docs/merritt.md's switch-over on a queue holding Merritt's work in every
// job state: Merritt's ingest service's batch consumer stops first; its
// job and report consumers drain what it made while the storage and
// inventory services go on; then they stop and ingestq's services start
// with Storing and Recording left to Merritt's. A submission made through
// Merritt's ingest service meanwhile is ingested by ingestq. Every job
// ends Completed once, each object stored once.
func TestASiteSwitchesFromMerrittsIngestToIngestqWithNothingLost(t *testing.T) {
	s := newSite(t)
	zk, err := zktest.Start(context.Background(), filepath.Join(s.dir, "zookeeper"), zktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zk.Stop)
	const root = "/merritt-site"
	servers := []string{zk.Addr}
	peer := merrittzk.Connect(t, servers, root)
	if err := peer.InitNodes(); err != nil {
		t.Fatal(err)
	}
	in := &ingest{peer: peer, queueDir: filepath.Join(s.depDir, queueFolder), queueURL: s.dep.URL + "/" + queueFolder,
		storage: s.storage.URL, node: node}
	sc := &storeConsumer{peer: peer, storage: s.storage.URL, lockRetry: 100 * time.Millisecond}
	inv := &inventoryConsumer{peer: peer, objects: map[string]objectInfo{}}

	// Merritt's work in every job state: job i of the batch is moved
	// 8-i steps (the job of the lowest id furthest), so that each state's
	// consumer, which takes the lowest id first, moves the right jobs.
	merrittBid, merrittJobs := in.batch(t, "merritt-batch", 9)
	steps := map[string]func(context.Context) (bool, error){"Storing": sc.step, "Recording": inv.step}
	order := []string{"Pending", "Estimating", "Provisioning", "Downloading", "Processing", "Storing", "Recording", "Notify"}
	for r, state := range order {
		step := steps[state]
		if step == nil {
			step = func(context.Context) (bool, error) { return in.stepIn(state) }
		}
		for range 8 - r {
			if did, err := step(context.Background()); err != nil || !did {
				t.Fatalf("moving a job out of %s: %v, %v", state, did, err)
			}
		}
	}
	for i, jid := range merrittJobs {
		j, err := peer.LoadJob(jid)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(order, "Completed")[8-i]; j.State() != want {
			t.Fatalf("%s is %s, want %s", jid, j.State(), want)
		}
	}

	// Merritt's site runs: the ingest service's consumers, the storage
	// service's and the inventory service's.
	stopBatches := run(t, "Merritt's ingest, batch consumer", func(context.Context) (bool, error) {
		b, err := peer.AcquirePendingBatch()
		if err != nil || b == nil {
			return false, err
		}
		return true, b.Unlock() // its jobs would be made here; none come before it stops
	})
	stopJobs := run(t, "Merritt's ingest, job consumers", in.jobStep)
	stopReports := run(t, "Merritt's ingest, batch reporting", in.reportStep)
	run(t, "Merritt's storage consumer", sc.step)
	run(t, "Merritt's inventory consumer", inv.step)

	// 1. Stop Merritt's ingest service's batch consumer: a submission
	// through Merritt's ingest service waits Pending from here on.
	stopBatches()
	uuid := "merritt-submitted-after-the-stop"
	if err := os.MkdirAll(filepath.Join(s.depDir, queueFolder, uuid), 0o755); err != nil {
		t.Fatal(err)
	}
	batchManifest := "#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:primaryIdentifier | mrt:localIdentifier | mrt:creator | mrt:title | mrt:date\n" +
		"{{base}}/letters-1921.checkm | | | | | letters-1921.checkm | | loc-switch-letters | Hale, Margaret | Letters | 1921\n" +
		"{{base}}/map-1880.checkm | | | | | map-1880.checkm | | loc-switch-map | County Survey Office | Map | 1880\n#%eof\n"
	if err := os.WriteFile(filepath.Join(s.depDir, queueFolder, uuid, "batch.checkm"), []byte(batchManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	pending, err := peer.CreateBatch(map[string]any{"batchID": uuid, "profile": "demo", "type": "batchManifest",
		"filename": "batch.checkm", "update": false, "submitter": "merritt/depositor", "submissionDate": time.Now().UTC().Format(time.UnixDate)})
	if err != nil {
		t.Fatal(err)
	}

	// 2. Drain: Merritt's ingest consumers finish every job it made, and
	// report its batch, the storage and inventory services working on.
	waittest.Until(t, 2*time.Minute, func() error {
		b, err := peer.LoadBatch(merrittBid)
		if err != nil {
			t.Fatal(err)
		}
		if b.Status != "Completed" {
			return fmt.Errorf("Merritt's batch %s is %s after the drain's time", merrittBid, b.Status)
		}
		return nil
	})
	// 3. Stop Merritt's ingest service's consumers.
	stopJobs()
	stopReports()
	if b, err := peer.LoadBatch(pending.ID); err != nil || b.Status != "Pending" {
		t.Fatalf("the batch submitted meanwhile: %v, %v; want it Pending", b, err)
	}

	// 4. Start ingestq's services: Merritt's submissions read from its
	// ingest service's queue folder, Storing handed over to Merritt's
	// storage consumer, Recording to its inventory service.
	env := s.merrittEnv()
	env["INGESTQ_RECORDER_BUILTIN"] = "false"
	st := s.start(t, servers, root, env)
	q, err := session.Connect(context.Background(), session.Options{Servers: st.Servers, Root: st.Root})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	// The submission is ingested by ingestq, stored and recorded by
	// Merritt's services.
	b := waitBatch(t, q, pending.ID, queue.BatchCompleted, queue.BatchFailed)
	if b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Errorf("the batch submitted meanwhile ended %s: %q", queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
	ingestqJobs := batchJobs(t, q, pending.ID)
	if len(ingestqJobs) != 2 {
		t.Fatalf("the batch submitted meanwhile has %d jobs, want 2", len(ingestqJobs))
	}
	for _, j := range ingestqJobs {
		ark := j.GetIdentifiers().GetPrimaryId()
		if !completedOnce(j) || sc.stored.get(j.GetId()) != 1 || inv.recorded.get(j.GetId()) != 1 || s.storage.Versions(node, ark) != 1 {
			t.Errorf("ingestq's %s (%s): completed once %v, stored %d times, recorded %d times, %d versions", j.GetId(),
				queue.JobStateName(j.GetStatus().GetStatus()), completedOnce(j), sc.stored.get(j.GetId()), inv.recorded.get(j.GetId()),
				s.storage.Versions(node, ark))
		}
		inv.mu.Lock()
		info := inv.objects[ark]
		inv.mu.Unlock()
		if info.Object.ID != ark || info.Object.Current != 1 {
			t.Errorf("Merritt's inventory recorded %+v for %s", info.Object, ark)
		}
	}
	// Merritt's own jobs, each through every state once.
	for i, jid := range merrittJobs {
		j, err := peer.LoadJob(jid)
		if err != nil {
			t.Fatal(err)
		}
		ark, _ := merrittzk.String(j.Identifiers, "primary_id")
		if j.State() != "Completed" || sc.stored.get(jid) != 1 || inv.recorded.get(jid) != 1 ||
			in.notified.get(jid) != 1 || s.storage.Versions(node, ark) != 1 {
			t.Errorf("Merritt's job %d %s: %s, stored %d, recorded %d, notified %d, %d versions of %s", i, jid, j.State(),
				sc.stored.get(jid), inv.recorded.get(jid), in.notified.get(jid), s.storage.Versions(node, ark), ark)
		}
	}
	if objects := s.storage.Objects(node); len(objects) != len(merrittJobs)+len(ingestqJobs) {
		t.Errorf("the storage node holds %d objects, want %d", len(objects), len(merrittJobs)+len(ingestqJobs))
	}
	if entries, err := peer.Children("/locks/storage"); err != nil || len(entries) != 0 {
		t.Errorf("storage locks left: %v, %v", entries, err)
	}
}
