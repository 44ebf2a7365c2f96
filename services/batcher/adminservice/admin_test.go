package adminservice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const token = "admin-test-token"

const profilesYAML = `name: demo
collection: demo_coll
owner: ark:/99999/fk4owner
notification_addresses: [depositor@example.org]
priority: 5
notify_on_queue: false
storage_target: local
`

const otherYAML = `name: other
collection: other_coll
owner: ark:/99999/fk4owner
notification_addresses: [other@example.org]
priority: 5
notify_on_queue: false
storage_target: local
`

type fixture struct {
	t      *testing.T
	q      *session.Session
	zkRoot string
	root   workdir.Root
	// storeRoot is the local object store VerifyObject reads.
	storeRoot string
	conn      *grpc.ClientConn
	server    *Server // served as admin
	admin     v1.AdminServiceClient
	ctx       context.Context // carries the token
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, zkRoot: zktest.Root(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	f.q, err = session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: f.zkRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.q.Close)
	dir := t.TempDir()
	for name, y := range map[string]string{"demo.yaml": profilesYAML, "other.yaml": otherYAML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	profiles, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.root, err = workdir.Open(filepath.Join(t.TempDir(), "work")); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(server.Options{Logger: log, AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	f.storeRoot = t.TempDir()
	f.server = &Server{Session: f.q, Profiles: profiles, Root: f.root, Logger: log,
		TraceURL: "https://tracing.example/trace/{trace_id}", Store: fixity.Location{Root: f.storeRoot}}
	v1.RegisterAdminServiceServer(srv, f.server)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing(true)
	go srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	f.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	f.admin = v1.NewAdminServiceClient(f.conn)
	f.ctx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	return f
}

// batch creates a Processing batch of profile with n pending jobs, each
// with a working directory holding a file; it returns the bid and jids.
func (f *fixture) batch(profileName, collection string, n int) (string, []string) {
	f.t.Helper()
	ctx := context.Background()
	bid, err := batches.New(f.q).CreateBatch(ctx, &v1.Submission{ProfileName: profileName, Submitter: "jdoe", PayloadUrl: "http://127.0.0.1/x.checkm",
		Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, BatchId: fmt.Sprintf("uuid-%d", time.Now().UnixNano())})
	if err != nil {
		f.t.Fatal(err)
	}
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		f.t.Fatal(err)
	}
	jobs := make([]batches.NewJob, n)
	for i := range jobs {
		jobs[i] = batches.NewJob{Priority: 5, WorkRoot: f.root.Dir(), Configuration: &v1.JobConfiguration{ProfileName: profileName, Collection: collection,
			PayloadUrl: fmt.Sprintf("http://127.0.0.1/%d.checkm", i), PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			BatchEntry: int32(i), Traceparent: fmt.Sprintf("00-%032x-00f067aa0ba902b7-01", i+1)},
			Manifest: &v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://127.0.0.1/a.txt", Size: 1, Name: "a.txt"}}}}
	}
	jids, err := bc.CreateJobs(ctx, jobs)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, jid := range jids {
		dir := f.root.Job(bid, jid)
		if err := os.MkdirAll(filepath.Join(dir, "producer"), 0o750); err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "producer", "a.txt"), []byte("a"), 0o600); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		f.t.Fatal(err)
	}
	return bid, jids
}

// heldBatch creates a batch of profile that a batcher held.
func (f *fixture) heldBatch(profileName string) string {
	f.t.Helper()
	ctx := context.Background()
	bid, err := batches.New(f.q).CreateBatch(ctx, &v1.Submission{ProfileName: profileName, Submitter: "jdoe", PayloadUrl: "http://127.0.0.1/a.pdf",
		Type: v1.PayloadType_PAYLOAD_TYPE_FILE})
	if err != nil {
		f.t.Fatal(err)
	}
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchHeld, Message: "held"}); err != nil {
		f.t.Fatal(err)
	}
	return bid
}

// fail moves a pending job to Failed.
func (f *fixture) fail(jid string) {
	f.t.Helper()
	ctx := context.Background()
	cl, err := jobs.New(f.q).ClaimJob(ctx, jid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
		f.t.Fatal(err)
	}
	if cl, err = jobs.New(f.q).ClaimJob(ctx, jid); err != nil {
		f.t.Fatal(err)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: "estimating broke on purpose"}); err != nil {
		f.t.Fatal(err)
	}
}

