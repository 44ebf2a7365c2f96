package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/core"
)

// HoldJob moves a pending job to Held.
func (t *Tools) HoldJob(ctx context.Context, jid, message string) (*v1.Job, error) {
	return t.b.MoveJob(ctx, jid, []queue.JobState{queue.Pending}, func(core.Claimed) (core.Move, error) {
		return core.Move{To: queue.Held, Message: orDefault(message, "held by an operator")}, nil
	})
}

// ReleaseJob moves a held job back to Pending.
func (t *Tools) ReleaseJob(ctx context.Context, jid, message string) (*v1.Job, error) {
	return t.b.MoveJob(ctx, jid, []queue.JobState{queue.Held}, func(core.Claimed) (core.Move, error) {
		return core.Move{To: queue.Pending, Message: orDefault(message, "released by an operator")}, nil
	})
}

// FailJob fails a job that is waiting between steps (the state table decides
// which states may fail). A job whose status node is unreadable (garbled by
// another writer) is failed from the state its entry names, unless a live
// worker holds its lock: its status is written anew, its message saying
// what was unreadable (the garbled bytes are not kept).
func (t *Tools) FailJob(ctx context.Context, jid, message string) (*v1.Job, error) {
	return t.b.MoveJob(ctx, jid, nil, func(cl core.Claimed) (core.Move, error) {
		if err := t.b.CheckJobMove(jid, cl.From, queue.Failed); err != nil {
			return core.Move{}, err
		}
		msg := orDefault(message, "failed by an operator")
		if cl.StatusErr != nil {
			msg = fmt.Sprintf("%s (its status was unreadable and was written anew: %s)", msg, t.b.Truncate(cl.StatusErr.Error(), 200))
		}
		return core.Move{To: queue.Failed, Message: msg}, nil
	})
}

// RequeueJob resumes a failed job at `to`, or, when to is unspecified, at the
// state after its last successful one. retry_count goes up by one. A state
// past the job's progress is refused (ErrWrongState), naming the states the
// job may take (RequeueStates).
func (t *Tools) RequeueJob(ctx context.Context, jid string, to queue.JobState, message string) (*v1.Job, error) {
	return t.b.MoveJob(ctx, jid, []queue.JobState{queue.Failed}, func(cl core.Claimed) (core.Move, error) {
		if to == v1.JobState_JOB_STATE_UNSPECIFIED {
			to = queue.ResumeState(cl.Job.GetStatus().GetLastSuccessfulStatus())
		}
		if to == queue.Deleted {
			return core.Move{}, fmt.Errorf("%w: requeue to Deleted; delete the job instead", queue.ErrInvalid)
		}
		may := queue.RequeueStates(cl.Job.GetStatus().GetLastSuccessfulStatus(), cl.HasStore, cl.HasInventory)
		if !slices.Contains(may, to) {
			return core.Move{}, fmt.Errorf("job %s cannot be requeued to %s: %w: %s", jid, queue.JobStateName(to), queue.ErrWrongState,
				t.requeueRefusal(cl.Job.GetStatus().GetLastSuccessfulStatus(), to, may))
		}
		return core.Move{To: to, Message: orDefault(message, "requeued by an operator to "+queue.JobStateName(to))}, nil
	})
}

// requeueRefusal says why `to` is not among may.
func (t *Tools) requeueRefusal(lastSuccessful, to queue.JobState, may []queue.JobState) string {
	names := make([]string, len(may))
	for i, s := range may {
		names[i] = queue.JobStateName(s)
	}
	why := "its last successful state is " + stateOrNone(lastSuccessful)
	if slices.Index(queue.JobStates(), to) <= slices.Index(queue.JobStates(), queue.ResumeState(lastSuccessful)) {
		why = "it has no " + t.b.NeededNodes(to) + ", which " + queue.JobStateName(to) + " needs"
	}
	return fmt.Sprintf("%s; it may be requeued to %s", why, strings.Join(names, ", "))
}

func stateOrNone(s queue.JobState) string {
	if s == v1.JobState_JOB_STATE_UNSPECIFIED {
		return "none (it never got past Pending)"
	}
	return queue.JobStateName(s)
}

// ReprioritizeJob changes a waiting job's priority; its state entry is renamed
// in the same operation.
func (t *Tools) ReprioritizeJob(ctx context.Context, jid string, priority int32) (*v1.Job, error) {
	if err := t.b.ValidPriority(&priority); err != nil {
		return nil, err
	}
	cl, err := t.q.ClaimJob(ctx, jid)
	if err != nil {
		return nil, err
	}
	defer cl.Release(context.WithoutCancel(ctx))
	if !queue.IsLive(cl.State()) {
		return nil, fmt.Errorf("job %s is %s: %w: only a live job has a priority that matters", jid, queue.JobStateName(cl.State()), queue.ErrWrongState)
	}
	if err := cl.Update(ctx, queue.Change{Priority: &priority}); err != nil {
		return nil, err
	}
	return cl.Job, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// DeleteJob removes a failed or held job's nodes and moves its batch
// reference to batch-deleted. Deleting a job whose batch is still open needs
// force: its depositor will never hear of it. A job whose status node is
// unreadable is deleted when its state entry is Failed or Held and no live
// worker holds its lock (FailJob it first otherwise).
//
// It returns the job as the deletion read it, for the caller to remove its
// working directory (queue.JobWorkingDir): its bid and configuration are
// there even when its status was unreadable (the status then is the state
// its entry named), where a read before the deletion would have failed.
func (t *Tools) DeleteJob(ctx context.Context, jid string, force bool) (*v1.Job, error) {
	return t.b.DeleteJob(ctx, jid, force)
}
