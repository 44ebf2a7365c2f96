package badinput

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ingestqServices are the gRPC services of ingestq (health and reflection
// aside) that every stack must serve somewhere.
var ingestqServices = []protoreflect.FullName{
	"ingestq.v1.BatchService", "ingestq.v1.AdminService", "ingestq.v1.RecordingService",
	"ingestq.v1.StageService", "ingestq.v1.PingService",
}

// servedAPI asks every process of p, through server reflection, which of
// ingestq's gRPC services it serves, and checks that each is served by
// at least one.
func servedAPI(t *testing.T, p *pipeline) map[string][]protoreflect.FullName {
	t.Helper()
	out := map[string][]protoreflect.FullName{}
	seen := map[protoreflect.FullName]bool{}
	for _, service := range stack.Services {
		for _, name := range servicetest.ListServices(t, dial(t, p.stack.Addr(service))) {
			if strings.HasPrefix(name, "ingestq.") {
				out[service] = append(out[service], protoreflect.FullName(name))
				seen[protoreflect.FullName(name)] = true
			}
		}
	}
	for _, name := range ingestqServices {
		if !seen[name] {
			t.Errorf("no process serves %s", name)
		}
	}
	return out
}

// serviceMethods returns the methods of a service as this binary's
// descriptors have them.
func serviceMethods(t *testing.T, name protoreflect.FullName) []protoreflect.MethodDescriptor {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	methods := d.(protoreflect.ServiceDescriptor).Methods()
	out := make([]protoreflect.MethodDescriptor, methods.Len())
	for i := range out {
		out[i] = methods.Get(i)
	}
	return out
}

// fullMethod is a method's gRPC name, "/ingestq.v1.AdminService/GetJob".
func fullMethod(md protoreflect.MethodDescriptor) string {
	return "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
}

// invoke calls a method with req, whatever its type, and drops the answer.
func invoke(ctx context.Context, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, req proto.Message) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return err
	}
	return conn.Invoke(ctx, fullMethod(md), req, mt.New().Interface())
}

// newRequest is an empty request of md's input type.
func newRequest(md protoreflect.MethodDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	if err != nil {
		panic(err) // the method's own input type is linked in with it
	}
	return mt.New().Interface()
}

// overLimit is an empty request of md's input type carrying 5 MiB of an
// unknown field: more than the 4 MiB a gRPC server accepts by default.
func overLimit(md protoreflect.MethodDescriptor) proto.Message {
	m := newRequest(md)
	m.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 9999, protowire.BytesType), make([]byte, 5<<20)))
	return m
}

// dial connects to one process of the main stack.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// hasNonFlagField says whether a request has a field that can be missing
// or too large: any but a bool.
func hasNonFlagField(m protoreflect.MessageDescriptor) bool {
	for i := range m.Fields().Len() {
		if m.Fields().Get(i).Kind() != protoreflect.BoolKind {
			return true
		}
	}
	return false
}

// fieldCase is a request with a field missing or over its limit, and the
// words of the InvalidArgument that must refuse it.
type fieldCase struct {
	name string
	req  proto.Message
	want string
}

