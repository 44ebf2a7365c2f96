package submit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/zktest"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestMain(m *testing.M) {
	// The shared server's otelgrpc handler uses the otel globals: with a
	// real provider and the W3C propagator, a Submit call has a span whose
	// context the submission stores.
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.TraceContext{})
	zktest.Main(m)
}

const demoYAML = `name: demo
collection: demo_coll
owner: ark:/99999/fk4owner
notification_addresses: [depositor@example.org]
priority: 5
notify_on_queue: false
storage_target: local
`

type fixture struct {
	q      *session.Session
	zkRoot string
	conn   *grpc.ClientConn
	client v1.BatchServiceClient
}

func newFixture(t *testing.T, policy fetch.Policy) *fixture {
	t.Helper()
	f := &fixture{zkRoot: zktest.Root(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	f.q, err = session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: f.zkRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.q.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "demo.yaml"), []byte(demoYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(server.Options{Logger: log, AdminToken: "token"})
	if err != nil {
		t.Fatal(err)
	}
	v1.RegisterBatchServiceServer(srv, &Server{Batches: batches.New(f.q), Jobs: jobs.NewReader(f.q), Profiles: profiles, Policy: policy, Logger: log,
		TraceURL: "https://tracing.example/trace/{trace_id}"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f.conn = conn
	f.client = v1.NewBatchServiceClient(conn)
	return f
}

func valid() *v1.SubmitRequest {
	return &v1.SubmitRequest{
		Submitter:   "jdoe",
		Profile:     "demo",
		PayloadUrl:  "https://example.org/deposits/batch.checkm",
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		Metadata:    &v1.Metadata{Who: "Hale, Margaret", What: "Letters", When: "1921", Where: "ark:/99999/fk4where"},
	}
}

func TestSubmitWritesAPendingBatchAndAnswersWithItsIDs(t *testing.T) {
	f := newFixture(t, fetch.Policy{})
	// The caller's trace: the submission must continue it.
	const callerTrace = "0af7651916cd43dd8448eb211c80319c"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+callerTrace+"-b7ad6b7169203331-01")

	req := valid()
	req.BatchUuid = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	resp, err := f.client.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !queue.ValidBatchID(resp.GetBatchId()) || resp.GetBatchUuid() != req.BatchUuid {
		t.Errorf("Submit answered %v", resp)
	}
	b, err := batches.New(f.q).GetBatch(context.Background(), resp.GetBatchId())
	if err != nil {
		t.Fatal(err)
	}
	sub := b.GetSubmission()
	if b.GetStatus().GetStatus() != queue.BatchPending || sub.GetProfileName() != "demo" || sub.GetSubmitter() != "jdoe" ||
		sub.GetPayloadUrl() != req.PayloadUrl || sub.GetType() != req.PayloadType || sub.GetBatchId() != req.BatchUuid ||
		sub.GetSubmissionMode() != v1.SubmissionMode_SUBMISSION_MODE_ADD || sub.GetMetadata().GetWho() != "Hale, Margaret" ||
		sub.GetCollection() != "demo_coll" {
		t.Errorf("stored batch %v", b)
	}
	if !strings.Contains(sub.GetTraceparent(), callerTrace) || sub.GetTraceparent() != resp.GetTraceparent() {
		t.Errorf("stored traceparent %q (answered %q) does not continue trace %s", sub.GetTraceparent(), resp.GetTraceparent(), callerTrace)
	}
	if bid, err := batches.New(f.q).BatchByUUID(context.Background(), req.BatchUuid); err != nil || bid != resp.GetBatchId() {
		t.Errorf("uuid lookup: %s %v", bid, err)
	}
	st, err := f.client.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchUuid{BatchUuid: req.BatchUuid}})
	if err != nil || st.GetBatch().GetId() != resp.GetBatchId() {
		t.Errorf("GetBatchStatus by uuid: %v %v", st, err)
	}
	if st.GetTraceId() != callerTrace || st.GetTraceUrl() != "https://tracing.example/trace/"+callerTrace {
		t.Errorf("GetBatchStatus: trace id %q, url %q, want the batch's trace %s and its link", st.GetTraceId(), st.GetTraceUrl(), callerTrace)
	}

	// Without a uuid one is generated, and the same uuid twice is refused.
	req2 := valid()
	resp2, err := f.client.Submit(ctx, req2)
	if err != nil || len(resp2.GetBatchUuid()) != 36 || resp2.GetBatchId() == resp.GetBatchId() {
		t.Errorf("Submit without a uuid: %v %v", resp2, err)
	}
	_, err = f.client.Submit(ctx, req)
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), resp.GetBatchId()) {
		t.Errorf("resubmitting uuid %s: %v, want AlreadyExists naming %s", req.BatchUuid, err, resp.GetBatchId())
	}
	_, err = f.client.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: "bid9999999999"}})
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "batch bid9999999999 not found" {
		t.Errorf("GetBatchStatus of a missing batch: %v", err)
	}
}

