package adminservice

import (
	"cmp"
	"context"
	"slices"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
)

// GetStateRules describes each job and batch state by what the methods of
// this server accept for an item in it, from the queue's state machine.
func (s *Server) GetStateRules(context.Context, *v1.GetStateRulesRequest) (*v1.GetStateRulesResponse, error) {
	resp := &v1.GetStateRulesResponse{VerifyObjects: s.Store.Root != "" || s.Store.Bucket != ""}
	verbs := []v1.BulkVerb{v1.BulkVerb_BULK_VERB_REQUEUE, v1.BulkVerb_BULK_VERB_HOLD, v1.BulkVerb_BULK_VERB_RELEASE,
		v1.BulkVerb_BULK_VERB_FAIL, v1.BulkVerb_BULK_VERB_DELETE, v1.BulkVerb_BULK_VERB_REPRIORITIZE}
	for _, st := range queue.JobStates() {
		r := &v1.JobStateRule{State: st,
			RequeueTarget: st != queue.Deleted && queue.CanMoveJob(queue.Failed, st),
			FailingStage:  queue.CanMoveJob(st, queue.Failed), Live: queue.IsLive(st)}
		for _, verb := range verbs {
			if slices.Contains(BulkStates(verb), st) {
				r.Actions = append(r.Actions, verb)
			}
		}
		resp.Jobs = append(resp.Jobs, r)
	}
	batches := queue.BatchStates()
	slices.SortFunc(batches, func(a, b queue.BatchState) int { return cmp.Compare(a, b) })
	for _, st := range batches {
		r := &v1.BatchStateRule{State: st, Open: queue.BatchOpen(st)}
		for _, a := range []struct {
			action v1.BatchAction
			to     queue.BatchState
		}{
			// Each action is the one move of its name; the moves into
			// Processing, Reporting, Completed and Failed are the
			// batcher's own.
			{v1.BatchAction_BATCH_ACTION_RELEASE, queue.BatchPending},
			{v1.BatchAction_BATCH_ACTION_UPDATE_REPORT, queue.BatchUpdateReporting},
			{v1.BatchAction_BATCH_ACTION_DELETE, queue.BatchDeleted},
		} {
			if queue.CanMoveBatch(st, a.to) {
				r.Actions = append(r.Actions, a.action)
			}
		}
		resp.Batches = append(resp.Batches, r)
	}
	return resp, nil
}

// answer fills what the server adds to a job it answers: the state a
// failed job failed in.
func answer(j *v1.Job) *v1.Job {
	if j.GetStatus().GetStatus() == queue.Failed {
		j.FailingStage = queue.FailedStage(j.GetStatus())
	}
	return j
}

// answerAll is answer for each job of a list.
func answerAll(jobs []*v1.Job) []*v1.Job {
	for _, j := range jobs {
		answer(j)
	}
	return jobs
}