// wantStatus checks a refusal's code and that its message has every part.
func wantStatus(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Errorf("got %s %q, want %s", st.Code(), st.Message(), code)
		return
	}
	for _, p := range parts {
		if !strings.Contains(st.Message(), p) {
			t.Errorf("message %q does not contain %q", st.Message(), p)
		}
	}
}

func TestEveryAdminMethodNeedsTheAdminToken(t *testing.T) {
	f := newFixture(t)
	sd := v1.File_ingestq_v1_admin_service_proto.Services().ByName("AdminService")
	methods := sd.Methods()
	if methods.Len() != 29 {
		t.Errorf("AdminService has %d methods, this test expects 29", methods.Len())
	}
	for i := range methods.Len() {
		m := methods.Get(i)
		t.Run(string(m.Name()), func(t *testing.T) {
			call := func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				return f.conn.Invoke(ctx, "/ingestq.v1.AdminService/"+string(m.Name()),
					dynamicpb.NewMessage(m.Input()), dynamicpb.NewMessage(m.Output()))
			}
			wantStatus(t, call(context.Background()), codes.Unauthenticated)
			wrong := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer not-the-token")
			wantStatus(t, call(wrong), codes.PermissionDenied)
			// With the token the call gets past auth (empty requests of
			// methods with arguments are refused by validation).
			if code := status.Code(call(f.ctx)); code == codes.Unauthenticated || code == codes.PermissionDenied {
				t.Errorf("with the token: %s", code)
			}
		})
	}
}

func TestPauseHoldAndTheQueueOverview(t *testing.T) {
	f := newFixture(t)
	f.batch("demo", "demo_coll", 3)
	if r, err := f.admin.PauseQueue(f.ctx, &v1.PauseQueueRequest{}); err != nil || !r.GetPaused() {
		t.Fatalf("PauseQueue: %v %v", r, err)
	}
	if _, err := f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	reg, err := jobs.New(f.q).RegisterWorker(context.Background(), &v1.WorkerInfo{Id: "estimator-test-1", Service: "estimator", Stage: "Estimating"})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	q, err := f.admin.GetQueue(f.ctx, &v1.GetQueueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !q.GetPaused() || q.GetJobsByState()["Pending"] != 3 || strings.Join(q.GetHeldCollections(), ",") != "demo_coll" {
		t.Errorf("GetQueue: %v", q)
	}
	if len(q.GetWorkers()) != 1 || q.GetWorkers()[0].GetId() != "estimator-test-1" {
		t.Errorf("GetQueue workers: %v", q.GetWorkers())
	}
	w, err := f.admin.ListWorkers(f.ctx, &v1.ListWorkersRequest{})
	if err != nil || len(w.GetWorkers()) != 1 || w.GetWorkers()[0].GetStage() != "Estimating" {
		t.Errorf("ListWorkers: %v %v", w, err)
	}
	if r, err := f.admin.UnpauseQueue(f.ctx, &v1.UnpauseQueueRequest{}); err != nil || r.GetPaused() {
		t.Fatalf("UnpauseQueue: %v %v", r, err)
	}
	if paused, _ := jobs.New(f.q).Paused(context.Background()); paused {
		t.Error("the queue is still paused")
	}
	_, err = f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "a/b"})
	wantStatus(t, err, codes.InvalidArgument, "collection", "'/'")
	_, err = f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{})
	wantStatus(t, err, codes.InvalidArgument, "collection is required")
}