func TestSubmitRefusesEachBadFieldNamingIt(t *testing.T) {
	deny, err := fetch.ParseDeny("198.51.100.0/24")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, fetch.Policy{Deny: deny, AllowSetting: "INGESTQ_FETCH_ALLOW"})
	long := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name string
		edit func(*v1.SubmitRequest)
		want string
	}{
		{"no submitter", func(r *v1.SubmitRequest) { r.Submitter = "" }, "submitter is required"},
		{"a submitter too long", func(r *v1.SubmitRequest) { r.Submitter = long(257) }, "submitter is 257 bytes, at most 256 allowed"},
		{"no profile", func(r *v1.SubmitRequest) { r.Profile = "" }, "profile is required"},
		{"an unknown profile", func(r *v1.SubmitRequest) { r.Profile = "nope" }, `profile "nope" is not configured; known profiles: demo`},
		{"a profile that is a path", func(r *v1.SubmitRequest) { r.Profile = "../demo" }, "must not contain '/'"},
		{"no payload url", func(r *v1.SubmitRequest) { r.PayloadUrl = "" }, "payload_url is required"},
		{"an ftp url", func(r *v1.SubmitRequest) { r.PayloadUrl = "ftp://example.org/a.zip" }, `scheme "ftp" is not allowed, only http and https`},
		{"a file url", func(r *v1.SubmitRequest) { r.PayloadUrl = "file:///etc/passwd" }, `scheme "file" is not allowed`},
		{"a url without host", func(r *v1.SubmitRequest) { r.PayloadUrl = "http:///a.zip" }, "has no host"},
		{"a url with credentials", func(r *v1.SubmitRequest) { r.PayloadUrl = "https://user:secret@example.org/a.zip" }, "carries credentials"},
		{"a url in a denied range", func(r *v1.SubmitRequest) { r.PayloadUrl = "http://198.51.100.7/a.zip" }, "payload_url"},
		{"a loopback url, by default", func(r *v1.SubmitRequest) { r.PayloadUrl = "http://127.0.0.1:8080/a.zip" },
			"address denied by policy: 127.0.0.1 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)"},
		{"a private url, by default", func(r *v1.SubmitRequest) { r.PayloadUrl = "http://10.1.2.3/a.zip" }, "(INGESTQ_FETCH_ALLOW=10.0.0.0/8 allows it)"},
		{"a link-local url", func(r *v1.SubmitRequest) { r.PayloadUrl = "http://[fe80::1]/a.zip" }, "fe80::1 is in fe80::/10"},
		{"a metadata address of the cloud", func(r *v1.SubmitRequest) { r.PayloadUrl = "http://169.254.169.254/latest" }, "denied"},
		{"a url too long", func(r *v1.SubmitRequest) { r.PayloadUrl = "https://example.org/" + long(8192) }, "payload_url is 8212 bytes, at most 8192 allowed"},
		{"no payload type", func(r *v1.SubmitRequest) { r.PayloadType = 0 }, "payload_type is required"},
		{"an unknown payload type", func(r *v1.SubmitRequest) { r.PayloadType = 42 }, "payload_type 42 is not a payload type: want PAYLOAD_TYPE_FILE, PAYLOAD_TYPE_CONTAINER, PAYLOAD_TYPE_OBJECT_MANIFEST, PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS or PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS"},
		{"an unknown mode", func(r *v1.SubmitRequest) { r.SubmissionMode = 9 }, "submission_mode 9 is not add or update"},
		{"a title too long", func(r *v1.SubmitRequest) { r.Metadata.What = long(4097) }, "metadata.what is 4097 bytes, at most 4096 allowed"},
		{"a creator with a line break", func(r *v1.SubmitRequest) { r.Metadata.Who = "a\nBcc: x" }, "metadata.who contains control character U+000A"},
		{"a uuid with a slash", func(r *v1.SubmitRequest) { r.BatchUuid = "a/b" }, `batch_uuid "a/b": character '/'`},
		{"a uuid with a space", func(r *v1.SubmitRequest) { r.BatchUuid = "a b" }, "batch_uuid"},
		{"a uuid too long", func(r *v1.SubmitRequest) { r.BatchUuid = long(129) }, "batch_uuid is 129 bytes, at most 128 allowed"},
		{"a uuid that is dot-dot", func(r *v1.SubmitRequest) { r.BatchUuid = ".." }, "not a usable batch uuid"},
		{"a uuid with a character ZooKeeper refuses", func(r *v1.SubmitRequest) { r.BatchUuid = "a\ufff0b" }, `batch_uuid "a\ufff0b": character U+FFF0 at byte 1 is not allowed (ZooKeeper refuses it in a node name)`},
		{"a uuid with an emoji", func(r *v1.SubmitRequest) { r.BatchUuid = "batch-\U0001F600" }, "character U+1F600 at byte 6 is not allowed"},
		{"a uuid with a private-use character", func(r *v1.SubmitRequest) { r.BatchUuid = "\ue000" }, "character U+E000 at byte 0 is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := valid()
			tc.edit(req)
			_, err := f.client.Submit(context.Background(), req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("got %s %q, want InvalidArgument containing %q", st.Code(), st.Message(), tc.want)
			}
		})
	}
	for _, path := range [][]string{{"batch_uuid"}, {"metadata", "who"}, {"submitter"}} {
		want := strings.Join(path, ".") + " is not valid UTF-8"
		t.Run(want, func(t *testing.T) {
			req := valid()
			req.Metadata, req.Submitter = nil, "" // the raw field stands alone
			if path[0] != "submitter" {
				req.Submitter = "jdoe"
			}
			st := status.Convert(submitRaw(t, f, req, []byte("a\xffb"), path...))
			if st.Code() != codes.InvalidArgument || st.Message() != want {
				t.Errorf("got %s %q, want InvalidArgument %q", st.Code(), st.Message(), want)
			}
		})
	}
	if bids, _, err := zktest.RawConn(t).Children(f.zkRoot + "/batches"); (err != nil && !errors.Is(err, zk.ErrNoNode)) || len(bids) != 0 {
		t.Errorf("refused submissions left batches: %v %v", bids, err)
	}
	// No refusal took a bid: the first batch accepted is the first bid.
	resp, err := f.client.Submit(context.Background(), valid())
	if err != nil || resp.GetBatchId() != "bid0000000000" {
		t.Errorf("the first accepted submission: %v, %v; want bid0000000000 (refused ones took bids)", resp, err)
	}
}

