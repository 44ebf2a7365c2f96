package adminservice

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/rpcerr"
)

// What an operator's action would meet now, for a client that offers an
// action only where it applies and says why beside one that cannot apply
// yet (the console). The states each action takes are the state rules'
// (GetStateRules); these add what the methods check beyond the state: a
// held collection, a batch's jobs and reports, a lock.

// jobVerbs are the job actions, in the order the answers list them.
var jobVerbs = []v1.BulkVerb{v1.BulkVerb_BULK_VERB_REQUEUE, v1.BulkVerb_BULK_VERB_HOLD, v1.BulkVerb_BULK_VERB_RELEASE,
	v1.BulkVerb_BULK_VERB_FAIL, v1.BulkVerb_BULK_VERB_DELETE, v1.BulkVerb_BULK_VERB_REPRIORITIZE}

// jobActions says, for each action the job's state takes, whether the
// method would take the job now.
func (s *Server) jobActions(ctx context.Context, j *v1.Job, requeueTo []queue.JobState) ([]*v1.JobActionState, error) {
	st := j.GetStatus().GetStatus()
	var out []*v1.JobActionState
	for _, verb := range jobVerbs {
		if !slices.Contains(BulkStates(verb), st) {
			continue
		}
		why := ""
		switch {
		case j.GetLocked():
			why = "a stage is working on the job now; it is offered again once the stage lets go of it"
		case verb == v1.BulkVerb_BULK_VERB_RELEASE:
			held, err := s.collectionHeld(ctx, j.GetConfiguration().GetCollection())
			if err != nil {
				return nil, err
			}
			if held {
				why = fmt.Sprintf("its collection %s is held: release the collection first (the queue page, or ReleaseCollection), which releases the job with it",
					j.GetConfiguration().GetCollection())
			}
		case verb == v1.BulkVerb_BULK_VERB_REQUEUE:
			why = s.requeueBlocker(ctx, j, requeueTo)
		}
		out = append(out, &v1.JobActionState{Verb: verb, Applies: new(why == ""), Reason: why})
	}
	return out, nil
}

// requeueBlocker says why a failed job cannot be requeued now: its batch
// has ended for good or is still creating its jobs (as the requeue itself
// checks), or it may go nowhere.
func (s *Server) requeueBlocker(ctx context.Context, j *v1.Job, requeueTo []queue.JobState) string {
	if len(requeueTo) == 0 {
		return "it has none of the nodes any state it could resume at needs"
	}
	b, err := s.q().batches.GetBatch(ctx, j.GetBid())
	if err != nil {
		// The requeue itself says what is wrong with the batch.
		return ""
	}
	switch st := b.GetStatus().GetStatus(); st {
	case queue.BatchCompleted, queue.BatchDeleted:
		return fmt.Sprintf("its batch %s is %s: a job of an ended batch cannot go back", j.GetBid(), queue.BatchStateName(st))
	case queue.BatchPending:
		return fmt.Sprintf("the jobs of its batch %s are still being created: requeue it once they are", j.GetBid())
	}
	return ""
}

// collectionHeld reports whether collection m is on hold ("" never is).
func (s *Server) collectionHeld(ctx context.Context, m string) (bool, error) {
	if m == "" {
		return false, nil
	}
	held, err := s.q().jobs.CollectionHeld(ctx, m)
	if err != nil {
		return false, rpcerr.FromQueue(err)
	}
	return held, nil
}

// batchCollection is the collection a batch belongs to: the one its
// submission records, else its profile's ("" when neither is known).
func (s *Server) batchCollection(b *v1.Batch) string {
	if c := b.GetSubmission().GetCollection(); c != "" {
		return c
	}
	if prof, ok := s.Profiles.Get(b.GetSubmission().GetProfileName()); ok {
		return prof.Collection
	}
	return ""
}

// batchActions says, for each action the batch's state takes, whether the
// method would take the batch (read with its counts) now.
func (s *Server) batchActions(ctx context.Context, b *v1.Batch) ([]*v1.BatchActionState, error) {
	st := b.GetStatus().GetStatus()
	var out []*v1.BatchActionState
	for _, a := range []struct {
		action v1.BatchAction
		to     queue.BatchState
	}{
		{v1.BatchAction_BATCH_ACTION_RELEASE, queue.BatchPending},
		{v1.BatchAction_BATCH_ACTION_UPDATE_REPORT, queue.BatchUpdateReporting},
		{v1.BatchAction_BATCH_ACTION_DELETE, queue.BatchDeleted},
	} {
		if !queue.CanMoveBatch(st, a.to) {
			continue
		}
		why := ""
		switch {
		case b.GetLocked():
			why = "a batcher is working on the batch now; it is offered again once the batcher lets go of it"
		case a.action == v1.BatchAction_BATCH_ACTION_RELEASE:
			m := s.batchCollection(b)
			held, err := s.collectionHeld(ctx, m)
			if err != nil {
				return nil, err
			}
			if held {
				why = fmt.Sprintf("its collection %s is held: release the collection first (the queue page, or ReleaseCollection), which releases the batch with it", m)
			}
		case a.action == v1.BatchAction_BATCH_ACTION_UPDATE_REPORT:
			var err error
			if why, err = s.q().tools.Batches.UpdateReportBlocked(ctx, b); err != nil {
				return nil, rpcerr.FromQueue(err)
			}
		case a.action == v1.BatchAction_BATCH_ACTION_DELETE && b.GetCounts().GetProcessing() > 0:
			why = fmt.Sprintf("%d of its jobs are live (requeued, not ended): delete it once they have ended", b.GetCounts().GetProcessing())
		}
		out = append(out, &v1.BatchActionState{Action: a.action, Applies: new(why == ""), Reason: why})
	}
	return out, nil
}

// jobWaiting says why no stage works on a job that waits in a stage's
// state: "" when one takes it (or may at any moment), or the job waits in
// no stage's state.
func (s *Server) jobWaiting(ctx context.Context, j *v1.Job) (string, error) {
	st := j.GetStatus().GetStatus()
	if j.GetLocked() || !queue.IsLive(st) || st == queue.Held {
		return "", nil
	}
	paused, err := s.q().jobs.Paused(ctx)
	if err != nil {
		return "", rpcerr.FromQueue(err)
	}
	if paused {
		return "It waits: the queue is paused, so no stage takes a job until it is unpaused (the queue page, or UnpauseQueue).", nil
	}
	workers, err := s.q().tools.Queue.ListWorkers(ctx)
	if err != nil {
		return "", rpcerr.FromQueue(err)
	}
	name := queue.JobStateName(st)
	var registered, active, onDemand int
	var idle []string
	for _, w := range workers {
		if w.GetStage() != name {
			continue
		}
		registered++
		switch {
		case w.GetDraining():
			idle = append(idle, w.GetId()+" draining")
		case w.GetPaused():
			idle = append(idle, w.GetId()+" paused")
		default:
			active++
			if w.GetConcurrency() == 0 {
				onDemand++
			}
		}
	}
	switch {
	case registered == 0:
		return fmt.Sprintf("It waits: no replica taking jobs from %s is registered; start one (its service) and it takes the job.", name), nil
	case active == 0:
		return fmt.Sprintf("It waits: every replica taking jobs from %s is paused or draining (%s); resume one (the queue page's workers, or StageService/Resume).",
			name, strings.Join(idle, ", ")), nil
	case onDemand == active:
		return fmt.Sprintf("It waits for an inventory to lease it (RecordingService/Lease): the replicas taking jobs from %s hand them over only when asked (the built-in recorder is off).", name), nil
	}
	return "", nil
}
