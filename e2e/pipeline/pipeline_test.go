// Package pipeline tests ingestq end to end: the seven services as separate
// processes (their built binaries) on a real ZooKeeper, a depositor's web
// server on loopback, a callback receiver, an OTLP receiver, and the files,
// SQLite rows and emails the pipeline leaves behind.
package pipeline

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/leftovers"
	"github.com/ingestq/ingestq/e2e/otlpsink"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	_ "modernc.org/sqlite"
)

const adminToken = "e2e-admin-token"

// env is the running pipeline every test of the package shares.
type env struct {
	stack     *stack.Stack
	deposits  *depositor.Server
	depDir    string
	callbacks *callbackReceiver
	// outage is the callback endpoint of profile "outage", down until a
	// test brings it up.
	outage  *outageReceiver
	spans   *otlpsink.Sink
	batches v1.BatchServiceClient
	admin   v1.AdminServiceClient
}

var shared *env // set once by TestMain, read by the tests

func TestMain(m *testing.M) {
	testenv.Isolate()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := testenv.MkdirTemp("ingestq-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e, stop, err := start(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	shared = e
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: stopping:", err)
		code = 1
	}
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "e2e: logs and data kept in", dir)
	}
	return code
}

func start(ctx context.Context, dir string) (*env, func() error, error) {
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, filepath.Join("..", ".."), bin); err != nil {
		return nil, nil, err
	}
	e := &env{depDir: filepath.Join(dir, "deposits"), callbacks: newCallbackReceiver()}
	if err := writeDeposits(e.depDir); err != nil {
		return nil, nil, err
	}
	var err error
	if e.outage, err = newOutageReceiver(); err != nil {
		return nil, nil, err
	}
	if e.deposits, err = depositor.Start(e.depDir); err != nil {
		return nil, nil, err
	}
	if e.spans, err = otlpsink.Start(); err != nil {
		return nil, nil, err
	}
	profiles := filepath.Join(dir, "profiles")
	if err := writeProfiles(profiles, e.callbacks.URL, e.outage.URL); err != nil {
		return nil, nil, err
	}
	e.stack, err = stack.Start(ctx, stack.Options{
		Dir: dir, BinDir: bin, ProfilesDir: profiles, AdminToken: adminToken,
		Env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": e.spans.Endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_BSP_SCHEDULE_DELAY":     "100",
			// Merritt's ingest service's queue folder, as a web server serves it.
			"INGESTQ_MERRITT_QUEUE_URL": e.deposits.URL + "/" + merrittQueueFolder,
			// A callback not delivered is tried again within seconds, not
			// minutes: the outage's callback arrives soon after it ends.
			"INGESTQ_CALLBACK_RETRY_BACKOFF":     "1s",
			"INGESTQ_CALLBACK_RETRY_BACKOFF_MAX": "4s",
		},
	})
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(e.stack.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	e.batches, e.admin = v1.NewBatchServiceClient(conn), v1.NewAdminServiceClient(conn)
	stop := func() error {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := e.stack.StopServices(ctx)
		// Nothing may be left after a clean stop: no damage, no worker entry.
		if q, qerr := session.Connect(ctx, session.Options{Servers: e.stack.Servers, Root: e.stack.Root}); qerr != nil {
			err = errors.Join(err, qerr)
		} else {
			err = errors.Join(err, leftovers.AfterStop(ctx, q))
			q.Close()
		}
		e.stack.Stop(ctx)
		e.deposits.Close()
		e.spans.Stop()
		e.callbacks.Close()
		e.outage.Close()
		return err
	}
	return e, stop, nil
}

// adminCtx carries the admin token.
func adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
}