// fieldCases are, per method, requests each wrong in one field. Methods
// whose requests have no field but flags are covered by the message size
// limit only.
func fieldCases() map[string][]fieldCase {
	long := func(n int) string { return strings.Repeat("x", n) }
	submit := func(edit func(r *v1.SubmitRequest)) *v1.SubmitRequest {
		r := &v1.SubmitRequest{Submitter: "jdoe", Profile: demoProfile, PayloadUrl: "http://127.0.0.1:1/deposit.txt",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE}
		edit(r)
		return r
	}
	priority := func(p int32) *int32 { return &p }
	jid := "jid0000000001"
	return map[string][]fieldCase{
		"/ingestq.v1.BatchService/Submit": {
			{"submitter missing", submit(func(r *v1.SubmitRequest) { r.Submitter = "" }), "submitter is required"},
			{"submitter over 256 bytes", submit(func(r *v1.SubmitRequest) { r.Submitter = long(257) }), "submitter is 257 bytes, at most 256 allowed"},
			{"submitter with a line break", submit(func(r *v1.SubmitRequest) { r.Submitter = "j\ndoe" }), "submitter contains control character U+000A at byte 1"},
			{"profile missing", submit(func(r *v1.SubmitRequest) { r.Profile = "" }), "profile is required"},
			{"profile over 128 bytes", submit(func(r *v1.SubmitRequest) { r.Profile = long(129) }), "profile is 129 bytes, at most 128 allowed"},
			{"payload_url missing", submit(func(r *v1.SubmitRequest) { r.PayloadUrl = "" }), "payload_url is required"},
			{"payload_url over 8192 bytes", submit(func(r *v1.SubmitRequest) { r.PayloadUrl = "http://example.org/" + long(8192) }), "payload_url is 8211 bytes, at most 8192 allowed"},
			{"payload_url without a host", submit(func(r *v1.SubmitRequest) { r.PayloadUrl = "http:///deposit.txt" }), `payload_url "http:///deposit.txt" has no host`},
			{"payload_type missing", submit(func(r *v1.SubmitRequest) { r.PayloadType = 0 }), "payload_type is required"},
			{"payload_type unknown", submit(func(r *v1.SubmitRequest) { r.PayloadType = 42 }), "payload_type 42 is not a payload type: want PAYLOAD_TYPE_FILE, PAYLOAD_TYPE_CONTAINER, PAYLOAD_TYPE_OBJECT_MANIFEST, PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS or PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS"},
			{"submission_mode unknown", submit(func(r *v1.SubmitRequest) { r.SubmissionMode = 7 }), "submission_mode 7 is not add or update"},
			{"batch_uuid over 128 bytes", submit(func(r *v1.SubmitRequest) { r.BatchUuid = long(129) }), "batch_uuid is 129 bytes, at most 128 allowed"},
			{"batch_uuid with a slash", submit(func(r *v1.SubmitRequest) { r.BatchUuid = "a/b" }), `batch_uuid "a/b": character '/' at byte 1 is not allowed`},
			{"batch_uuid with a character ZooKeeper refuses", submit(func(r *v1.SubmitRequest) { r.BatchUuid = "a\ufff0b" }),
				`batch_uuid "a\ufff0b": character U+FFF0 at byte 1 is not allowed (ZooKeeper refuses it in a node name)`},
			{"batch_uuid with an emoji", submit(func(r *v1.SubmitRequest) { r.BatchUuid = "batch-\U0001F600" }), "character U+1F600 at byte 6 is not allowed"},
			{"batch_uuid with a private-use character", submit(func(r *v1.SubmitRequest) { r.BatchUuid = "\ue000" }), "character U+E000 at byte 0 is not allowed"},
		},
		"/ingestq.v1.BatchService/GetBatchStatus": {
			{"no selector", &v1.GetBatchStatusRequest{}, "batch_id or batch_uuid is required"},
			{"batch_id not a bid", &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: "bid42"}}, `batch_id "bid42" is not a bid id`},
			{"batch_uuid over 128 bytes", &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchUuid{BatchUuid: long(129)}}, "batch_uuid is 129 bytes, at most 128 allowed"},
			{"batch_uuid with a character ZooKeeper refuses", &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchUuid{BatchUuid: "\uffff"}}, "character U+FFFF at byte 0 is not allowed"},
		},
		"/ingestq.v1.AdminService/HoldCollection": {
			{"collection missing", &v1.HoldCollectionRequest{}, "collection is required"},
			{"collection over 200 bytes", &v1.HoldCollectionRequest{Collection: long(201)}, "collection is 201 bytes, at most 200 allowed"},
			{"collection with a slash", &v1.HoldCollectionRequest{Collection: "a/b"}, `collection "a/b" contains '/' at byte 1`},
			{"collection ..", &v1.HoldCollectionRequest{Collection: ".."}, `collection ".." is not a mnemonic`},
			{"collection with a character ZooKeeper refuses", &v1.HoldCollectionRequest{Collection: "coll\U0001F600"}, "character U+1F600 at byte 4 is not allowed"},
		},
		"/ingestq.v1.AdminService/ReleaseCollection": {
			{"collection missing", &v1.ReleaseCollectionRequest{}, "collection is required"},
			{"collection over 200 bytes", &v1.ReleaseCollectionRequest{Collection: long(201)}, "collection is 201 bytes, at most 200 allowed"},
		},
		"/ingestq.v1.AdminService/ReleaseBatch": {
			{"batch_id missing", &v1.ReleaseBatchRequest{}, "batch_id is required"},
			{"batch_id a jid", &v1.ReleaseBatchRequest{BatchId: jid}, `batch_id "jid0000000001" is not a bid id`},
		},
		"/ingestq.v1.AdminService/UpdateReportBatch": {
			{"batch_id missing", &v1.UpdateReportBatchRequest{}, "batch_id is required"},
			{"batch_id over its length", &v1.UpdateReportBatchRequest{BatchId: "bid" + long(300)}, "is not a bid id"},
		},
		"/ingestq.v1.AdminService/DeleteBatch": {
			{"batch_id missing", &v1.DeleteBatchRequest{}, "batch_id is required"},
			{"batch_id too short", &v1.DeleteBatchRequest{BatchId: "bid123"}, `batch_id "bid123" is not a bid id`},
		},
		"/ingestq.v1.AdminService/CleanupBatches": {
			{"older_than missing", &v1.CleanupBatchesRequest{}, "older_than is required"},
			{"older_than negative", &v1.CleanupBatchesRequest{OlderThan: durationpb.New(-time.Hour)}, "older_than -1h0m0s: want a duration of 0s or more"},
			{"max_batches negative", &v1.CleanupBatchesRequest{OlderThan: durationpb.New(0), MaxBatches: -1}, "max_batches -1: want 1 or more"},
		},
		"/ingestq.v1.AdminService/GetBatch": {
			{"no selector", &v1.GetBatchRequest{}, "batch_id or batch_uuid is required"},
			{"batch_uuid with a space", &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchUuid{BatchUuid: "a b"}}, `batch_uuid "a b": character ' ' at byte 1 is not allowed`},
		},
		"/ingestq.v1.AdminService/ListBatches": {
			{"page_size over 500", &v1.ListBatchesRequest{PageSize: 501}, "page_size 501 is outside 0..500"},
			{"page_token over 256 bytes", &v1.ListBatchesRequest{PageToken: long(257)}, "page_token is 257 bytes, at most 256 allowed"},
			{"page_token not a bid", &v1.ListBatchesRequest{PageToken: "next"}, `page_token "next" is not a bid id`},
			{"submitter over 256 bytes", &v1.ListBatchesRequest{Submitter: long(257)}, "submitter is 257 bytes, at most 256 allowed"},
			{"status unknown", &v1.ListBatchesRequest{Status: 99}, "status 99 is not a batch state"},
		},
		"/ingestq.v1.AdminService/GetJob": {
			{"job_id missing", &v1.GetJobRequest{}, "job_id is required"},
			{"job_id a bid", &v1.GetJobRequest{JobId: "bid0000000001"}, `job_id "bid0000000001" is not a jid id`},
		},
		"/ingestq.v1.AdminService/ListJobs": {
			{"state and batch_id both", &v1.ListJobsRequest{State: v1.JobState_JOB_STATE_FAILED, BatchId: "bid0000000001"}, "give one of them"},
			{"page_size over 1000", &v1.ListJobsRequest{PageSize: 1001}, "page_size 1001 is outside 0..1000"},
			{"state unknown", &v1.ListJobsRequest{State: 99}, "state 99 is not a job state"},
		},
		"/ingestq.v1.AdminService/HoldJob": {
			{"job_id missing", &v1.HoldJobRequest{}, "job_id is required"},
			{"message over 1024 bytes", &v1.HoldJobRequest{JobId: jid, Message: long(1025)}, "message is 1025 bytes, at most 1024 allowed"},
		},
		"/ingestq.v1.AdminService/ReleaseJob": {
			{"job_id missing", &v1.ReleaseJobRequest{}, "job_id is required"},
			{"message with a line break", &v1.ReleaseJobRequest{JobId: jid, Message: "ok\nforged: line"}, "message contains control character U+000A at byte 2"},
		},
		"/ingestq.v1.AdminService/FailJob": {
			{"job_id missing", &v1.FailJobRequest{}, "job_id is required"},
			{"message over 1024 bytes", &v1.FailJobRequest{JobId: jid, Message: long(1025)}, "message is 1025 bytes, at most 1024 allowed"},
		},
		"/ingestq.v1.AdminService/RequeueJob": {
			{"job_id missing", &v1.RequeueJobRequest{}, "job_id is required"},
			{"state Completed", &v1.RequeueJobRequest{JobId: jid, State: v1.JobState_JOB_STATE_COMPLETED}, "a failed job resumes at JOB_STATE_PENDING"},
		},
		"/ingestq.v1.AdminService/ReprioritizeJob": {
			{"priority missing", &v1.ReprioritizeJobRequest{JobId: jid}, "priority is required (0 first .. 99 last)"},
			{"priority over 99", &v1.ReprioritizeJobRequest{JobId: jid, Priority: priority(100)}, "priority 100 is outside 0..99"},
			{"priority negative", &v1.ReprioritizeJobRequest{JobId: jid, Priority: priority(-1)}, "priority -1 is outside 0..99"},
		},
		"/ingestq.v1.AdminService/DeleteJob": {
			{"job_id missing", &v1.DeleteJobRequest{}, "job_id is required"},
		},
		"/ingestq.v1.AdminService/SearchJobs": {
			{"page_size over 1000", &v1.SearchJobsRequest{PageSize: 1001}, "page_size 1001 is outside 0..1000"},
			{"page_token not a jid", &v1.SearchJobsRequest{PageToken: "next"}, `page_token "next" is not a jid id`},
			{"max_scan over 100000", &v1.SearchJobsRequest{MaxScan: 100001}, "max_scan 100001 is outside 0..100000"},
			{"filter.batch_id not a bid", &v1.SearchJobsRequest{Filter: &v1.JobFilter{BatchId: "x"}}, `filter.batch_id "x" is not a bid id`},
			{"filter.message over 1024 bytes", &v1.SearchJobsRequest{Filter: &v1.JobFilter{Message: long(1025)}}, "filter.message is 1025 bytes, at most 1024 allowed"},
			{"filter.state unknown", &v1.SearchJobsRequest{Filter: &v1.JobFilter{State: 99}}, "filter.state 99 is not a job state"},
		},
		"/ingestq.v1.AdminService/GetAggregates": {
			{"hours over 336", &v1.GetAggregatesRequest{Hours: 337}, "hours 337 is outside 0..336"},
			{"days negative", &v1.GetAggregatesRequest{Days: -1}, "days -1 is outside 0..366"},
		},
		"/ingestq.v1.AdminService/VerifyObject": {
			{"ark missing", &v1.VerifyObjectRequest{Version: 1}, "ark: required"},
			{"ark over 512 bytes", &v1.VerifyObjectRequest{Ark: long(513), Version: 1}, "ark: longer than 512 bytes"},
			{"ark not an ARK", &v1.VerifyObjectRequest{Ark: "not-an-ark"}, `ark "not-an-ark" is not an ARK: want ark:/NAAN/name`},
			{"version negative", &v1.VerifyObjectRequest{Ark: "ark:/99999/fk4x", Version: -1}, "version: -1 is not a version number (1 or more; 0: the latest)"},
		},
		"/ingestq.v1.AdminService/CreateConsoleSession": {
			{"ttl missing", &v1.CreateConsoleSessionRequest{}, "ttl is required"},
			{"ttl over 30 days", &v1.CreateConsoleSessionRequest{Ttl: durationpb.New(31 * 24 * time.Hour)}, "ttl 744h0m0s: want 1s to 720h0m0s"},
		},
		"/ingestq.v1.AdminService/GetConsoleSession": {
			{"session_id missing", &v1.GetConsoleSessionRequest{}, "session_id: want 16 to 64 letters"},
			{"session_id over 64 bytes", &v1.GetConsoleSessionRequest{SessionId: strings.Repeat("a", 65)}, "session_id: want 16 to 64 letters"},
		},
		"/ingestq.v1.AdminService/EndConsoleSession": {
			{"session_id missing", &v1.EndConsoleSessionRequest{}, "session_id: want 16 to 64 letters"},
			{"session_id over 64 bytes", &v1.EndConsoleSessionRequest{SessionId: strings.Repeat("a", 65)}, "session_id: want 16 to 64 letters"},
		},
		"/ingestq.v1.AdminService/BulkAction": {
			{"verb missing", &v1.BulkActionRequest{Filter: &v1.JobFilter{Collection: "c"}}, "verb is required"},
			{"filter empty", &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_DELETE}, "filter is empty"},
			{"priority missing", &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REPRIORITIZE, Filter: &v1.JobFilter{Collection: "c"}}, "priority is required"},
			{"max_jobs over 10000", &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_HOLD, Filter: &v1.JobFilter{Collection: "c"}, MaxJobs: 10001}, "max_jobs 10001 is outside 0..10000"},
			{"message over 1024 bytes", &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_HOLD, Filter: &v1.JobFilter{Collection: "c"}, Message: long(1025)}, "message is 1025 bytes, at most 1024 allowed"},
		},
		"/ingestq.v1.RecordingService/Lease": {
			{"wait negative", &v1.LeaseRequest{Wait: durationpb.New(-time.Second)}, "wait -1s is outside 0..10m0s"},
			{"lease_duration under a second", &v1.LeaseRequest{LeaseDuration: durationpb.New(500 * time.Millisecond)}, "lease_duration 500ms is outside 1s..1h0m0s"},
			{"lease_duration over an hour", &v1.LeaseRequest{LeaseDuration: durationpb.New(2 * time.Hour)}, "lease_duration 2h0m0s is outside 1s..1h0m0s"},
			{"lease_duration malformed", &v1.LeaseRequest{LeaseDuration: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "lease_duration: "},
		},
		"/ingestq.v1.RecordingService/Renew": {
			{"lease_id missing", &v1.RenewRequest{}, "lease_id is required"},
			{"lease_id over 64 bytes", &v1.RenewRequest{LeaseId: long(65)}, "lease_id is 65 bytes, at most 64 allowed"},
		},
		"/ingestq.v1.RecordingService/Complete": {
			{"lease_id missing", &v1.CompleteRequest{}, "lease_id is required"},
			{"lease_id over 64 bytes", &v1.CompleteRequest{LeaseId: long(65)}, "lease_id is 65 bytes, at most 64 allowed"},
		},
		"/ingestq.v1.RecordingService/Fail": {
			{"lease_id missing", &v1.FailRequest{Message: "disk full"}, "lease_id is required"},
			{"message missing", &v1.FailRequest{LeaseId: "abc"}, "message is required: say what failed"},
			{"message over 4096 bytes", &v1.FailRequest{LeaseId: "abc", Message: long(4097)}, "message is 4097 bytes, at most 4096 allowed"},
		},
		"/ingestq.v1.PingService/Ping": {
			{"message over 1024 bytes", &v1.PingRequest{Message: long(1025)}, "message is 1025 bytes, at most 1024 allowed"},
		},
		"/ingestq.v1.PingService/AdminPing": {
			{"message over 1024 bytes", &v1.AdminPingRequest{Message: long(1025)}, "message is 1025 bytes, at most 1024 allowed"},
		},
	}
}

