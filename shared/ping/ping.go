// Package ping implements ingestq.v1.PingService, the echo service every
// ingestq service serves so operators can check liveness and the admin
// token end to end.
package ping

import (
	"context"

	ingestqv1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// Service answers pings on behalf of one ingestq service.
type Service struct {
	ingestqv1.UnimplementedPingServiceServer
	name string
}

// New returns the PingService of the ingestq service called name.
func New(name string) *Service {
	return &Service{name: name}
}

// Ping echoes the message.
func (s *Service) Ping(_ context.Context, req *ingestqv1.PingRequest) (*ingestqv1.PingResponse, error) {
	return &ingestqv1.PingResponse{Message: req.GetMessage(), Service: s.name}, nil
}

// AdminPing echoes the message; the server's auth lets only admin callers in.
func (s *Service) AdminPing(_ context.Context, req *ingestqv1.AdminPingRequest) (*ingestqv1.AdminPingResponse, error) {
	return &ingestqv1.AdminPingResponse{Message: req.GetMessage(), Service: s.name}, nil
}