func writeProfiles(dir, callbackURL, outageURL string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	profiles := map[string]string{
		"demo.yaml": "name: demo\ncollection: demo\nowner: ark:/99999/fk4owner\nnotification_addresses: [depositor@example.org]\n",
		"callback.yaml": fmt.Sprintf("name: callback\ncollection: cb\nnotification_addresses: [cb@example.org]\ncallback_url: %s/done\n",
			callbackURL),
		"held.yaml": "name: held\ncollection: heldcoll\nnotification_addresses: [held@example.org]\n",
		"outage.yaml": fmt.Sprintf("name: outage\ncollection: outage\nnotification_addresses: [outage@example.org]\ncallback_url: %s/done\n",
			outageURL),
	}
	for name, body := range profiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeDeposits writes the deposits the tests submit: the demo's manifest
// of manifests (one wrong digest), one object manifest, a single file and a
// zip container.
func writeDeposits(dir string) error {
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("..", "..", "examples", "demo"))); err != nil {
		return err
	}
	// traced.checkm: the demo's batch without its failing object.
	demo, err := os.ReadFile(filepath.Join(dir, "batch.checkm"))
	if err != nil {
		return err
	}
	var traced []string
	for _, line := range strings.Split(string(demo), "\n") {
		if !strings.Contains(line, "diary-1944") {
			traced = append(traced, line)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "traced.checkm"), []byte(strings.Join(traced, "\n")), 0o644); err != nil {
		return err
	}
	files := map[string]string{"report.txt": "Annual report 1955.\n", "figures.csv": "year,count\n1955,12\n"}
	var rows strings.Builder
	rows.WriteString("#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n")
	for _, name := range []string{"figures.csv", "report.txt"} {
		body := files[name]
		if err := os.MkdirAll(filepath.Join(dir, "single"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "single", name), []byte(body), 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(body))
		fmt.Fprintf(&rows, "{{base}}/single/%s | sha256 | %s | %d | | %s\n", name, hex.EncodeToString(sum[:]), len(body), name)
	}
	rows.WriteString("#%eof\n")
	if err := os.WriteFile(filepath.Join(dir, "report-1955.checkm"), []byte(rows.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "scans-1960.zip"))
	if err != nil {
		return err
	}
	zw := zip.NewWriter(f)
	for _, name := range []string{"scans/page-1.txt", "scans/page-2.txt"} {
		w, err := zw.Create(name)
		if err != nil {
			return err
		}
		io.WriteString(w, "scanned text of "+name+"\n")
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// submit submits a payload and returns the bid.
func submit(t *testing.T, profile, path string, typ v1.PayloadType) string {
	t.Helper()
	resp, err := shared.batches.Submit(context.Background(), &v1.SubmitRequest{
		Submitter: "e2e", Profile: profile, PayloadUrl: shared.deposits.URL + path, PayloadType: typ,
		Metadata: &v1.Metadata{Who: "E2E", What: "test deposit " + path, When: "2026"},
	})
	if err != nil {
		t.Fatalf("submit %s: %v", path, err)
	}
	return resp.GetBatchId()
}

// waitBatch waits until the batch is in one of states and returns it.
func waitBatch(t *testing.T, bid string, states ...queue.BatchState) *v1.Batch {
	t.Helper()
	var last *v1.Batch
	waittest.Until(t, 3*time.Minute, func() error {
		resp, err := shared.batches.GetBatchStatus(context.Background(), &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}})
		if err != nil {
			t.Fatal(err)
		}
		if last = resp.GetBatch(); !slices.Contains(states, last.GetStatus().GetStatus()) {
			return fmt.Errorf("batch %s never reached %v; last seen %v (logs in %s)", bid, states, last, shared.stack.LogDir)
		}
		return nil
	})
	return last
}