// TestEveryRPCRefusesMissingOrOversizedFields calls every method of every
// ingestq service on every process that serves it (as its reflection
// says): each request with a
// field missing or over its limit is refused with InvalidArgument naming
// the field, and a request over the message size limit with
// ResourceExhausted, before the method does anything. Every method whose
// request has a field other than a flag has cases (the test fails on one
// that is added without).
func TestEveryRPCRefusesMissingOrOversizedFields(t *testing.T) {
	t.Parallel()
	cases := fieldCases()
	ctx := adminCtx(context.Background())
	for service, names := range servedAPI(t, shared.main) {
		conn := dial(t, shared.main.stack.Addr(service))
		for _, name := range names {
			for _, md := range serviceMethods(t, name) {
				method := fullMethod(md)
				if hasNonFlagField(md.Input()) && len(cases[method]) == 0 {
					t.Errorf("%s has request fields but no case of a missing or oversized one", method)
				}
				t.Run(service+method, func(t *testing.T) {
					for _, tc := range cases[method] {
						t.Run(tc.name, func(t *testing.T) {
							wantStatus(t, invoke(ctx, conn, md, tc.req), codes.InvalidArgument, tc.want)
						})
					}
					t.Run("request over the message size limit", func(t *testing.T) {
						wantStatus(t, invoke(ctx, conn, md, overLimit(md)), codes.ResourceExhausted, "received message larger than max")
					})
				})
			}
		}
	}
}

