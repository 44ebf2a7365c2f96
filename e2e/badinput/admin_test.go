package badinput

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// statusOf reads the status node of a job or batch and whether it is
// locked.
func statusOf(t *testing.T, p *pipeline, id string) (proto.Message, bool) {
	t.Helper()
	ctx := context.Background()
	if strings.HasPrefix(id, "jid") {
		j, err := jobs.NewReader(p.q).GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.GetStatus(), j.GetLocked()
	}
	b, err := batches.New(p.q).GetBatch(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return b.GetStatus(), b.GetLocked()
}

// TestAdminActionsOnItemsInTheWrongStateAreRefusedAndChangeNothing: an
// admin action on a batch or job in a state it does not apply to is
// refused with FailedPrecondition naming the item and its state (NotFound
// for an item that does not exist), and the item's status is left exactly
// as it was, unlocked.
func TestAdminActionsOnItemsInTheWrongStateAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	p := shared.main
	ctx := adminCtx(context.Background())
	serve("/good/report.txt", goodFile)
	completedBatch := p.submit(t, shared.deposits.URL+"/good/report.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	failedBatch := p.submit(t, shared.deposits.URL+"/missing/admin.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	if _, err := p.admin.HoldCollection(ctx, &v1.HoldCollectionRequest{Collection: heldCollection}); err != nil {
		t.Fatal(err)
	}
	resp, err := p.batches.Submit(context.Background(), &v1.SubmitRequest{Submitter: "badinput", Profile: heldProfile,
		PayloadUrl: shared.deposits.URL + "/good/report.txt", PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE})
	if err != nil {
		t.Fatal(err)
	}
	heldBatch := resp.GetBatchId()
	p.waitBatch(t, completedBatch, queue.BatchCompleted)
	p.waitBatch(t, failedBatch, queue.BatchFailed)
	p.waitBatch(t, heldBatch, queue.BatchHeld)
	p.checkNothingKept(t, failedBatch)
	completedJob, failedJob := p.jobs(t, completedBatch)[0].GetId(), p.jobs(t, failedBatch)[0].GetId()
	t.Cleanup(func() {
		p.deleteBatch(t, heldBatch)
		p.deleteBatch(t, failedBatch)
		p.admin.ReleaseCollection(ctx, &v1.ReleaseCollectionRequest{Collection: heldCollection})
	})
	const unknownJob, unknownBatch = "jid9999999999", "bid9999999999"
	priority := int32(1)

	cases := []struct {
		name string
		item string // the item whose status must not change ("" when there is none)
		call func() error
		code codes.Code
		want []string
	}{
		{"release a completed batch", completedBatch, func() error {
			_, err := p.admin.ReleaseBatch(ctx, &v1.ReleaseBatchRequest{BatchId: completedBatch})
			return err
		}, codes.FailedPrecondition, []string{completedBatch + " is Completed: Completed → Pending is not allowed"}},
		{"update-report a completed batch", completedBatch, func() error {
			_, err := p.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: completedBatch})
			return err
		}, codes.FailedPrecondition, []string{completedBatch + " is Completed: Completed → UpdateReporting is not allowed"}},
		{"delete a completed batch", completedBatch, func() error {
			_, err := p.admin.DeleteBatch(ctx, &v1.DeleteBatchRequest{BatchId: completedBatch})
			return err
		}, codes.FailedPrecondition, []string{"batch " + completedBatch + " is Completed, not Held or Failed"}},
		{"release a held batch whose collection is still held", heldBatch, func() error {
			_, err := p.admin.ReleaseBatch(ctx, &v1.ReleaseBatchRequest{BatchId: heldBatch})
			return err
		}, codes.FailedPrecondition, []string{"batch " + heldBatch + " belongs to collection " + heldCollection + ", which is still held: release the collection (ReleaseCollection) first"}},
		{"update-report a held batch", heldBatch, func() error {
			_, err := p.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: heldBatch})
			return err
		}, codes.FailedPrecondition, []string{heldBatch + " is Held: Held → UpdateReporting is not allowed"}},
		{"hold a completed job", completedJob, func() error {
			_, err := p.admin.HoldJob(ctx, &v1.HoldJobRequest{JobId: completedJob})
			return err
		}, codes.FailedPrecondition, []string{"job " + completedJob + " is Completed, not Pending"}},
		{"release a failed job", failedJob, func() error {
			_, err := p.admin.ReleaseJob(ctx, &v1.ReleaseJobRequest{JobId: failedJob})
			return err
		}, codes.FailedPrecondition, []string{"job " + failedJob + " is Failed, not Held"}},
		{"fail a completed job", completedJob, func() error {
			_, err := p.admin.FailJob(ctx, &v1.FailJobRequest{JobId: completedJob, Message: "operator"})
			return err
		}, codes.FailedPrecondition, []string{completedJob + " is Completed: Completed → Failed is not allowed"}},
		{"requeue a completed job", completedJob, func() error {
			_, err := p.admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: completedJob})
			return err
		}, codes.FailedPrecondition, []string{"job " + completedJob + " is Completed, not Failed"}},
		{"reprioritize a completed job", completedJob, func() error {
			_, err := p.admin.ReprioritizeJob(ctx, &v1.ReprioritizeJobRequest{JobId: completedJob, Priority: &priority})
			return err
		}, codes.FailedPrecondition, []string{"job " + completedJob + " is Completed", "only a live job has a priority that matters"}},
		{"delete a completed job", completedJob, func() error {
			_, err := p.admin.DeleteJob(ctx, &v1.DeleteJobRequest{JobId: completedJob})
			return err
		}, codes.FailedPrecondition, []string{"job " + completedJob + " is Completed, not Failed or Held"}},
		{"read a job that does not exist", "", func() error {
			_, err := p.admin.GetJob(ctx, &v1.GetJobRequest{JobId: unknownJob})
			return err
		}, codes.NotFound, []string{"job " + unknownJob + " not found"}},
		{"requeue a job that does not exist", "", func() error {
			_, err := p.admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: unknownJob})
			return err
		}, codes.NotFound, []string{"job " + unknownJob + " not found"}},
		{"release a batch that does not exist", "", func() error {
			_, err := p.admin.ReleaseBatch(ctx, &v1.ReleaseBatchRequest{BatchId: unknownBatch})
			return err
		}, codes.NotFound, []string{"batch " + unknownBatch + " not found"}},
		{"read a batch by a uuid never submitted", "", func() error {
			_, err := p.admin.GetBatch(ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchUuid{BatchUuid: "never-submitted"}})
			return err
		}, codes.NotFound, []string{"never-submitted", "not found"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before proto.Message
			if tc.item != "" {
				before, _ = statusOf(t, p, tc.item)
			}
			wantStatus(t, tc.call(), tc.code, tc.want...)
			if tc.item == "" {
				return
			}
			after, locked := statusOf(t, p, tc.item)
			if locked || !proto.Equal(before, after) {
				t.Errorf("%s changed by a refused action: %v → %v (locked %v)", tc.item, before, after, locked)
			}
		})
	}
}