func batchJobs(t *testing.T, bid string) []*v1.Job {
	t.Helper()
	resp, err := shared.admin.ListJobs(adminCtx(context.Background()), &v1.ListJobsRequest{BatchId: bid, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetJobs()
}

// checkStoredAndRecorded checks that a completed job's object is in the
// store (its version manifest written last) and in the SQLite inventory.
func checkStoredAndRecorded(t *testing.T, j *v1.Job) {
	t.Helper()
	ark := j.GetIdentifiers().GetPrimaryId()
	if !strings.HasPrefix(ark, "ark:/") {
		t.Fatalf("%s has no ARK: %v", j.GetId(), j.GetIdentifiers())
	}
	manifest, err := checkm.FilePath(j.GetInventory().GetManifestUrl())
	if err != nil {
		t.Errorf("%s: %v", j.GetId(), err)
	}
	if _, err := os.Stat(manifest); err != nil {
		t.Errorf("%s: stored version manifest missing: %v", j.GetId(), err)
	}
	if !strings.HasPrefix(manifest, shared.stack.StoreRoot) {
		t.Errorf("%s stored outside the store: %s", j.GetId(), manifest)
	}
	db, err := sql.Open("sqlite", shared.stack.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var versions, files int
	if err := db.QueryRow(`SELECT count(*) FROM versions WHERE ark = ? AND jid = ?`, ark, j.GetId()).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM files WHERE ark = ?`, ark).Scan(&files); err != nil {
		t.Fatal(err)
	}
	if versions != 1 || files == 0 {
		t.Errorf("%s (%s): inventory has %d version rows and %d file rows", j.GetId(), ark, versions, files)
	}
}

// emails returns the outbox messages of a batch.
func emails(t *testing.T, bid string) map[string]string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(shared.stack.OutboxDir, bid+"*"))
	out := map[string]string{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = string(data)
	}
	return out
}

func TestThreeBatchesOfDifferentPayloadTypesComplete(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path string
		typ        v1.PayloadType
		jobs       int
	}{
		{"object manifest", "/report-1955.checkm", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, 1},
		{"single file", "/objects/map-1880/notes.txt", v1.PayloadType_PAYLOAD_TYPE_FILE, 1},
		{"container", "/scans-1960.zip", v1.PayloadType_PAYLOAD_TYPE_CONTAINER, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bid := submit(t, "demo", tc.path, tc.typ)
			b := waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed)
			jobs := batchJobs(t, bid)
			if b.GetStatus().GetStatus() != queue.BatchCompleted || len(jobs) != tc.jobs {
				t.Fatalf("batch %s: %s %q with %d jobs: %v", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage(), len(jobs), jobs)
			}
			for _, j := range jobs {
				checkStoredAndRecorded(t, j)
				if _, err := os.Stat(j.GetConfiguration().GetWorkingDir()); !os.IsNotExist(err) {
					t.Errorf("%s: working directory not removed: %v", j.GetId(), err)
				}
			}
			if r := b.GetStatusReport(); len(r.GetSuccessfulJobs()) != tc.jobs || len(r.GetFailedJobs()) != 0 {
				t.Errorf("status-report %v", r)
			}
			if mails := emails(t, bid); mails[bid+"-report.eml"] == "" {
				t.Errorf("no report email for %s (outbox: %v)", bid, slices.Collect(maps.Keys(mails)))
			}
		})
	}
}

func TestCollectionHeldThenReleasedMidRun(t *testing.T) {
	t.Parallel()
	ctx := adminCtx(context.Background())
	if _, err := shared.admin.HoldCollection(ctx, &v1.HoldCollectionRequest{Collection: "heldcoll"}); err != nil {
		t.Fatal(err)
	}
	bid := submit(t, "held", "/objects/photos-1930/caption.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	b := waitBatch(t, bid, queue.BatchHeld)
	if !strings.Contains(b.GetStatus().GetMessage(), "heldcoll") {
		t.Errorf("held batch message %q does not name the collection", b.GetStatus().GetMessage())
	}
	resp, err := shared.admin.ReleaseCollection(ctx, &v1.ReleaseCollectionRequest{Collection: "heldcoll"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(resp.GetReleasedBatches(), bid) {
		t.Errorf("ReleaseCollection released %v, not %s", resp.GetReleasedBatches(), bid)
	}
	if b := waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed); b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Fatalf("released batch ended %s: %s", queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
}

// TestBadDigestFailsThenFixedRequeuedAndUpdateReported follows the demo's
// failing object: its job fails with both digests, the depositor fixes the
// file, an operator requeues the job and asks for the update report, and
// the batch ends Completed with a second email naming the job.
func TestBadDigestFailsThenFixedRequeuedAndUpdateReported(t *testing.T) {
	t.Parallel()
	bid := submit(t, "demo", "/batch.checkm", v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	b := waitBatch(t, bid, queue.BatchFailed, queue.BatchCompleted)
	if b.GetStatus().GetStatus() != queue.BatchFailed || b.GetStatusReport() == nil {
		t.Fatalf("batch %s: %v", bid, b)
	}
	var failed *v1.Job
	for _, j := range batchJobs(t, bid) {
		switch j.GetStatus().GetStatus() {
		case queue.Failed:
			failed = j
		case queue.Completed:
			checkStoredAndRecorded(t, j)
		default:
			t.Errorf("%s is %s", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()))
		}
	}
	if failed == nil || !strings.Contains(failed.GetStatus().GetMessage(), "1944-06-07.txt") ||
		!strings.Contains(failed.GetStatus().GetMessage(), "sha256 expected 406cef66") {
		t.Fatalf("failed job %v: want a message naming the file and the digests", failed)
	}
	if failed.GetStatus().GetLastSuccessfulStatus() != queue.Provisioning {
		t.Errorf("last_successful_status %s, want Provisioning", queue.JobStateName(failed.GetStatus().GetLastSuccessfulStatus()))
	}
	// The depositor fixes the file to what the manifest declared.
	shared.deposits.Set("/objects/diary-1944/1944-06-07.txt", []byte("June 7. No letters today.\n"))
	ctx := adminCtx(context.Background())
	rq, err := shared.admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: failed.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if rq.GetJob().GetStatus().GetStatus() != queue.Downloading || rq.GetJob().GetStatus().GetRetryCount() != 1 {
		t.Errorf("requeued to %v", rq.GetJob().GetStatus())
	}
	var requeued *v1.Job
	waittest.Until(t, 2*time.Minute, func() error {
		j, err := shared.admin.GetJob(ctx, &v1.GetJobRequest{JobId: failed.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		switch requeued = j.GetJob(); requeued.GetStatus().GetStatus() {
		case queue.Completed:
			return nil
		case queue.Failed:
			t.Fatalf("requeued job: %v", requeued.GetStatus())
		}
		return fmt.Errorf("requeued job: %v", requeued.GetStatus())
	})
	checkStoredAndRecorded(t, requeued)
	if _, err := shared.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: bid}); err != nil {
		t.Fatal(err)
	}
	b = waitBatch(t, bid, queue.BatchCompleted)
	if r := b.GetStatusReport(); len(r.GetFailedJobs()) != 0 || !slices.Contains(r.GetSuccessfulJobs(), failed.GetId()) {
		t.Errorf("update report %v", r)
	}
	var second string
	for name, body := range emails(t, bid) {
		if strings.Contains(name, "report-after") {
			second = body
		}
	}
	if !strings.Contains(second, failed.GetId()) {
		t.Errorf("no update report email naming %s in %v", failed.GetId(), slices.Collect(maps.Keys(emails(t, bid))))
	}
}

// TestAPayloadThatCannotBeUsedIsMailedToItsDepositorAndStaysFailed: a
// manifest the server does not have makes a batch without jobs; the
// depositor is mailed a report naming the 404 and what to do, and an
// operator's update report, which would report nothing, is refused: the
// batch stays Failed with its reason, never Completed.
func TestAPayloadThatCannotBeUsedIsMailedToItsDepositorAndStaysFailed(t *testing.T) {
	t.Parallel()
	bid := submit(t, "demo", "/no-such-manifest.checkm", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	b := waitBatch(t, bid, queue.BatchFailed, queue.BatchCompleted)
	if b.GetStatus().GetStatus() != queue.BatchFailed || !strings.Contains(b.GetStatus().GetMessage(), "404") {
		t.Fatalf("batch %s: %s %q, want Failed naming the 404", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
	report := decoded(t, emails(t, bid)[bid+"-report.eml"])
	for _, want := range []string{"/no-such-manifest.checkm", "404", "What to do:", "submit it again as a new batch"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report mail lacks %q:\n%s", want, report)
		}
	}
	ctx := adminCtx(context.Background())
	if _, err := shared.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: bid}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("UpdateReportBatch of a batch without jobs: %v, want FailedPrecondition", err)
	}
	after, err := shared.admin.GetBatch(ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	if err != nil {
		t.Fatal(err)
	}
	if st := after.GetBatch().GetStatus(); st.GetStatus() != queue.BatchFailed || st.GetMessage() != b.GetStatus().GetMessage() {
		t.Errorf("after the refused update report the batch is %s %q, want Failed %q", queue.BatchStateName(st.GetStatus()), st.GetMessage(),
			b.GetStatus().GetMessage())
	}
}

func TestCallbackReceivedWhenAJobCompletes(t *testing.T) {
	t.Parallel()
	bid := submit(t, "callback", "/objects/letters-1921/README.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	if b := waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed); b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Fatalf("batch %s: %v", bid, b.GetStatus())
	}
	jobs := batchJobs(t, bid)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs", len(jobs))
	}
	got := shared.callbacks.For(jobs[0].GetId())
	if got == nil {
		t.Fatalf("no callback for %s", jobs[0].GetId())
	}
	if got["bid"] != bid || got["ark"] != jobs[0].GetIdentifiers().GetPrimaryId() || got["status"] != "completed" {
		t.Errorf("callback body %v", got)
	}
}

// TestABatchIsOneTraceAndEachJobATraceOfItsOwn: a batch of N jobs gives
// N job traces, each with a span per stage from every service that touched
// the job (the callback request and the lease calls included), each rooted
// in a span linked to the batch's trace; the batch's trace holds its own
// spans and no job's; and the health checks made no spans.
func TestABatchIsOneTraceAndEachJobATraceOfItsOwn(t *testing.T) {
	t.Parallel()
	resp, err := shared.batches.Submit(context.Background(), &v1.SubmitRequest{Submitter: "e2e", Profile: "callback",
		PayloadUrl: shared.deposits.URL + "/traced.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
	if err != nil {
		t.Fatal(err)
	}
	bid := resp.GetBatchId()
	batchTrace := strings.Split(resp.GetTraceparent(), "-")[1]
	if b := waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed); b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Fatalf("batch %s: %v", bid, b.GetStatus())
	}
	st, err := shared.batches.GetBatchStatus(context.Background(), &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}})
	if err != nil || st.GetTraceId() != batchTrace {
		t.Fatalf("GetBatchStatus: trace id %q (%v), want the submission's %s", st.GetTraceId(), err, batchTrace)
	}
	jobs := batchJobs(t, bid)
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3", len(jobs))
	}
	jobTrace := map[string]string{} // jid → trace id
	for _, j := range jobs {
		g, err := shared.admin.GetJob(adminCtx(context.Background()), &v1.GetJobRequest{JobId: j.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if g.GetTraceId() == "" || g.GetTraceId() == batchTrace || slices.Contains(slices.Collect(maps.Values(jobTrace)), g.GetTraceId()) {
			t.Fatalf("job %s: trace id %q, want one of its own", j.GetId(), g.GetTraceId())
		}
		jobTrace[j.GetId()] = g.GetTraceId()
	}
	// A span per stage, as the job passed them (and processing's storing step).
	want := []string{"callback POST", "complete", "created", "estimating", "notifying", "pending", "processing", "provisioning",
		"downloading", "recording", "storing"}
	slices.Sort(want)
	got := map[string][]string{}
	// Spans reach the sink a moment after their jobs end: once every job's
	// are there, or after 30 s, they are compared.
	waittest.Until(t, 30*time.Second, func() error {
		done := true
		for jid, trace := range jobTrace {
			var names []string
			for _, s := range shared.spans.Spans(func(s otlpsink.Span) bool { return s.TraceID == trace }) {
				name := s.Attrs["ingestq.stage"]
				switch {
				case s.Name == "callback POST":
					name = s.Name
				case strings.HasPrefix(s.Name, "complete "):
					name = "complete"
				case name == "":
					continue // RPC spans of the lease calls, continued by the caller
				}
				if id := s.Attrs["ingestq.job.id"]; id != "" && id != jid {
					t.Fatalf("span %q of job %s is in the trace of job %s", s.Name, id, jid)
				}
				if name == "created" && !slices.Equal(s.LinkedTraces, []string{batchTrace}) {
					t.Errorf("job %s: root span %q links to %v, want the batch's trace %s", jid, s.Name, s.LinkedTraces, batchTrace)
				}
				if !slices.Contains(names, name) {
					names = append(names, name)
				}
			}
			slices.Sort(names)
			got[jid] = names
			done = done && slices.Equal(names, want)
		}
		if !done {
			return fmt.Errorf("spans of stages by job %v, want %v each", got, want)
		}
		return nil
	})
	for jid, names := range got {
		if !slices.Equal(names, want) {
			t.Errorf("job %s (trace %s): spans of stages %v, want %v", jid, jobTrace[jid], names, want)
		}
	}
	// The batch's trace: the submission and the batcher's work on the batch.
	var batchSpans []string
	for _, s := range shared.spans.Spans(func(s otlpsink.Span) bool { return s.TraceID == batchTrace }) {
		if s.Attrs["ingestq.job.id"] != "" {
			t.Errorf("job span %q is in the batch's trace", s.Name)
		}
		batchSpans = append(batchSpans, s.Name)
	}
	if !slices.Contains(batchSpans, "ingestq.v1.BatchService/Submit") || !slices.Contains(batchSpans, "batch "+bid) {
		t.Errorf("batch trace %s has spans %v, want the submission and the batch's", batchTrace, batchSpans)
	}
	traces := map[string]bool{}
	for _, s := range shared.spans.Spans(func(s otlpsink.Span) bool { return s.Attrs["ingestq.batch.id"] == bid }) {
		traces[s.TraceID] = true
	}
	if len(traces) != len(jobs)+1 {
		t.Errorf("the batch's spans are in %d traces, want %d (one per job, one for the batch)", len(traces), len(jobs)+1)
	}
	if health := shared.spans.Spans(func(s otlpsink.Span) bool { return strings.HasPrefix(s.Name, "grpc.health.v1.Health/") }); len(health) > 0 {
		t.Errorf("%d health-check spans exported (%s...)", len(health), health[0].Name)
	}
}

// callbackReceiver is the depositor's callback endpoint.
type callbackReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string]map[string]any // jid → body
}

func newCallbackReceiver() *callbackReceiver {
	c := &callbackReceiver{bodies: map[string]map[string]any{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.bodies[fmt.Sprint(body["jid"])] = body
		c.mu.Unlock()
	}))
	return c
}

// For returns the callback body received for a job.
func (c *callbackReceiver) For(jid string) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bodies[jid]
}

// objectManifest is an object manifest of one file served by the
// depositor, declaring digest as its sha256.
func objectManifest(path, name, digest string, size int) []byte {
	return fmt.Appendf(nil, "#%%checkm_0.7\n#%%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest\n"+
		"#%%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n"+
		"{{base}}%s | sha256 | %s | %d | | %s\n#%%eof\n", path, digest, size, name)
}

// decoded is a mail's text, its quoted-printable lines joined.
func decoded(t *testing.T, mail string) string {
	t.Helper()
	text, err := io.ReadAll(quotedprintable.NewReader(strings.NewReader(mail)))
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

// objectOf is the object of a batch's status with local id loc.
func objectOf(t *testing.T, st *v1.GetBatchStatusResponse, loc string) *v1.ObjectStatus {
	t.Helper()
	for _, o := range st.GetObjects() {
		if slices.Contains(o.GetLocalIds(), loc) {
			return o
		}
	}
	t.Fatalf("batch status lists no object with local id %s: %v", loc, st.GetObjects())
	return nil
}

// TestACorrectedObjectManifestIsReadAgainOnARequeue: a depositor's object
// manifest declares a wrong digest; its job fails in Downloading and the
// report says so, as GetBatchStatus does per object (local id, state,
// reason; the completed one's ARK and version, which the report mail
// names). An update report with nothing new is refused. The depositor
// corrects the manifest; the job, requeued at Estimating, reads it again
// (its history names the new manifest's sha256) and completes with the
// corrected file: the same job and local id, one version stored. The
// update report is then taken and names the version; asked once more,
// with nothing new since, it is refused.
func TestACorrectedObjectManifestIsReadAgainOnARequeue(t *testing.T) {
	t.Parallel()
	ctx := adminCtx(context.Background())
	d := shared.deposits
	letter := []byte("Dear Margaret, the corrected letter.\n")
	sum := sha256.Sum256(letter)
	good := hex.EncodeToString(sum[:])
	wrong := strings.Repeat("0", 64)
	d.Set("/corrected/letter.txt", letter)
	d.Set("/corrected/object.checkm", objectManifest("/corrected/letter.txt", "letter.txt", wrong, len(letter)))
	d.Set("/corrected/kept.txt", []byte("kept\n"))
	keptSum := sha256.Sum256([]byte("kept\n"))
	d.Set("/corrected/kept.checkm", objectManifest("/corrected/kept.txt", "kept.txt", hex.EncodeToString(keptSum[:]), 5))
	d.Set("/corrected/broken.checkm", objectManifest("/corrected/no-such-file.txt", "gone.txt", wrong, 3))
	d.Set("/corrected/batch.checkm", []byte("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\n"+
		"#%fields | nfo:fileUrl | nfo:fileName | mrt:localIdentifier | mrt:title\n"+
		"{{base}}/corrected/object.checkm | object.checkm | loc-corrected | The corrected letter\n"+
		"{{base}}/corrected/kept.checkm | kept.checkm | loc-kept | Kept\n"+
		"{{base}}/corrected/broken.checkm | broken.checkm | loc-broken | Broken\n#%eof\n"))

	bid := submit(t, "demo", "/corrected/batch.checkm", v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	waitBatch(t, bid, queue.BatchFailed, queue.BatchCompleted)
	st, err := shared.batches.GetBatchStatus(context.Background(), &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetBatch().GetStatus().GetStatus() != queue.BatchFailed || len(st.GetObjects()) != 3 || st.GetNextPageToken() != "" {
		t.Fatalf("batch %s after its report: %v, objects %v", bid, st.GetBatch().GetStatus(), st.GetObjects())
	}
	failed, kept := objectOf(t, st, "loc-corrected"), objectOf(t, st, "loc-kept")
	if failed.GetState() != queue.Failed || failed.GetFailedIn() != queue.Downloading || !strings.Contains(failed.GetReason(), "letter.txt") ||
		!strings.Contains(failed.GetReason(), good) || failed.GetArk() != "" || failed.GetVersion() != 0 {
		t.Errorf("the failed object: %v; want Failed in Downloading, its reason naming the file and its digest, no ARK", failed)
	}
	if kept.GetState() != queue.Completed || !strings.HasPrefix(kept.GetArk(), "ark:/") || kept.GetVersion() != 1 || kept.GetReason() != "" {
		t.Errorf("the completed object: %v; want Completed with its ARK and version 1", kept)
	}
	report := decoded(t, emails(t, bid)[bid+"-report.eml"])
	if !strings.Contains(report, kept.GetJobId()+"  "+kept.GetArk()+"  version 1  local id loc-kept") {
		t.Errorf("the report does not name the version stored:\n%s", report)
	}

	// Nothing moved since the report: an update report is refused.
	_, err = shared.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: bid})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "nothing new to report") {
		t.Errorf("update report with nothing new: %v, want FailedPrecondition saying so", err)
	}

	// The depositor corrects the manifest; the job is requeued at Estimating.
	d.Set("/corrected/object.checkm", objectManifest("/corrected/letter.txt", "letter.txt", good, len(letter)))
	served := strings.ReplaceAll(string(objectManifest("/corrected/letter.txt", "letter.txt", good, len(letter))), "{{base}}", d.URL)
	servedSum := sha256.Sum256([]byte(served))
	rq, err := shared.admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: failed.GetJobId(), State: queue.Estimating})
	if err != nil {
		t.Fatal(err)
	}
	if msg := rq.GetJob().GetStatus().GetMessage(); !strings.Contains(msg, "its file list is dropped: Estimating reads the object manifest "+d.URL+"/corrected/object.checkm again") {
		t.Errorf("the requeue says %q", msg)
	}
	var done *v1.Job
	waittest.Until(t, 2*time.Minute, func() error {
		j, err := shared.admin.GetJob(ctx, &v1.GetJobRequest{JobId: failed.GetJobId(), IncludeManifest: true})
		if err != nil {
			t.Fatal(err)
		}
		switch s := j.GetJob().GetStatus().GetStatus(); s {
		case queue.Completed:
			done = j.GetJob()
			return nil
		case queue.Failed:
			t.Fatalf("the requeued job: %v", j.GetJob().GetStatus())
		}
		return fmt.Errorf("the requeued job: %v", j.GetJob().GetStatus())
	})
	var read bool
	for _, h := range done.GetStatus().GetHistory() {
		read = read || (h.GetFrom() == queue.Estimating &&
			strings.HasPrefix(h.GetMessage(), fmt.Sprintf("object manifest %s/corrected/object.checkm read (sha256 %s): 1 files", d.URL, hex.EncodeToString(servedSum[:]))))
	}
	if !read {
		t.Errorf("the history does not say the corrected manifest was read: %v", done.GetStatus().GetHistory())
	}
	if got := done.GetIdentifiers().GetLocalId(); !slices.Equal(got, []string{"loc-corrected"}) {
		t.Errorf("local ids after the requeue: %v", got)
	}
	if f := done.GetManifest().GetFiles(); len(f) != 1 || f[0].GetHashValue() != good {
		t.Errorf("file list after the requeue: %v", f)
	}
	checkStoredAndRecorded(t, done)
	if v := done.GetInventory().GetVersion(); v != 1 {
		t.Errorf("the object was stored as version %d, want 1", v)
	}
	// The one version stored holds the corrected file.
	path, err := checkm.FilePath(done.GetInventory().GetManifestUrl())
	if err != nil {
		t.Fatal(err)
	}
	mf, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	m, err := checkm.Parse(mf, checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	for _, e := range m.Entries {
		if strings.HasSuffix(e.FileName, "letter.txt") {
			if p, err := checkm.FilePath(e.FileURL); err == nil {
				stored, _ = os.ReadFile(p)
			}
		}
	}
	if string(stored) != string(letter) {
		t.Errorf("the stored letter.txt is %q, want the corrected file", stored)
	}
	versions, err := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(path)), "v*"))
	if err != nil || len(versions) != 1 {
		t.Errorf("the object's folder in the store holds versions %v (%v), want v1 alone", versions, err)
	}

	// The update report is taken, names the version, and once sent an
	// update report with nothing new is refused again.
	if _, err := shared.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: bid}); err != nil {
		t.Fatal(err)
	}
	waitBatch(t, bid, queue.BatchFailed)
	var update string
	for name, body := range emails(t, bid) {
		if strings.Contains(name, "report-after") {
			update = decoded(t, body)
		}
	}
	if !strings.Contains(update, done.GetId()+"  "+done.GetIdentifiers().GetPrimaryId()+"  version 1  local id loc-corrected") {
		t.Errorf("the update report does not name the corrected object's version:\n%s", update)
	}
	_, err = shared.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: bid})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "nothing new to report") {
		t.Errorf("a second update report with nothing new: %v, want FailedPrecondition saying so", err)
	}
}