func TestReleasingACollectionReturnsItsHeldBatchesAndJobsToPending(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	held := f.heldBatch("demo")
	otherHeld := f.heldBatch("other")
	_, jids := f.batch("demo", "demo_coll", 2)
	_, otherJids := f.batch("other", "other_coll", 1)
	for _, jid := range []string{jids[0], otherJids[0]} {
		if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jid}); err != nil {
			t.Fatal(err)
		}
	}
	// While the collection is held, its batch and job stay held.
	_, err := f.admin.ReleaseBatch(f.ctx, &v1.ReleaseBatchRequest{BatchId: held})
	wantStatus(t, err, codes.FailedPrecondition, "batch "+held, "demo_coll", "still held")
	_, err = f.admin.ReleaseJob(f.ctx, &v1.ReleaseJobRequest{JobId: jids[0]})
	wantStatus(t, err, codes.FailedPrecondition, "job "+jids[0], "demo_coll", "still held")

	r, err := f.admin.ReleaseCollection(f.ctx, &v1.ReleaseCollectionRequest{Collection: "demo_coll"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.GetReleasedBatches(), ",") != held || strings.Join(r.GetReleasedJobs(), ",") != jids[0] || len(r.GetNotReleased()) != 0 {
		t.Errorf("ReleaseCollection: %v", r)
	}
	if b, _ := batches.New(f.q).GetBatch(ctx, held); b.GetStatus().GetStatus() != queue.BatchPending {
		t.Errorf("released batch is %s", b.GetStatus().GetStatus())
	}
	if st, _ := jobs.NewReader(f.q).JobStatus(ctx, jids[0]); st.GetStatus() != queue.Pending {
		t.Errorf("released job is %s", st.GetStatus())
	}
	// The other collection's held items are untouched.
	if b, _ := batches.New(f.q).GetBatch(ctx, otherHeld); b.GetStatus().GetStatus() != queue.BatchHeld {
		t.Errorf("other collection's batch is %s", b.GetStatus().GetStatus())
	}
	if st, _ := jobs.NewReader(f.q).JobStatus(ctx, otherJids[0]); st.GetStatus() != queue.Held {
		t.Errorf("other collection's job is %s", st.GetStatus())
	}
	// A batch whose collection is not held is released directly.
	rb, err := f.admin.ReleaseBatch(f.ctx, &v1.ReleaseBatchRequest{BatchId: otherHeld})
	if err != nil || rb.GetBatch().GetStatus().GetStatus() != queue.BatchPending {
		t.Errorf("ReleaseBatch: %v %v", rb, err)
	}
	_, err = f.admin.ReleaseBatch(f.ctx, &v1.ReleaseBatchRequest{BatchId: otherHeld})
	wantStatus(t, err, codes.FailedPrecondition, otherHeld, "is Pending")
}

func TestBatchActionsAndTheirRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	bid, jids := f.batch("demo", "demo_coll", 3)

	g, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	if err != nil || g.GetBatch().GetCounts().GetProcessing() != 3 {
		t.Fatalf("GetBatch: %v %v", g, err)
	}
	byUUID, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchUuid{BatchUuid: g.GetBatch().GetSubmission().GetBatchId()}})
	if err != nil || byUUID.GetBatch().GetId() != bid {
		t.Errorf("GetBatch by uuid: %v %v", byUUID, err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		parts []string
	}{
		{"get a batch that does not exist", func() error {
			_, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: "bid9999999999"}})
			return err
		}, codes.NotFound, []string{"batch bid9999999999 not found"}},
		{"get a batch by an unknown uuid", func() error {
			_, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchUuid{BatchUuid: "no-such-uuid"}})
			return err
		}, codes.NotFound, []string{"no-such-uuid not found"}},
		{"get a batch without a selector", func() error {
			_, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{})
			return err
		}, codes.InvalidArgument, []string{"batch_id or batch_uuid is required"}},
		{"a malformed bid", func() error {
			_, err := f.admin.DeleteBatch(f.ctx, &v1.DeleteBatchRequest{BatchId: "bid42"})
			return err
		}, codes.InvalidArgument, []string{`batch_id "bid42" is not a bid id`}},
		{"update-report a batch still processing", func() error {
			_, err := f.admin.UpdateReportBatch(f.ctx, &v1.UpdateReportBatchRequest{BatchId: bid})
			return err
		}, codes.FailedPrecondition, []string{bid, "is Processing"}},
		{"delete a batch still processing", func() error {
			_, err := f.admin.DeleteBatch(f.ctx, &v1.DeleteBatchRequest{BatchId: bid})
			return err
		}, codes.FailedPrecondition, []string{bid, "is Processing, not Held or Failed"}},
		{"release a batch that is not held", func() error {
			_, err := f.admin.ReleaseBatch(f.ctx, &v1.ReleaseBatchRequest{BatchId: bid})
			return err
		}, codes.FailedPrecondition, []string{bid, "is Processing"}},
		{"list batches with a page size too large", func() error {
			_, err := f.admin.ListBatches(f.ctx, &v1.ListBatchesRequest{PageSize: 501})
			return err
		}, codes.InvalidArgument, []string{"page_size 501 is outside 0..500"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), tc.code, tc.parts...) })
	}

	// Fail every job: the batch can be reported, then deleted.
	for _, jid := range jids {
		f.fail(jid)
	}
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Report: &v1.StatusReport{FailedJobs: jids}}); err != nil {
		t.Fatal(err)
	}
	// A requeued job that is still live blocks the update report.
	if _, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[0]}); err != nil {
		t.Fatal(err)
	}
	_, err = f.admin.UpdateReportBatch(f.ctx, &v1.UpdateReportBatchRequest{BatchId: bid})
	wantStatus(t, err, codes.FailedPrecondition, "1 live job")
	_, err = f.admin.DeleteBatch(f.ctx, &v1.DeleteBatchRequest{BatchId: bid})
	wantStatus(t, err, codes.FailedPrecondition, "live job", jids[0])
	if _, err := f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[0], Message: "given up"}); err != nil {
		t.Fatal(err)
	}
	u, err := f.admin.UpdateReportBatch(f.ctx, &v1.UpdateReportBatchRequest{BatchId: bid})
	if err != nil || u.GetBatch().GetStatus().GetStatus() != queue.BatchUpdateReporting {
		t.Fatalf("UpdateReportBatch: %v %v", u, err)
	}
	// Back to Failed (as the batcher would after its second report), then delete.
	bc, err = batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed}); err != nil {
		t.Fatal(err)
	}
	d, err := f.admin.DeleteBatch(f.ctx, &v1.DeleteBatchRequest{BatchId: bid})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(d.GetDeletedJobs(), ",") != strings.Join(jids, ",") {
		t.Errorf("deleted jobs %v, want %v", d.GetDeletedJobs(), jids)
	}
	if _, err := os.Stat(f.root.Batch(bid)); !os.IsNotExist(err) {
		t.Errorf("batch directory still there: %v", err)
	}
	_, err = f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	wantStatus(t, err, codes.NotFound, "batch "+bid+" not found")
	_, err = f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[1]})
	wantStatus(t, err, codes.NotFound, "job "+jids[1]+" not found")

	// A held batch is deleted too.
	held := f.heldBatch("demo")
	if _, err := f.admin.DeleteBatch(f.ctx, &v1.DeleteBatchRequest{BatchId: held}); err != nil {
		t.Errorf("deleting a held batch: %v", err)
	}
}