// submitRaw calls Submit with req and the string field at path (field
// names, outermost first) set on the wire to b, whatever b holds: the Go
// client refuses to send invalid UTF-8, a hostile client does not.
func submitRaw(t *testing.T, f *fixture, req *v1.SubmitRequest, b []byte, path ...string) error {
	t.Helper()
	md := req.ProtoReflect().Descriptor()
	var nums []protowire.Number
	for i, name := range path {
		fd := md.Fields().ByName(protoreflect.Name(name))
		nums = append(nums, fd.Number())
		if i < len(path)-1 {
			md = fd.Message()
		}
	}
	wire := protowire.AppendBytes(protowire.AppendTag(nil, nums[len(nums)-1], protowire.BytesType), b)
	for i := len(nums) - 2; i >= 0; i-- {
		wire = protowire.AppendBytes(protowire.AppendTag(nil, nums[i], protowire.BytesType), wire)
	}
	req.ProtoReflect().SetUnknown(wire)
	return f.conn.Invoke(context.Background(), "/ingestq.v1.BatchService/Submit", req, &v1.SubmitResponse{})
}

// TestTheLargestSubmissionFitsAZooKeeperNode submits every field at its
// limit, in the characters that grow most when JSON-escaped, and measures
// the node the queue wrote.
func TestTheLargestSubmissionFitsAZooKeeperNode(t *testing.T) {
	f := newFixture(t, fetch.Policy{})
	worst := func(n int) string { return strings.Repeat(`"`, n) }
	req := &v1.SubmitRequest{
		Submitter:   worst(v1.MaxSubmitterBytes),
		Profile:     "demo",
		PayloadUrl:  "https://example.org/" + strings.Repeat("%22", (v1.MaxPayloadURLBytes-20)/3),
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE,
		Metadata: &v1.Metadata{Who: worst(v1.MaxMetadataFieldBytes), What: worst(v1.MaxMetadataFieldBytes),
			When: worst(v1.MaxMetadataFieldBytes), Where: worst(v1.MaxMetadataFieldBytes)},
		BatchUuid: strings.Repeat("u", v1.MaxBatchUUIDBytes),
	}
	resp, err := f.client.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	data, _, err := conn.Get(f.zkRoot + "/batches/" + resp.GetBatchId() + "/submission")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest submission: %d bytes in ZooKeeper (request %d bytes encoded)", len(data), len(req.String()))
	if len(data) > 100<<10 {
		t.Errorf("the largest submission takes %d bytes, more than 100 KiB of a node's 1 MB", len(data))
	}
	// One byte more in any field is refused before anything is written.
	req.Submitter += `"`
	req.BatchUuid = "other"
	if _, err := f.client.Submit(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a submitter one byte over: %v, want InvalidArgument", err)
	}
}

