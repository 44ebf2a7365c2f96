// Package recording serves ingestq.v1.RecordingService over the lease
// manager: the Inventory team's way to take, renew, complete and fail the
// jobs in Recording.
package recording

import (
	"context"
	"errors"
	"log/slog"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/services/recorder/internal/versions"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Server implements v1.RecordingServiceServer.
type Server struct {
	v1.UnimplementedRecordingServiceServer
	Leases *lease.Manager
	// Versions describes each leased version (its size, file count and a
	// URL another host fetches it at); nil leaves those fields empty.
	Versions *versions.Store
	Logger   *slog.Logger
}

// Lease waits for a job and leases it; no job within the wait is an empty
// answer, not an error, and so is a wait while the recorder is paused
// (StageService.Pause). A draining recorder answers Unavailable.
func (s Server) Lease(ctx context.Context, req *v1.LeaseRequest) (*v1.LeaseResponse, error) {
	var wait, d time.Duration
	if req.GetWait() != nil {
		wait = req.GetWait().AsDuration()
	}
	if req.GetLeaseDuration() != nil {
		d = req.GetLeaseDuration().AsDuration()
	}
	l, err := s.Leases.Lease(ctx, wait, d)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	if l == nil {
		return &v1.LeaseResponse{}, nil
	}
	resp := &v1.LeaseResponse{LeaseId: l.ID, Expires: timestamppb.New(l.Expires), JobId: l.JobID, BatchId: l.BatchID,
		Ark: l.ARK, ManifestUrl: l.ManifestURL, Mode: l.Mode, LocalIds: l.LocalIDs,
		Version: int32(l.Version), Collection: l.Collection, Profile: l.Profile, Erc: l.ERC, Traceparent: l.Traceparent}
	if s.Versions != nil {
		// The lease stands without them: the inventory still has the
		// manifest URL, and may Fail the lease if it cannot use it.
		info, err := s.Versions.Describe(ctx, l.ManifestURL, l.Version, l.JobID)
		if err != nil {
			s.logger().WarnContext(ctx, "describing the leased version", "lease", l.ID, "manifest_url", l.ManifestURL, "error", err)
		} else {
			resp.FetchUrl, resp.TotalSize, resp.FileCount = info.FetchURL, info.TotalSize, int32(info.FileCount)
			if !info.FetchExpires.IsZero() {
				resp.FetchExpires = timestamppb.New(info.FetchExpires)
			}
		}
	}
	return resp, nil
}

func (s Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Renew extends a live lease.
func (s Server) Renew(ctx context.Context, req *v1.RenewRequest) (*v1.RenewResponse, error) {
	var d time.Duration
	if req.GetLeaseDuration() != nil {
		d = req.GetLeaseDuration().AsDuration()
	}
	expires, err := s.Leases.Renew(ctx, req.GetLeaseId(), d)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return &v1.RenewResponse{Expires: timestamppb.New(expires)}, nil
}

// Complete moves the leased job to Notify.
func (s Server) Complete(ctx context.Context, req *v1.CompleteRequest) (*v1.CompleteResponse, error) {
	if err := s.Leases.Complete(ctx, req.GetLeaseId()); err != nil {
		return nil, toStatus(ctx, err)
	}
	return &v1.CompleteResponse{LeaseId: req.GetLeaseId(), State: v1.JobState_JOB_STATE_NOTIFY}, nil
}

// Fail moves the leased job to Failed with the caller's message.
func (s Server) Fail(ctx context.Context, req *v1.FailRequest) (*v1.FailResponse, error) {
	if err := s.Leases.Fail(ctx, req.GetLeaseId(), req.GetMessage()); err != nil {
		return nil, toStatus(ctx, err)
	}
	return &v1.FailResponse{LeaseId: req.GetLeaseId(), State: v1.JobState_JOB_STATE_FAILED}, nil
}

// toStatus maps the lease manager's errors to gRPC codes, keeping the
// message, and the queue's as every service does (shared/rpcerr). A commit
// refused because the job was taken from under the lease is the queue's
// ErrFenced before it is an ended lease: Aborted, as anywhere else.
func toStatus(ctx context.Context, err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, queue.ErrFenced):
		return rpcerr.FromQueue(err)
	case errors.Is(err, lease.ErrUnknown):
		code = codes.NotFound
	case errors.Is(err, lease.ErrEnded):
		code = codes.FailedPrecondition
	case errors.Is(err, lease.ErrStopping):
		code = codes.Unavailable
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	default:
		return rpcerr.FromQueue(err)
	}
	return status.Error(code, err.Error())
}
