// Package submit serves ingestq.v1.BatchService: it takes a depositor's
// submission, checks what the request's own validation cannot (the profile
// exists, the payload URL passes the fetch policy) and writes the batch as
// Pending, answering at once. The batch's jobs come later, from the batch
// runner.
package submit

import (
	"context"
	"log/slog"
	"strings"

	"github.com/google/uuid"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/rpcerr"
	"github.com/ingestq/ingestq/shared/telemetry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server implements BatchService.
type Server struct {
	v1.UnimplementedBatchServiceServer
	Batches *batches.Client
	// Jobs reads a batch's jobs, the objects GetBatchStatus answers.
	Jobs     *jobs.Reader
	Profiles *profile.Set
	Policy   fetch.Policy
	Logger   *slog.Logger
	// TraceURL links a trace id to a tracing backend (see adminservice.Server).
	TraceURL string
}

var _ v1.BatchServiceServer = (*Server)(nil)

// Submit writes a Pending batch. The request passed its Validate already
// (the server's validation interceptor).
func (s *Server) Submit(ctx context.Context, req *v1.SubmitRequest) (*v1.SubmitResponse, error) {
	prof, ok := s.Profiles.Get(req.GetProfile())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "profile %q is not configured; known profiles: %s",
			req.GetProfile(), strings.Join(s.Profiles.Names(), ", "))
	}
	if _, err := fetch.CheckURL(req.GetPayloadUrl(), s.Policy); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "payload_url: %v", err)
	}
	batchUUID := req.GetBatchUuid()
	if batchUUID == "" {
		batchUUID = uuid.NewString()
	}
	mode := req.GetSubmissionMode()
	if mode == v1.SubmissionMode_SUBMISSION_MODE_UNSPECIFIED {
		mode = v1.SubmissionMode_SUBMISSION_MODE_ADD
	}
	// The RPC's span (otelgrpc) begins the batch's trace; each job's own
	// trace links to it.
	traceparent := telemetry.Inject(ctx)
	sub := &v1.Submission{
		ProfileName:    req.GetProfile(),
		Submitter:      req.GetSubmitter(),
		PayloadUrl:     req.GetPayloadUrl(),
		Type:           req.GetPayloadType(),
		SubmissionMode: mode,
		Metadata:       req.GetMetadata(),
		BatchId:        batchUUID,
		Traceparent:    traceparent,
		Collection:     prof.Collection,
	}
	bid, err := s.Batches.CreateBatch(ctx, sub)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	s.Logger.InfoContext(telemetry.WithJob(ctx, "", bid), "batch submitted",
		"batch_uuid", batchUUID, "profile", req.GetProfile(), "payload_type", queue.PayloadTypeName(req.GetPayloadType()))
	return &v1.SubmitResponse{BatchId: bid, BatchUuid: batchUUID, Traceparent: traceparent}, nil
}

// GetBatchStatus reads a batch by bid or batch uuid, with a page of its
// objects.
func (s *Server) GetBatchStatus(ctx context.Context, req *v1.GetBatchStatusRequest) (*v1.GetBatchStatusResponse, error) {
	bid := req.GetBatchId()
	if bid == "" {
		var err error
		if bid, err = s.Batches.BatchByUUID(ctx, req.GetBatchUuid()); err != nil {
			return nil, rpcerr.FromQueue(err)
		}
	}
	b, err := s.Batches.GetBatch(ctx, bid)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	list, next, err := s.Jobs.ListJobs(ctx, jobs.JobFilter{Batch: bid, PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(),
		Parts: queue.PartIdentifiers | queue.PartConfiguration | queue.PartInventory})
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	tp := b.GetSubmission().GetTraceparent()
	resp := &v1.GetBatchStatusResponse{Batch: b, TraceId: telemetry.TraceID(tp), TraceUrl: telemetry.TraceURL(s.TraceURL, tp),
		NextPageToken: next}
	for _, j := range list {
		resp.Objects = append(resp.Objects, objectStatus(j))
	}
	return resp, nil
}

// objectStatus is a job as its depositor follows it: the ARK and version
// only once the version is stored (the storing step wrote the job's
// inventory node), so that an ARK is never given for what is not kept.
func objectStatus(j *v1.Job) *v1.ObjectStatus {
	st := j.GetStatus()
	o := &v1.ObjectStatus{JobId: j.GetId(), LocalIds: j.GetIdentifiers().GetLocalId(), State: st.GetStatus(),
		PayloadUrl: j.GetConfiguration().GetPayloadUrl()}
	if st.GetStatus() == queue.Failed {
		o.Reason, o.FailedIn = st.GetMessage(), queue.FailedStage(st)
	}
	if j.GetInventory() != nil {
		o.Ark, o.Version = j.GetIdentifiers().GetPrimaryId(), j.GetInventory().GetVersion()
	}
	return o
}