// TestGetBatchStatusTellsEachObjectWhereItIs: a depositor's status of a
// batch lists each object, a page at a time: its local id and state; why
// a failed one failed, and in which stage; the ARK and version number of
// a stored one, and no ARK for one not stored yet, though processing gave
// it one.
func TestGetBatchStatusTellsEachObjectWhereItIs(t *testing.T) {
	f := newFixture(t, fetch.Policy{})
	ctx := context.Background()
	news := make([]batches.NewJob, 3)
	for i := range news {
		news[i] = batches.NewJob{Priority: 5, Configuration: &v1.JobConfiguration{ProfileName: "demo",
			PayloadUrl: fmt.Sprintf("http://127.0.0.1:1/%d.checkm", i), PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST},
			Identifiers: &v1.Identifiers{LocalId: []string{fmt.Sprintf("loc-%d", i)}}}
	}
	bid, jids, err := queuetest.Submit(ctx, f.q, news)
	if err != nil {
		t.Fatal(err)
	}
	step := func(jid string, to queue.JobState, ch jobs.Change) {
		t.Helper()
		ch.To = to
		queuetest.Move(t, f.q, jid, queuetest.WithProducts(ch))
	}
	// Stored as version 4 of an object ingested before, and completed.
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading} {
		step(jids[0], to, jobs.Change{})
	}
	step(jids[0], queue.Processing, jobs.Change{})
	step(jids[0], queue.Storing, jobs.Change{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4old", LocalId: []string{"loc-0"}}})
	step(jids[0], queue.Recording, jobs.Change{Inventory: &v1.Inventory{ManifestUrl: "file:///store/v4.checkm", Mode: "add", Version: 4}})
	for _, to := range []queue.JobState{queue.Notify, queue.Completed} {
		step(jids[0], to, jobs.Change{})
	}
	// Failed in Downloading.
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading} {
		step(jids[1], to, jobs.Change{})
	}
	step(jids[1], queue.Failed, jobs.Change{Message: "a.txt: md5 digest mismatch"})
	// Minted, not stored.
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing} {
		step(jids[2], to, jobs.Change{})
	}
	step(jids[2], queue.Storing, jobs.Change{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4new", LocalId: []string{"loc-2"}}})

	first, err := f.client.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}, PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetObjects()) != 2 || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, next %q; want 2 objects and a token", first.GetObjects(), first.GetNextPageToken())
	}
	rest, err := f.client.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid},
		PageSize: 2, PageToken: first.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	if rest.GetNextPageToken() != "" {
		t.Errorf("the last page has a next page: %q", rest.GetNextPageToken())
	}
	got := map[string]*v1.ObjectStatus{}
	for _, o := range append(first.GetObjects(), rest.GetObjects()...) {
		got[o.GetJobId()] = o
	}
	want := []*v1.ObjectStatus{
		{JobId: jids[0], LocalIds: []string{"loc-0"}, State: queue.Completed, Ark: "ark:/99999/fk4old", Version: 4,
			PayloadUrl: "http://127.0.0.1:1/0.checkm"},
		{JobId: jids[1], LocalIds: []string{"loc-1"}, State: queue.Failed, Reason: "a.txt: md5 digest mismatch",
			FailedIn: queue.Downloading, PayloadUrl: "http://127.0.0.1:1/1.checkm"},
		{JobId: jids[2], LocalIds: []string{"loc-2"}, State: queue.Storing, PayloadUrl: "http://127.0.0.1:1/2.checkm"},
	}
	for _, w := range want {
		if !proto.Equal(got[w.GetJobId()], w) {
			t.Errorf("object %s: %v, want %v", w.GetJobId(), got[w.GetJobId()], w)
		}
	}
	_, err = f.client.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}, PageSize: 5000})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("a page of 5000: %v, want InvalidArgument", err)
	}
}