func TestListingBatchesFiltersAndPages(t *testing.T) {
	f := newFixture(t)
	var bids []string
	for range 5 {
		bid, _ := f.batch("demo", "demo_coll", 1)
		bids = append(bids, bid)
	}
	held := f.heldBatch("demo")
	var got []string
	token := ""
	for range 10 {
		r, err := f.admin.ListBatches(f.ctx, &v1.ListBatchesRequest{Status: queue.BatchProcessing, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range r.GetBatches() {
			got = append(got, b.GetId())
		}
		if token = r.GetNextPageToken(); token == "" {
			break
		}
	}
	want := []string{bids[4], bids[3], bids[2], bids[1], bids[0]}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Processing batches, newest first: %v, want %v", got, want)
	}
	r, err := f.admin.ListBatches(f.ctx, &v1.ListBatchesRequest{Status: queue.BatchHeld})
	if err != nil || len(r.GetBatches()) != 1 || r.GetBatches()[0].GetId() != held {
		t.Errorf("Held batches: %v %v", r, err)
	}
	r, err = f.admin.ListBatches(f.ctx, &v1.ListBatchesRequest{Submitter: "nobody"})
	if err != nil || len(r.GetBatches()) != 0 {
		t.Errorf("batches of nobody: %v %v", r, err)
	}
}

func TestJobActionsAndTheirRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	bid, jids := f.batch("demo", "demo_coll", 4)

	g, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0], IncludeManifest: true})
	if err != nil || g.GetJob().GetBid() != bid || len(g.GetJob().GetManifest().GetFiles()) != 1 {
		t.Fatalf("GetJob: %v %v", g, err)
	}
	if want := fmt.Sprintf("%032x", 1); g.GetTraceId() != want || g.GetTraceUrl() != "https://tracing.example/trace/"+want {
		t.Errorf("GetJob: trace id %q, url %q, want the job's trace %s and its link", g.GetTraceId(), g.GetTraceUrl(), want)
	}
	if g, _ := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0]}); g.GetJob().GetManifest() != nil {
		t.Error("GetJob without include_manifest returned the manifest")
	}
	lj, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{BatchId: bid, PageSize: 3})
	if err != nil || len(lj.GetJobs()) != 3 || lj.GetNextPageToken() == "" {
		t.Fatalf("ListJobs page 1: %v %v", lj, err)
	}
	lj2, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{BatchId: bid, PageSize: 3, PageToken: lj.GetNextPageToken()})
	if err != nil || len(lj2.GetJobs()) != 1 || lj2.GetJobs()[0].GetId() != jids[3] || lj2.GetNextPageToken() != "" {
		t.Fatalf("ListJobs page 2: %v %v", lj2, err)
	}

	// Hold, release, reprioritise, fail, requeue.
	h, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jids[0], Message: "checking the depositor's rights"})
	if err != nil || h.GetJob().GetStatus().GetStatus() != queue.Held || h.GetJob().GetStatus().GetMessage() != "checking the depositor's rights" {
		t.Fatalf("HoldJob: %v %v", h, err)
	}
	byState, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{State: queue.Held})
	if err != nil || len(byState.GetJobs()) != 1 || byState.GetJobs()[0].GetId() != jids[0] {
		t.Errorf("ListJobs Held: %v %v", byState, err)
	}
	if r, err := f.admin.ReleaseJob(f.ctx, &v1.ReleaseJobRequest{JobId: jids[0]}); err != nil || r.GetJob().GetStatus().GetStatus() != queue.Pending {
		t.Errorf("ReleaseJob: %v %v", r, err)
	}
	p, err := f.admin.ReprioritizeJob(f.ctx, &v1.ReprioritizeJobRequest{JobId: jids[1], Priority: ptr(int32(0))})
	if err != nil || p.GetJob().GetPriority() != 0 {
		t.Errorf("ReprioritizeJob: %v %v", p, err)
	}
	first, _ := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{State: queue.Pending, PageSize: 1})
	if len(first.GetJobs()) != 1 || first.GetJobs()[0].GetId() != jids[1] {
		t.Errorf("the reprioritised job is not first in Pending: %v", first.GetJobs())
	}
	fj, err := f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[2], Message: "depositor withdrew it"})
	if err != nil || fj.GetJob().GetStatus().GetStatus() != queue.Failed {
		t.Fatalf("FailJob: %v %v", fj, err)
	}
	// It never got past Pending: Downloading would find no file list.
	_, err = f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[2], State: queue.Downloading})
	wantStatus(t, err, codes.FailedPrecondition, "cannot be requeued to Downloading", "it may be requeued to Pending, Estimating")
	rq, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[2], State: queue.Estimating})
	if err != nil || rq.GetJob().GetStatus().GetStatus() != queue.Estimating || rq.GetJob().GetStatus().GetRetryCount() != 1 {
		t.Fatalf("RequeueJob to Estimating: %v %v", rq, err)
	}

	// A job a consumer holds.
	other, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: f.zkRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cl, err := jobs.New(other).ClaimJob(ctx, jids[3])
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		call  func() error
		code  codes.Code
		parts []string
	}{
		{"hold a job that is not pending", func() error {
			_, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jids[2]})
			return err
		}, codes.FailedPrecondition, []string{jids[2], "is Estimating, not Pending"}},
		{"release a job that is not held", func() error {
			_, err := f.admin.ReleaseJob(f.ctx, &v1.ReleaseJobRequest{JobId: jids[1]})
			return err
		}, codes.FailedPrecondition, []string{jids[1], "is Pending, not Held"}},
		{"requeue a job that has not failed", func() error {
			_, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[1]})
			return err
		}, codes.FailedPrecondition, []string{jids[1], "is Pending, not Failed"}},
		{"requeue to a state a job cannot resume at", func() error {
			_, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[2], State: queue.Completed})
			return err
		}, codes.InvalidArgument, []string{"JOB_STATE_COMPLETED"}},
		{"reprioritise without a priority", func() error {
			_, err := f.admin.ReprioritizeJob(f.ctx, &v1.ReprioritizeJobRequest{JobId: jids[1]})
			return err
		}, codes.InvalidArgument, []string{"priority is required"}},
		{"reprioritise beyond 99", func() error {
			_, err := f.admin.ReprioritizeJob(f.ctx, &v1.ReprioritizeJobRequest{JobId: jids[1], Priority: ptr(int32(100))})
			return err
		}, codes.InvalidArgument, []string{"priority 100 is outside 0..99"}},
		{"delete a live job", func() error {
			_, err := f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jids[1]})
			return err
		}, codes.FailedPrecondition, []string{jids[1], "is Pending, not Failed or Held"}},
		{"act on a job a consumer is working on", func() error {
			_, err := f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[3]})
			return err
		}, codes.Aborted, []string{jids[3], "try again"}},
		{"a job that does not exist", func() error {
			_, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: "jid9999999999"})
			return err
		}, codes.NotFound, []string{"job jid9999999999 not found"}},
		{"a malformed jid", func() error {
			_, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: "42"})
			return err
		}, codes.InvalidArgument, []string{`job_id "42" is not a jid id`}},
		{"a message with a line break", func() error {
			_, err := f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[1], Message: "a\nb"})
			return err
		}, codes.InvalidArgument, []string{"message contains control character"}},
		{"list jobs by state and batch at once", func() error {
			_, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{State: queue.Pending, BatchId: bid})
			return err
		}, codes.InvalidArgument, []string{"give one of them"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), tc.code, tc.parts...) })
	}
	cl.Release(ctx)

	// Deleting a failed job of an open batch needs force; it takes the
	// working directory with it.
	f.fail(jids[1])
	_, err = f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jids[1]})
	wantStatus(t, err, codes.FailedPrecondition, "batch "+bid, "is still Processing", "force")
	dj, err := f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jids[1], Force: true})
	if err != nil || dj.GetWorkingDir() != f.root.Job(bid, jids[1]) {
		t.Fatalf("DeleteJob with force: %v %v", dj, err)
	}
	if _, err := os.Stat(f.root.Job(bid, jids[1])); !os.IsNotExist(err) {
		t.Errorf("working directory of the deleted job is still there: %v", err)
	}
	if _, err := os.Stat(f.root.Job(bid, jids[0])); err != nil {
		t.Errorf("another job's working directory went too: %v", err)
	}
	if c, _ := batches.New(f.q).BatchCounts(ctx, bid); c.GetDeleted() != 1 {
		t.Errorf("batch counts after the deletion: %v", c)
	}
}