// invalidUTF8Case is a request whose string field at path carries bytes
// that are not UTF-8.
type invalidUTF8Case struct {
	path string // "metadata.who"
	req  proto.Message
}

// invalidUTF8Cases are, for a request type, one request per string field
// (top-level, or in a message field, one level down) with that field set
// on the wire to bytes that are not UTF-8. The Go client will not marshal
// such a string; the field travels as an unknown field of the request,
// byte for byte what a set field would be, as a hostile client sends it.
func invalidUTF8Cases(md protoreflect.MethodDescriptor) []invalidUTF8Case {
	bad := []byte("caf\xe9\xff")
	var out []invalidUTF8Case
	in := md.Input()
	for i := range in.Fields().Len() {
		fd := in.Fields().Get(i)
		switch {
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			m := newRequest(md)
			m.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), bad))
			out = append(out, invalidUTF8Case{string(fd.Name()), m})
		case fd.Kind() == protoreflect.MessageKind:
			for j := range fd.Message().Fields().Len() {
				inner := fd.Message().Fields().Get(j)
				if inner.Kind() != protoreflect.StringKind || inner.IsMap() {
					continue
				}
				m := newRequest(md)
				wire := protowire.AppendBytes(protowire.AppendTag(nil, inner.Number(), protowire.BytesType), bad)
				m.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, fd.Number(), protowire.BytesType), wire))
				out = append(out, invalidUTF8Case{string(fd.Name()) + "." + string(inner.Name()), m})
			}
		}
	}
	return out
}

// TestEveryRPCRefusesInvalidUTF8InEachStringField calls every method of
// every ingestq service on every process that serves it with each of its
// string fields in turn not UTF-8: each call is refused with
// InvalidArgument naming the field (gRPC's own decoding would answer
// Internal), before the method does anything.
func TestEveryRPCRefusesInvalidUTF8InEachStringField(t *testing.T) {
	t.Parallel()
	ctx := adminCtx(context.Background())
	cases := 0
	for service, names := range servedAPI(t, shared.main) {
		conn := dial(t, shared.main.stack.Addr(service))
		for _, name := range names {
			for _, md := range serviceMethods(t, name) {
				for _, tc := range invalidUTF8Cases(md) {
					cases++
					t.Run(service+fullMethod(md)+"/"+tc.path, func(t *testing.T) {
						err := invoke(ctx, conn, md, tc.req)
						if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.path+" is not valid UTF-8" {
							t.Errorf("got %s %q, want InvalidArgument %q", st.Code(), st.Message(), tc.path+" is not valid UTF-8")
						}
					})
				}
			}
		}
	}
	if cases < 20 {
		t.Errorf("only %d string fields found among the served methods", cases)
	}
}