// TestAdminMethodsRefuseCallsWithoutTheRightToken calls every method marked
// admin, on every process that serves it, without a token, with a wrong
// one and with other schemes: each is refused (Unauthenticated when no
// usable bearer token comes, PermissionDenied for a wrong one) before it
// does anything: the queue is not paused, no stage replica is paused or
// draining. Methods not marked admin answer without a token.
func TestAdminMethodsRefuseCallsWithoutTheRightToken(t *testing.T) {
	p := shared.main
	credentials := []struct {
		name string
		md   metadata.MD
		code codes.Code
		want string
	}{
		{"no token", nil, codes.Unauthenticated, "admin method: send metadata authorization: Bearer <admin token>"},
		{"wrong token", metadata.Pairs("authorization", "Bearer not-the-admin-token"), codes.PermissionDenied, "admin method: the token is not the admin token"},
		{"token without the Bearer scheme", metadata.Pairs("authorization", adminToken), codes.Unauthenticated, "Bearer <admin token>"},
		{"basic credentials", metadata.Pairs("authorization", "Basic YWRtaW46YWRtaW4="), codes.Unauthenticated, "Bearer <admin token>"},
	}
	var admin, stages []string
	for service, names := range servedAPI(t, p) {
		conn := dial(t, p.stack.Addr(service))
		for _, name := range names {
			if name == "ingestq.v1.StageService" {
				stages = append(stages, service)
			}
			for _, md := range serviceMethods(t, name) {
				if !isAdmin(md) {
					continue
				}
				admin = append(admin, fullMethod(md))
				for _, cred := range credentials {
					t.Run(service+fullMethod(md)+"/"+cred.name, func(t *testing.T) {
						ctx := metadata.NewOutgoingContext(context.Background(), cred.md)
						wantStatus(t, invoke(ctx, conn, md, newRequest(md)), cred.code, cred.want)
					})
				}
			}
		}
	}
	for _, m := range []string{"/ingestq.v1.AdminService/PauseQueue", "/ingestq.v1.AdminService/Fsck", "/ingestq.v1.RecordingService/Lease",
		"/ingestq.v1.StageService/Drain", "/ingestq.v1.PingService/AdminPing"} {
		if !slices.Contains(admin, m) {
			t.Errorf("%s not found among the admin methods %v", m, admin)
		}
	}

	ctx := context.Background()
	if paused, err := jobs.New(p.q).Paused(ctx); err != nil || paused {
		t.Errorf("queue paused by refused calls: %v, %v", paused, err)
	}
	for _, service := range stages {
		resp, err := v1.NewStageServiceClient(dial(t, p.stack.Addr(service))).GetStatus(ctx, &v1.GetStatusRequest{})
		if err != nil {
			t.Errorf("%s GetStatus without a token: %v", service, err)
			continue
		}
		for _, w := range resp.GetWorkers() {
			if w.GetPaused() || w.GetDraining() {
				t.Errorf("%s worker %s paused %v, draining %v after refused calls", service, w.GetStage(), w.GetPaused(), w.GetDraining())
			}
		}
	}
	if _, err := v1.NewPingServiceClient(dial(t, p.stack.Addr("recorder"))).Ping(ctx, &v1.PingRequest{Message: "hello"}); err != nil {
		t.Errorf("Ping without a token: %v", err)
	}
}

// isAdmin reads a method's ingestq.v1.admin option.
func isAdmin(md protoreflect.MethodDescriptor) bool {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	return ok && opts != nil && proto.GetExtension(opts, v1.E_Admin).(bool)
}