func TestFsckReportsAndRepairsDamage(t *testing.T) {
	f := newFixture(t)
	f.batch("demo", "demo_coll", 2)
	r, err := f.admin.Fsck(f.ctx, &v1.FsckRequest{})
	if err != nil || !r.GetClean() || r.GetJobsChecked() != 2 || r.GetBatchesChecked() != 1 {
		t.Fatalf("Fsck of a sound tree: %v %v", r, err)
	}
	// A state entry whose job is gone, as a crashed non-atomic writer leaves it.
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stray := f.zkRoot + "/jobs/states/pending/05-jid9999999999"
	if _, err := conn.Create(stray, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	r, err = f.admin.Fsck(f.ctx, &v1.FsckRequest{})
	if err != nil || r.GetClean() || len(r.GetDamages()) != 1 {
		t.Fatalf("Fsck: %v %v", r, err)
	}
	if d := r.GetDamages()[0]; d.GetKind() != admin.DamageEntryNoJob || d.GetItem() != "jid9999999999" || d.GetRepaired() {
		t.Errorf("damage %v", d)
	}
	if ok, _, _ := conn.Exists(stray); !ok {
		t.Error("Fsck without repair changed the tree")
	}
	r, err = f.admin.Fsck(f.ctx, &v1.FsckRequest{Repair: true})
	if err != nil || len(r.GetDamages()) != 1 || !r.GetDamages()[0].GetRepaired() {
		t.Fatalf("Fsck with repair: %v %v", r, err)
	}
	if ok, _, _ := conn.Exists(stray); ok {
		t.Error("the stray entry is still there after the repair")
	}
}

func ptr[T any](v T) *T { return &v }

// TestAReportPastWhatANodeHoldsIsReadWithItsTotals: GetBatch answers a
// batch whose report was trimmed with the report as stored (lists trimmed,
// totals whole), ListBatches with its totals only.
func TestAReportPastWhatANodeHoldsIsReadWithItsTotals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	bid, jids := f.batch("demo", "demo_coll", 1)
	f.fail(jids[0])
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		t.Fatal(err)
	}
	successful := make([]string, 100000)
	for i := range successful {
		successful[i] = fmt.Sprintf("jid%010d", 1_000_000+i)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed,
		Report: &v1.StatusReport{LastModified: timestamppb.Now(), FailedJobs: jids, SuccessfulJobs: successful}}); err != nil {
		t.Fatal(err)
	}
	got, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	if err != nil {
		t.Fatal(err)
	}
	rep := got.GetBatch().GetStatusReport()
	if rep.GetFailedJobsTotal() != 1 || rep.GetSuccessfulJobsTotal() != 100000 || len(rep.GetFailedJobs()) != 1 ||
		len(rep.GetSuccessfulJobs()) < 50000 || len(rep.GetSuccessfulJobs()) >= 100000 {
		t.Errorf("GetBatch: report of %d/%d failed, %d/%d successful", len(rep.GetFailedJobs()), rep.GetFailedJobsTotal(),
			len(rep.GetSuccessfulJobs()), rep.GetSuccessfulJobsTotal())
	}
	list, err := f.admin.ListBatches(f.ctx, &v1.ListBatchesRequest{})
	if err != nil || len(list.GetBatches()) != 1 {
		t.Fatalf("ListBatches: %v %v", list, err)
	}
	rep = list.GetBatches()[0].GetStatusReport()
	if rep.GetFailedJobsTotal() != 1 || rep.GetSuccessfulJobsTotal() != 100000 || len(rep.GetFailedJobs())+len(rep.GetSuccessfulJobs()) != 0 ||
		rep.GetLastModified() == nil {
		t.Errorf("ListBatches: report %v", rep)
	}
}

