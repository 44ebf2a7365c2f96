package adminservice

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The console's sign-ins are kept in the queue's ZooKeeper (the admin
// tools' SignIns), where every console replica, through any
// batcher, finds them: a sign-out ends a sign-in everywhere at once.

// CreateConsoleSession records a sign-in under a new random id.
func (s *Server) CreateConsoleSession(ctx context.Context, req *v1.CreateConsoleSessionRequest) (*v1.CreateConsoleSessionResponse, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return nil, status.Errorf(codes.Internal, "console session id: %v", err)
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	expires := time.Now().Add(req.GetTtl().AsDuration())
	if err := s.q().tools.SignIns.Create(ctx, id, expires); err != nil {
		if errors.Is(err, queue.ErrExists) {
			return nil, status.Error(codes.ResourceExhausted, err.Error()+": wait for a sign-in to end or expire")
		}
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.CreateConsoleSessionResponse{SessionId: id, ExpireTime: timestamppb.New(expires)}, nil
}

// GetConsoleSession says whether a sign-in is live now.
func (s *Server) GetConsoleSession(ctx context.Context, req *v1.GetConsoleSessionRequest) (*v1.GetConsoleSessionResponse, error) {
	live, err := s.q().tools.SignIns.Live(ctx, req.GetSessionId(), time.Now())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.GetConsoleSessionResponse{SessionId: req.GetSessionId(), Live: live}, nil
}

// EndConsoleSession ends a sign-in.
func (s *Server) EndConsoleSession(ctx context.Context, req *v1.EndConsoleSessionRequest) (*v1.EndConsoleSessionResponse, error) {
	if err := s.q().tools.SignIns.End(ctx, req.GetSessionId()); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.EndConsoleSessionResponse{SessionId: req.GetSessionId()}, nil
}
