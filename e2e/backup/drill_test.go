// Package backup drills docs/backup.md: a backup of a live system taken
// under load by ingestq-backup, everything destroyed, the backup restored
// onto a fresh ZooKeeper and fresh service processes, and the work resumed
// until every job the backup held is accounted for.
package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	_ "modernc.org/sqlite"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	token          = "drill-admin-token"
	profileName    = "drill"
	objectsPerBath = 30
	// maxBatches bounds the load: a batch every submitEvery until the
	// system is destroyed, at most this many.
	maxBatches  = 14
	submitEvery = 400 * time.Millisecond
)

var repo = filepath.Join("..", "..")

// drill is one run: its folders, the live system and what it saw.
type drill struct {
	t        *testing.T
	dir      string // the system's folder (stack.Options.Dir), destroyed and restored
	bin      string
	deposits *depositor.Server
	// objects: local id → the SHA-256 of its one file.
	objects map[string]string
	// submitted: batch uuid → when its Submit returned, and its bid.
	mu        sync.Mutex
	submitted map[string]submission
}

type submission struct {
	at  time.Time
	bid string
}

// TestABackupTakenUnderLoadRestoresOntoFreshServersWithEveryJobAccountedFor
// is the restore drill of docs/backup.md. Batches keep arriving while
// ingestq-backup create takes the backup, and after; then every process is
// killed and every folder removed. ingestq-backup restore lays the backup
// out for a fresh ZooKeeper and fresh services, which start paused, with
// every job in the state it had at the backup and fsck clean; unpaused,
// every job of the backup ends Completed once: one job per object, one
// stored version and one inventory row per ARK, the ARK of a job Completed
// before the backup unchanged. Batches submitted after the backup are not
// there, as docs/backup.md says.
func TestABackupTakenUnderLoadRestoresOntoFreshServersWithEveryJobAccountedFor(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	d := &drill{t: t, dir: filepath.Join(t.TempDir(), "ingestq"), bin: t.TempDir(), objects: map[string]string{}, submitted: map[string]submission{}}
	if err := stack.Build(ctx, repo, d.bin); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(d.bin, "ingestq-backup")
	build := exec.CommandContext(ctx, "go", "build", "-o", tool, ".")
	build.Dir = filepath.Join(repo, "tools", "ingestq-backup")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ingestq-backup: %v\n%s", err, out)
	}
	depDir, profiles := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(profiles, profileName+".yaml"), "name: "+profileName+
		"\ncollection: drill\nowner: ark:/99999/fk4owner\nnotification_addresses: [depositor@example.org]\n")
	var err error
	if d.deposits, err = depositor.Start(depDir); err != nil {
		t.Fatal(err)
	}
	defer d.deposits.Close()
	d.writeDeposits(depDir)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, token+"\n")

	// The live system: its own ZooKeeper, whose data folder the backup reads.
	zkDir := t.TempDir()
	zk, err := zktest.Start(ctx, zkDir, zktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer zk.Stop()
	opts := stack.Options{Dir: d.dir, BinDir: d.bin, ProfilesDir: profiles, AdminToken: token, ZooKeeper: []string{zk.Addr},
		Env: map[string]string{"INGESTQ_CONCURRENCY": "8"}}
	live, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop(context.WithoutCancel(ctx))
	batches, admin := d.clients(live)

	// Load: a batch every submitEvery, through the backup and after it.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		d.submitEvery(loadCtx, batches)
	}()
	// The backup waits for jobs in several states and a first completion.
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		q, err := admin.GetQueue(auth(ctx), &v1.GetQueueRequest{})
		if err != nil {
			return false, nil
		}
		return q.GetJobsByState()["Completed"] > 0 && liveStates(q.GetJobsByState()) >= 3, nil
	}); err != nil {
		t.Fatalf("the load never had jobs in three states and one Completed: %v", err)
	}
	backupDir := filepath.Join(t.TempDir(), "backup")
	backupStart := time.Now()
	out, err := exec.CommandContext(ctx, tool, "create", "-batcher", live.Addr("batcher"), "-token-file", tokenFile,
		"-zk-servers", zk.Addr, "-zk-data", filepath.Join(zkDir, "zk1", "data"),
		"-inventory", live.InventoryDB, "-work", live.WorkRoot, "-store", live.StoreRoot, "-out", backupDir).CombinedOutput()
	backupEnd := time.Now()
	if err != nil {
		t.Fatalf("ingestq-backup create: %v\n%s", err, out)
	}
	t.Logf("ingestq-backup create (%s):\n%s", backupEnd.Sub(backupStart).Round(time.Millisecond), out)
	var m struct {
		JobsByState map[string]int32               `json:"jobs_by_state"`
		PausedFor   string                         `json:"paused_for"`
		Parts       map[string]struct{ Files int } `json:"parts"`
	}
	readJSON(t, filepath.Join(backupDir, "backup.json"), &m)
	if liveStates(m.JobsByState) < 3 || m.JobsByState["Completed"] == 0 {
		t.Fatalf("the backup was not taken under load: jobs by state %v", m.JobsByState)
	}
	for _, part := range []string{"zookeeper", "inventory", "work", "store"} {
		if m.Parts[part].Files == 0 {
			t.Errorf("the backup's %s holds no file: %v", part, m.Parts)
		}
	}

	// The system goes on after the backup (more jobs complete), then
	// everything is destroyed.
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		q, err := admin.GetQueue(auth(ctx), &v1.GetQueueRequest{})
		if err != nil {
			return false, nil
		}
		return q.GetJobsByState()["Completed"] > m.JobsByState["Completed"], nil
	}); err != nil {
		t.Fatalf("no job completed after the backup: %v", err)
	}
	stopLoad()
	<-loaded
	for _, name := range stack.Services {
		for _, p := range live.Procs(name) {
			p.Kill()
		}
	}
	zk.Kill()
	for _, dir := range []string{d.dir, zkDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}

	// Fresh servers: a new ZooKeeper (another folder, another port) and new
	// processes, on the same paths as before (the queue names them).
	freshZK := t.TempDir()
	out, err = exec.CommandContext(ctx, tool, "restore", "-from", backupDir, "-zk-data", filepath.Join(freshZK, "zk1", "data"),
		"-inventory", live.InventoryDB, "-work", live.WorkRoot, "-store", live.StoreRoot).CombinedOutput()
	if err != nil {
		t.Fatalf("ingestq-backup restore: %v\n%s", err, out)
	}
	t.Logf("ingestq-backup restore:\n%s", out)
	zk2, err := zktest.Start(ctx, freshZK, zktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer zk2.Stop()
	opts.ZooKeeper = []string{zk2.Addr}
	restored, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Stop(context.WithoutCancel(ctx))
	batches, admin = d.clients(restored)

	// Before anything moves: paused, every job where the backup found it,
	// fsck clean.
	q, err := admin.GetQueue(auth(ctx), &v1.GetQueueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !q.GetPaused() {
		t.Error("the restored queue is not paused")
	}
	if !maps.Equal(q.GetJobsByState(), m.JobsByState) {
		t.Errorf("restored jobs by state %v, the backup's %v", q.GetJobsByState(), m.JobsByState)
	}
	atRestore := d.jobs(ctx, admin)
	d.fsckClean(ctx, admin, "after the restore")
	restoredBatches := d.batches(ctx, admin)
	bids := slices.Sorted(maps.Keys(restoredBatches))
	d.mu.Lock()
	for uuid, s := range d.submitted {
		switch there := restoredBatches[s.bid]; {
		case s.at.Before(backupStart) && !there:
			t.Errorf("batch %s (%s), submitted before the backup, is not in the restored queue", s.bid, uuid)
		case s.at.After(backupEnd) && there:
			t.Errorf("batch %s (%s), submitted after the backup, is in the restored queue", s.bid, uuid)
		case s.at.After(backupEnd):
			// Its depositor asks by its uuid and is told to submit again.
			if _, err := batches.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchUuid{BatchUuid: uuid}}); !isNotFound(err) {
				t.Errorf("GetBatchStatus of %s, submitted after the backup: %v, want NotFound", uuid, err)
			}
		}
	}
	d.mu.Unlock()

	if _, err := admin.UnpauseQueue(auth(ctx), &v1.UnpauseQueueRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, 4*time.Minute, func() (bool, error) {
		for _, j := range d.jobs(ctx, admin) {
			switch j.GetStatus().GetStatus() {
			case v1.JobState_JOB_STATE_COMPLETED:
			case v1.JobState_JOB_STATE_FAILED:
				return false, fmt.Errorf("job %s failed: %s", j.GetId(), j.GetStatus().GetMessage())
			default:
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("after the restore: %v (logs in %s)", err, restored.LogDir)
	}
	end := d.jobs(ctx, admin)
	d.checkAccountedFor(ctx, restored, restoredBatches, atRestore, end)
	d.fsckClean(ctx, admin, "at the end")
	for _, bid := range bids {
		b, err := admin.GetBatch(auth(ctx), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
		if err == nil && b.GetBatch().GetStatus().GetStatus() != v1.BatchState_BATCH_STATE_COMPLETED {
			err = waitFor(ctx, time.Minute, func() (bool, error) {
				b, err := admin.GetBatch(auth(ctx), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
				return err == nil && b.GetBatch().GetStatus().GetStatus() == v1.BatchState_BATCH_STATE_COMPLETED, nil
			})
		}
		if err != nil {
			t.Errorf("batch %s did not complete: %v", bid, err)
		}
	}
	counts := map[string]int{}
	for _, j := range atRestore {
		counts[strings.ToLower(strings.TrimPrefix(j.GetStatus().GetStatus().String(), "JOB_STATE_"))]++
	}
	d.mu.Lock()
	lost := len(d.submitted) - len(bids)
	d.mu.Unlock()
	var byState []string
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		byState = append(byState, fmt.Sprintf("%s %d", st, counts[st]))
	}
	t.Logf("drill: %s in all; backup taken in %s (queue paused %s) holding %d batches, %d of them with their jobs created (%d jobs: %s); %d batch(es) submitted after it not restored; all %d jobs of the restored batches Completed once",
		time.Since(began).Round(time.Second), backupEnd.Sub(backupStart).Round(time.Millisecond), m.PausedFor, len(bids), len(batchesOf(atRestore)), len(atRestore), strings.Join(byState, ", "), lost, len(end))
}

func (d *drill) clients(s *stack.Stack) (v1.BatchServiceClient, v1.AdminServiceClient) {
	conn, err := grpc.NewClient(s.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { conn.Close() })
	return v1.NewBatchServiceClient(conn), v1.NewAdminServiceClient(conn)
}

func auth(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// liveStates counts the states other than the ended ones that hold a job.
func liveStates(byState map[string]int32) int {
	n := 0
	for s, c := range byState {
		if c > 0 && s != "Completed" && s != "Failed" && s != "Deleted" {
			n++
		}
	}
	return n
}

// writeDeposits writes maxBatches manifests of manifests, each of
// objectsPerBath objects of one file that names its object, as the
// depositor serves them.
func (d *drill) writeDeposits(dir string) {
	t := d.t
	for b := range maxBatches {
		var rows []checkm.Entry
		for i := range objectsPerBath {
			lid := fmt.Sprintf("drill-%02d-%03d", b, i)
			body := bytes.Repeat([]byte(lid+" is one object of the restore drill\n"), 40+i)
			sum := sha256.Sum256(body)
			d.objects[lid] = hex.EncodeToString(sum[:])
			obj := fmt.Sprintf("objects/%s", lid)
			writeFile(t, filepath.Join(dir, obj, "content.txt"), string(body))
			var m strings.Builder
			if err := checkm.Write(&m, checkm.ProfileObject, []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"},
				[]checkm.Entry{{FileURL: d.deposits.URL + "/" + obj + "/content.txt", HashAlgorithm: "sha256", HashValue: d.objects[lid], FileSize: int64(len(body)), FileName: "content.txt"}}); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, obj+".checkm"), m.String())
			rows = append(rows, checkm.Entry{FileURL: d.deposits.URL + "/" + obj + ".checkm", FileSize: -1, FileName: lid + ".checkm", LocalIdentifier: lid, Title: "drill object " + lid})
		}
		var m strings.Builder
		if err := checkm.Write(&m, checkm.ProfileBatch, []string{"nfo:fileUrl", "nfo:fileName", "mrt:localIdentifier", "mrt:title"}, rows); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("batch-%02d.checkm", b)), m.String())
	}
}