// TestRequeueJobResumesAJobThatFailedInStoringAtStoring: after Processing
// the state after the last successful one is Storing, and Storing may be
// named, as the peer library's admin does.
func TestRequeueJobResumesAJobThatFailedInStoringAtStoring(t *testing.T) {
	f := newFixture(t)
	_, jids := f.batch("demo", "demo_coll", 2)
	for _, jid := range jids {
		for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
			queue.Storing, queue.Failed} {
			queuetest.Move(t, f.q, jid, queuetest.WithProducts(jobs.Change{To: to, Message: "store full"}))
		}
	}
	after, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[0]})
	if st := after.GetJob().GetStatus(); err != nil || st.GetStatus() != queue.Storing || st.GetRetryCount() != 1 {
		t.Errorf("RequeueJob after its last successful state: %v %v, want Storing, retry 1", st, err)
	}
	named, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[1], State: queue.Storing})
	if st := named.GetJob().GetStatus(); err != nil || st.GetStatus() != queue.Storing || st.GetLastSuccessfulStatus() != queue.Processing {
		t.Errorf("RequeueJob at Storing: %v %v, want Storing after Processing", st, err)
	}
}

// complete drives a batch's jobs to Completed and the batch to Completed.
func (f *fixture) complete(bid string, jids []string) {
	f.t.Helper()
	ctx := context.Background()
	for _, jid := range jids {
		for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
			queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			cl, err := jobs.New(f.q).ClaimJob(ctx, jid)
			if err != nil {
				f.t.Fatal(err)
			}
			if err := cl.Commit(ctx, jobs.Change{To: to}); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchCompleted, Message: "all done"}); err != nil {
		f.t.Fatal(err)
	}
}

