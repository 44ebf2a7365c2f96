// Package stageservice serves ingestq.v1.StageService for the recorder, as
// every stage replica does: its worker entry, and the operator's hand on
// its lease manager.
//
// Pause stops the manager handing out leases: the built-in recorder takes
// nothing, and RecordingService.Lease answers empty after its wait, as it
// does when the whole queue is paused, so an inventory's loop keeps polling
// without treating the pause as a failure. Leases already out go on.
// Drain is the manager's Stop: no lease from then on (Lease answers
// Unavailable), the leases out get until the call's deadline to finish and
// are given back after it. The replica keeps serving, and its worker entry
// says it is draining, until the process stops.
package stageservice

import (
	"context"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/shared/queue"
)

// DefaultDrain is how long Drain waits for the leases out when the call
// has no deadline, as for the stage replicas; AnswerMargin is the most of a
// call's time Drain keeps for its answer.
const (
	DefaultDrain = 30 * time.Second
	AnswerMargin = time.Second
)

// Server implements v1.StageServiceServer over a lease manager.
type Server struct {
	v1.UnimplementedStageServiceServer
	Leases *lease.Manager
	// Worker is the replica's entry in the worker registry.
	Worker *queue.WorkerRegistration
}

// workers is the replica's one worker as it is now.
func (s Server) workers() []*v1.WorkerInfo {
	w := s.Worker.Info()
	s.Leases.Report(w)
	return []*v1.WorkerInfo{w}
}

// GetStatus reports the worker: its leases out and the leases ended since
// start by outcome.
func (s Server) GetStatus(context.Context, *v1.GetStatusRequest) (*v1.GetStatusResponse, error) {
	return &v1.GetStatusResponse{Workers: s.workers()}, nil
}

// Pause stops handing out leases.
func (s Server) Pause(context.Context, *v1.PauseRequest) (*v1.PauseResponse, error) {
	s.Leases.Pause()
	return &v1.PauseResponse{Workers: s.workers()}, nil
}

// Resume hands out leases again.
func (s Server) Resume(context.Context, *v1.ResumeRequest) (*v1.ResumeResponse, error) {
	s.Leases.Resume()
	return &v1.ResumeResponse{Workers: s.workers()}, nil
}

// Drain stops handing out leases for good and waits for the leases out
// until shortly before the call's deadline (DefaultDrain without one); those
// left then are given back and counted in in_flight_left. A tenth of the
// time left, at most AnswerMargin, is kept for giving them back and
// answering: an answer sent at the deadline would never arrive.
func (s Server) Drain(ctx context.Context, _ *v1.DrainRequest) (*v1.DrainResponse, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultDrain)
	}
	margin := min(time.Until(deadline)/10, AnswerMargin)
	waitCtx, cancel := context.WithDeadline(ctx, deadline.Add(-margin))
	defer cancel()
	left := s.Leases.Stop(waitCtx)
	return &v1.DrainResponse{Workers: s.workers(), InFlightLeft: int32(left)}, nil
}