// submitEvery submits the batches one by one until ctx ends.
func (d *drill) submitEvery(ctx context.Context, batches v1.BatchServiceClient) {
	for b := range maxBatches {
		uuid := fmt.Sprintf("drill-batch-%02d", b)
		req := &v1.SubmitRequest{Submitter: "drill", Profile: profileName, PayloadUrl: fmt.Sprintf("%s/batch-%02d.checkm", d.deposits.URL, b),
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, BatchUuid: uuid}
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := batches.Submit(callCtx, req)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				d.t.Errorf("submitting %s: %v", uuid, err)
			}
			return
		}
		d.mu.Lock()
		d.submitted[uuid] = submission{at: time.Now(), bid: resp.GetBatchId()}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(submitEvery):
		}
	}
}

// jobs reads every job of the queue, whole.
func (d *drill) jobs(ctx context.Context, admin v1.AdminServiceClient) map[string]*v1.Job {
	t := d.t
	out := map[string]*v1.Job{}
	token := ""
	for range 100 {
		resp, err := admin.ListJobs(auth(ctx), &v1.ListJobsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		for _, j := range resp.GetJobs() {
			full, err := admin.GetJob(auth(ctx), &v1.GetJobRequest{JobId: j.GetId()})
			if err != nil {
				t.Fatalf("GetJob %s: %v", j.GetId(), err)
			}
			out[j.GetId()] = full.GetJob()
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
	t.Fatal("ListJobs: more than 100 pages")
	return nil
}

// batches lists every batch of the queue by its bid.
func (d *drill) batches(ctx context.Context, admin v1.AdminServiceClient) map[string]bool {
	out := map[string]bool{}
	token := ""
	for range 100 {
		resp, err := admin.ListBatches(auth(ctx), &v1.ListBatchesRequest{PageSize: 500, PageToken: token})
		if err != nil {
			d.t.Fatalf("ListBatches: %v", err)
		}
		for _, b := range resp.GetBatches() {
			out[b.GetId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out
		}
	}
	d.t.Fatal("ListBatches: more than 100 pages")
	return nil
}

func batchesOf(jobs map[string]*v1.Job) map[string]bool {
	out := map[string]bool{}
	for _, j := range jobs {
		out[j.GetBid()] = true
	}
	return out
}

func (d *drill) fsckClean(ctx context.Context, admin v1.AdminServiceClient, when string) {
	resp, err := admin.Fsck(auth(ctx), &v1.FsckRequest{})
	switch {
	case err != nil:
		d.t.Errorf("Fsck %s: %v", when, err)
	case !resp.GetClean():
		d.t.Errorf("Fsck %s found damage: %v", when, resp.GetDamages())
	}
}

// checkAccountedFor checks the end of the drill: every job of the backup
// still there and Completed, its ARK unchanged if it had one at the
// backup; every object of a restored batch one job (a batch whose jobs
// were not yet created at the backup creates them after the restore); each
// ARK stored once (v1 alone, by its job) and recorded once.
func (d *drill) checkAccountedFor(ctx context.Context, s *stack.Stack, restoredBatches map[string]bool, atRestore, end map[string]*v1.Job) {
	t := d.t
	for id := range atRestore {
		if end[id] == nil {
			t.Errorf("job %s of the backup is gone", id)
		}
	}
	byObject, byARK := map[string]string{}, map[string]string{}
	perBatch := map[string]int{}
	for id, j := range end {
		if !restoredBatches[j.GetBid()] {
			t.Errorf("job %s belongs to batch %s, which the backup did not hold", id, j.GetBid())
			continue
		}
		perBatch[j.GetBid()]++
		before := atRestore[id]
		if before == nil {
			before = &v1.Job{}
		}
		if j.GetStatus().GetStatus() != v1.JobState_JOB_STATE_COMPLETED {
			t.Errorf("job %s is %s", id, j.GetStatus().GetStatus())
		}
		lids := j.GetIdentifiers().GetLocalId()
		if len(lids) != 1 || d.objects[lids[0]] == "" {
			t.Errorf("job %s has local ids %v", id, lids)
			continue
		}
		if other, dup := byObject[lids[0]]; dup {
			t.Errorf("object %s is two jobs: %s and %s", lids[0], other, id)
		}
		byObject[lids[0]] = id
		ark := j.GetIdentifiers().GetPrimaryId()
		if had := before.GetIdentifiers().GetPrimaryId(); had != "" && had != ark {
			t.Errorf("job %s had ARK %s at the backup and has %s now", id, had, ark)
		}
		if other, dup := byARK[ark]; dup || ark == "" {
			t.Errorf("ARK %q is given to jobs %s and %s", ark, other, id)
		}
		byARK[ark] = id
		if j.GetInventory().GetVersion() != 1 {
			t.Errorf("job %s stored as version %d, want 1", id, j.GetInventory().GetVersion())
		}
		// Its version in the store: v1 alone, stored by this job, its file
		// the deposited one.
		objDir := filepath.Join(s.StoreRoot, strings.NewReplacer(":/", "_", "/", "_").Replace(ark))
		vs, err := os.ReadDir(objDir)
		if err != nil || len(vs) != 1 || vs[0].Name() != "v1" {
			t.Errorf("object %s (%s): store holds %v (%v), want v1 alone", ark, id, vs, err)
			continue
		}
		var rec struct {
			JobID string `json:"jid"`
		}
		readJSON(t, filepath.Join(objDir, "v1", "version.json"), &rec)
		if rec.JobID != id {
			t.Errorf("%s/v1 was stored by %q, not %s", objDir, rec.JobID, id)
		}
		body, err := os.ReadFile(filepath.Join(objDir, "v1", "producer", "content.txt"))
		sum := sha256.Sum256(body)
		if err != nil || hex.EncodeToString(sum[:]) != d.objects[lids[0]] {
			t.Errorf("%s/v1/producer/content.txt is not the deposited file (%v)", objDir, err)
		}
	}
	for bid := range restoredBatches {
		if perBatch[bid] != objectsPerBath {
			t.Errorf("batch %s has %d jobs for its %d objects", bid, perBatch[bid], objectsPerBath)
		}
	}
	stored, err := os.ReadDir(s.StoreRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(end) {
		t.Errorf("the store holds %d objects for %d jobs", len(stored), len(end))
	}
	db, err := sql.Open("sqlite", s.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, arks int
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT ark) FROM versions`).Scan(&rows, &arks); err != nil {
		t.Fatal(err)
	}
	if rows != len(end) || arks != len(end) {
		t.Errorf("the inventory has %d version rows of %d ARKs for %d jobs", rows, arks, len(end))
	}
}

// waitFor polls until done says so, it fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// isNotFound reports a NotFound status.
func isNotFound(err error) bool { return status.Code(err) == codes.NotFound }