func TestCleanupBatchesRemovesCompletedBatchesNowAndRefusesUnclearRequests(t *testing.T) {
	f := newFixture(t)
	done1, jids1 := f.batch("demo", "demo_coll", 2)
	done2, jids2 := f.batch("demo", "demo_coll", 1)
	open, _ := f.batch("demo", "demo_coll", 1)
	f.complete(done1, jids1)
	f.complete(done2, jids2)

	for _, tc := range []struct {
		name string
		req  *v1.CleanupBatchesRequest
		want []string
	}{
		{"no older_than", &v1.CleanupBatchesRequest{}, []string{"older_than is required"}},
		{"a negative older_than", &v1.CleanupBatchesRequest{OlderThan: durationpb.New(-time.Second)}, []string{"older_than -1s"}},
		{"a negative max_batches", &v1.CleanupBatchesRequest{OlderThan: durationpb.New(0), MaxBatches: -1}, []string{"max_batches -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.admin.CleanupBatches(f.ctx, tc.req)
			wantStatus(t, err, codes.InvalidArgument, tc.want...)
		})
	}

	// Completed a moment ago: not older than an hour.
	resp, err := f.admin.CleanupBatches(f.ctx, &v1.CleanupBatchesRequest{OlderThan: durationpb.New(time.Hour)})
	if err != nil || len(resp.GetBatchIds()) != 0 {
		t.Fatalf("older than an hour: removed %v (%v), want none", resp.GetBatchIds(), err)
	}
	resp, err = f.admin.CleanupBatches(f.ctx, &v1.CleanupBatchesRequest{OlderThan: durationpb.New(0), MaxBatches: 1})
	if err != nil || len(resp.GetBatchIds()) != 1 {
		t.Fatalf("max_batches 1: removed %v (%v), want one batch", resp.GetBatchIds(), err)
	}
	first := resp.GetBatchIds()[0]
	resp, err = f.admin.CleanupBatches(f.ctx, &v1.CleanupBatchesRequest{OlderThan: durationpb.New(0)})
	if err != nil || len(resp.GetBatchIds()) != 1 || resp.GetBatchIds()[0] == first {
		t.Fatalf("the second call removed %v (%v), want the other completed batch", resp.GetBatchIds(), err)
	}
	if n, err := jobs.NewReader(f.q).JobTotal(context.Background()); err != nil || n != 1 {
		t.Errorf("the queue holds %d jobs (%v), want the open batch's one", n, err)
	}
	for _, bid := range []string{done1, done2} {
		if _, err := os.Stat(filepath.Join(f.root.Dir(), bid)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s's working folder is still there (%v)", bid, err)
		}
	}
	if _, err := batches.New(f.q).GetBatch(context.Background(), open); err != nil {
		t.Errorf("the open batch: %v", err)
	}
}

