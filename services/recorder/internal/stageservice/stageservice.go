// Package stageservice puts the recorder's lease manager behind the worker
// interface of the stage runners (stage.Worker), so the recorder serves
// ingestq.v1.StageService with the implementation every stage serves: its
// worker entry, and the operator's hand on its lease manager.
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

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/stage"
)

// Worker is the recorder's lease manager as a stage.Worker, for the
// StageService every stage serves (stage.NewService).
type Worker struct {
	Leases *lease.Manager
	// Registration is the replica's entry in the worker registry.
	Registration *queue.WorkerRegistration
}

var _ stage.Worker = Worker{}

// Status reports the worker: its leases out and the leases ended since
// start by outcome.
func (w Worker) Status() *v1.WorkerInfo {
	info := w.Registration.Info()
	w.Leases.Report(info)
	return info
}

// Pause stops handing out leases.
func (w Worker) Pause() { w.Leases.Pause() }

// Resume hands out leases again.
func (w Worker) Resume() { w.Leases.Resume() }

// Drain stops handing out leases for good and waits for the leases out
// until ctx ends; those left then are given back and counted.
func (w Worker) Drain(ctx context.Context) int { return w.Leases.Stop(ctx) }