func TestVerifyObjectReadsAStoredVersionBackAndReportsEachMismatch(t *testing.T) {
	f := newFixture(t)
	vdir := filepath.Join(f.storeRoot, "ark_99999_fk4v", "v1")
	files := map[string]string{"producer/a.txt": "alpha", "producer/b.txt": "bravo", "producer/c.txt": "charlie", "system/mrt-erc.txt": "erc:\n"}
	var entries []checkm.Entry
	for _, name := range []string{"producer/a.txt", "producer/b.txt", "producer/c.txt", "system/mrt-erc.txt"} {
		p := filepath.Join(vdir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(files[name]))
		entries = append(entries, checkm.Entry{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256", HashValue: hex.EncodeToString(sum[:]),
			FileSize: int64(len(files[name])), FileName: name})
	}
	mf, err := os.Create(filepath.Join(vdir, "manifest.checkm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkm.Write(mf, checkm.ProfileObject, []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}, entries); err != nil {
		t.Fatal(err)
	}
	mf.Close()

	resp, err := f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4v", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetOk() || resp.GetFiles() != 4 || resp.GetBytes() != 22 || len(resp.GetMismatches()) != 0 {
		t.Fatalf("intact version: %v", resp)
	}
	// Bit rot (same size, other bytes), a truncation, a loss.
	os.WriteFile(filepath.Join(vdir, "producer", "a.txt"), []byte("ALPHA"), 0o644)
	os.WriteFile(filepath.Join(vdir, "producer", "b.txt"), []byte("bra"), 0o644)
	os.Remove(filepath.Join(vdir, "producer", "c.txt"))
	resp, err = f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4v", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range resp.GetMismatches() {
		got[m.GetFile()] = m.GetProblem()
	}
	if resp.GetOk() || len(got) != 3 || !strings.HasPrefix(got["producer/a.txt"], "digest: sha256 of the stored file is") ||
		got["producer/b.txt"] != "size: 3 bytes stored, the manifest says 5" || !strings.HasPrefix(got["producer/c.txt"], "unreadable: ") {
		t.Errorf("damaged version: %v", resp)
	}
	_, err = f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4v", Version: 2})
	wantStatus(t, err, codes.NotFound, "version 2 of ark:/99999/fk4v is not in the store")
	if strings.Contains(status.Convert(err).Message(), f.storeRoot) {
		t.Errorf("the refusal shows the store's path: %v", err)
	}

	// No version named: the latest one stored, v1, then v2 once stored.
	latest, err := f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4v"})
	if err != nil || latest.GetVersion() != 1 || latest.GetOk() || len(latest.GetMismatches()) != 3 {
		t.Fatalf("the latest version (v1): %v %v", latest, err)
	}
	v2 := filepath.Join(f.storeRoot, "ark_99999_fk4v", "v2")
	if err := os.MkdirAll(v2, 0o755); err != nil {
		t.Fatal(err)
	}
	mf, err = os.Create(filepath.Join(v2, "manifest.checkm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkm.Write(mf, checkm.ProfileObject, []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}, entries[3:]); err != nil {
		t.Fatal(err)
	}
	mf.Close()
	if latest, err = f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4v"}); err != nil || latest.GetVersion() != 2 || !latest.GetOk() {
		t.Errorf("the latest version (v2): %v %v", latest, err)
	}
	_, err = f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4nothing"})
	wantStatus(t, err, codes.NotFound, "ark:/99999/fk4nothing has no version in the store")
	_, err = f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "not-an-ark"})
	wantStatus(t, err, codes.InvalidArgument, `ark "not-an-ark" is not an ARK: want ark:/NAAN/name`)
	_, err = f.admin.VerifyObject(f.ctx, &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4v", Version: -1})
	wantStatus(t, err, codes.InvalidArgument, "version")
}
