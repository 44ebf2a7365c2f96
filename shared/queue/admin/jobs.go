package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
)

// Hold moves a pending job to Held.
func (t *Jobs) Hold(ctx context.Context, jid, message string) (*v1.Job, error) {
	return t.move(ctx, jid, []queue.JobState{queue.Pending}, func(*jobs.Claim) (jobs.Change, error) {
		return jobs.Change{To: queue.Held, Message: orDefault(message, "held by an operator")}, nil
	})
}

// Release moves a held job back to Pending.
func (t *Jobs) Release(ctx context.Context, jid, message string) (*v1.Job, error) {
	return t.move(ctx, jid, []queue.JobState{queue.Held}, func(*jobs.Claim) (jobs.Change, error) {
		return jobs.Change{To: queue.Pending, Message: orDefault(message, "released by an operator")}, nil
	})
}

// Fail fails a job that is waiting between steps (the state table decides
// which states may fail). A job whose status node is unreadable (garbled by
// another writer) is failed from the state its entry names, unless a live
// worker holds its lock: its status is written anew, its message saying
// what was unreadable (the garbled bytes are not kept).
func (t *Jobs) Fail(ctx context.Context, jid, message string) (*v1.Job, error) {
	return t.move(ctx, jid, nil, func(cl *jobs.Claim) (jobs.Change, error) {
		if err := queue.CheckJobMove(jid, cl.State(), queue.Failed); err != nil {
			return jobs.Change{}, err
		}
		msg := orDefault(message, "failed by an operator")
		if cl.StatusErr != nil {
			msg = fmt.Sprintf("%s (its status was unreadable and was written anew: %s)", msg, queue.Truncate(cl.StatusErr.Error(), 200))
		}
		return jobs.Change{To: queue.Failed, Message: msg}, nil
	})
}

// Requeue resumes a failed job at `to`, or, when to is unspecified, at the
// state after its last successful one. retry_count goes up by one. A state
// past the job's progress is refused (ErrWrongState), naming the states the
// job may take (queue.RequeueStates). A job whose payload is an object
// manifest, requeued to Pending or Estimating, loses its file list in the
// same commit (queue.RereadsManifest): the stage there reads the manifest
// again, and its history says so.
func (t *Jobs) Requeue(ctx context.Context, jid string, to queue.JobState, message string) (*v1.Job, error) {
	return t.move(ctx, jid, []queue.JobState{queue.Failed}, func(cl *jobs.Claim) (jobs.Change, error) {
		last := cl.Job.GetStatus().GetLastSuccessfulStatus()
		if to == v1.JobState_JOB_STATE_UNSPECIFIED {
			to = queue.ResumeState(last)
		}
		if to == queue.Deleted {
			return jobs.Change{}, fmt.Errorf("%w: requeue to Deleted; delete the job instead", queue.ErrInvalid)
		}
		may := queue.RequeueStates(last, cl.Has(queue.NodeStore), cl.Has(queue.NodeInventory))
		if !slices.Contains(may, to) {
			return jobs.Change{}, fmt.Errorf("job %s cannot be requeued to %s: %w: %s", jid, queue.JobStateName(to), queue.ErrWrongState,
				requeueRefusal(last, to, may))
		}
		ch := jobs.Change{To: to, Message: orDefault(message, "requeued by an operator to "+queue.JobStateName(to))}
		if conf := cl.Job.GetConfiguration(); queue.RereadsManifest(conf, to) {
			ch.Manifest = &v1.Manifest{}
			ch.Message += fmt.Sprintf("; its file list is dropped: %s reads the object manifest %s again", queue.JobStateName(to), conf.GetPayloadUrl())
		}
		return ch, nil
	})
}

// requeueRefusal says why `to` is not among may.
func requeueRefusal(lastSuccessful, to queue.JobState, may []queue.JobState) string {
	names := make([]string, len(may))
	for i, s := range may {
		names[i] = queue.JobStateName(s)
	}
	why := "its last successful state is " + stateOrNone(lastSuccessful)
	if queue.StateIndex(to) <= queue.StateIndex(queue.ResumeState(lastSuccessful)) {
		why = "it has no " + queue.NeededNodes(to) + ", which " + queue.JobStateName(to) + " needs"
	}
	return fmt.Sprintf("%s; it may be requeued to %s", why, strings.Join(names, ", "))
}

func stateOrNone(s queue.JobState) string {
	if s == v1.JobState_JOB_STATE_UNSPECIFIED {
		return "none (it never got past Pending)"
	}
	return queue.JobStateName(s)
}

// Reprioritize changes a waiting job's priority; its state entry is renamed
// in the same operation.
func (t *Jobs) Reprioritize(ctx context.Context, jid string, priority int32) (*v1.Job, error) {
	if err := queue.ValidPriority(&priority); err != nil {
		return nil, err
	}
	cl, err := t.jobs.ClaimJob(ctx, jid)
	if err != nil {
		return nil, err
	}
	defer cl.Release(context.WithoutCancel(ctx))
	if !queue.IsLive(cl.State()) {
		return nil, fmt.Errorf("job %s is %s: %w: only a live job has a priority that matters", jid, queue.JobStateName(cl.State()), queue.ErrWrongState)
	}
	if err := cl.Update(ctx, jobs.Change{Priority: &priority}); err != nil {
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

// Delete removes a failed or held job's nodes and moves its batch
// reference to batch-deleted. Deleting a job whose batch is still open needs
// force: its depositor will never hear of it. A job whose status node is
// unreadable is deleted when its state entry is Failed or Held and no live
// worker holds its lock (Fail it first otherwise).
//
// It returns the job as the deletion read it, for the caller to remove its
// working directory (queue.JobWorkingDir): its bid and configuration are
// there even when its status was unreadable (the status then is the state
// its entry named), where a read before the deletion would have failed.
func (t *Jobs) Delete(ctx context.Context, jid string, force bool) (*v1.Job, error) {
	cl, err := t.jobs.ClaimForOperator(ctx, jid)
	if err != nil {
		return nil, err
	}
	// Refused (the claim ended) once the deletion took the lock with it.
	defer cl.Release(context.WithoutCancel(ctx))
	if err := queue.CheckJobMove(jid, cl.State(), queue.Deleted); err != nil {
		if cl.StatusErr != nil {
			return nil, fmt.Errorf("job %s: its status is unreadable and its entry says %s, not Failed or Held: %w: fail it first",
				jid, queue.JobStateName(cl.State()), queue.ErrWrongState)
		}
		return nil, fmt.Errorf("job %s is %s, not Failed or Held: %w", jid, queue.JobStateName(cl.State()), queue.ErrWrongState)
	}
	// The batch's state decides (an open batch needs force), and its
	// reference moves: the deletion relies on the batch as read.
	bst, err := t.pinBatch(ctx, cl, queue.Deleted)
	if err != nil {
		return nil, err
	}
	if !force && bst != nil && queue.BatchOpen(bst.GetStatus()) {
		return nil, fmt.Errorf("job %s: batch %s is still %s and its depositor would never hear of this job; %w: pass force to delete anyway",
			jid, cl.Job.Bid, queue.BatchStateName(bst.GetStatus()), queue.ErrWrongState)
	}
	if err := cl.Delete(ctx); err != nil {
		return nil, err
	}
	return cl.Job, nil
}

// move claims a job for an operator, checks it is in one of want (any,
// when empty), asks decide where it goes, makes the move rely on the job's
// batch (pinBatch) and commits it, fenced like a stage's.
func (t *Jobs) move(ctx context.Context, jid string, want []queue.JobState, decide func(*jobs.Claim) (jobs.Change, error)) (*v1.Job, error) {
	cl, err := t.jobs.ClaimForOperator(ctx, jid)
	if err != nil {
		return nil, err
	}
	if cl.StatusErr != nil && len(want) > 0 {
		// Only a failure (no want: the state table decides) may rewrite a
		// status nobody can read.
		cl.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("job %s: %w: its status is unreadable, so it can only be failed or deleted", jid, queue.ErrCorrupt)
	}
	if len(want) > 0 && !slices.Contains(want, cl.State()) {
		cl.Release(context.WithoutCancel(ctx))
		names := make([]string, len(want))
		for i, s := range want {
			names[i] = queue.JobStateName(s)
		}
		return nil, fmt.Errorf("job %s is %s, not %s: %w", jid, queue.JobStateName(cl.State()), strings.Join(names, " or "), queue.ErrWrongState)
	}
	change, err := decide(cl)
	if err == nil && cl.StatusErr != nil && change.To != queue.Failed {
		err = fmt.Errorf("job %s: %w: its status is unreadable, so it can only be failed or deleted", jid, queue.ErrCorrupt)
	}
	if err == nil {
		_, err = t.pinBatch(ctx, cl, change.To)
	}
	if err == nil {
		err = cl.Commit(ctx, change)
	}
	if err != nil {
		cl.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return cl.Job, nil
}

// pinBatch reads the batch of a job claimed for an operator's move to `to`
// and makes the move rely on it. A move into a live state needs a batch
// that will still report (not Completed or Deleted); a job whose batch is
// gone can still be failed or deleted. A move out of an ended state (a
// requeue, a deletion) relies on the batch's state as read: the commit
// checks that the batch's status is still the version read here, so a
// batch deleted (or changed) meanwhile refuses the move rather than leave
// a job without its batch. A live job's batch cannot be deleted (its
// reference in batch-processing stops a batch's deletion), so a move from
// a live state only needs the batch to exist, as a stage's does: the
// batcher working on the batch meanwhile does not refuse it. A requeue
// waits until the batch's jobs are all created. It returns the batch's
// status (nil when it has none).
func (t *base) pinBatch(ctx context.Context, cl *jobs.Claim, to queue.JobState) (*v1.BatchStatus, error) {
	bid := cl.Job.GetBid()
	gone := func() (*v1.BatchStatus, error) {
		if queue.IsLive(to) {
			return nil, &queue.NoBatchError{Job: cl.ID(), Batch: bid}
		}
		cl.RelyOnBatch(false, false, 0)
		return nil, nil
	}
	if !queue.ValidBatchID(bid) {
		return gone()
	}
	p := t.p.Batch(bid).Status()
	data, stat, err := t.z.Get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) {
		return gone()
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	st, err := queue.DecodeBatchStatus(p, data)
	if err != nil && queue.IsLive(to) {
		return nil, err
	}
	if s := st.GetStatus(); queue.IsLive(to) && (s == queue.BatchCompleted || s == queue.BatchDeleted) {
		return nil, fmt.Errorf("job %s: its batch %s is %s, so the job cannot go back to %s: %w",
			cl.ID(), bid, queue.BatchStateName(s), queue.JobStateName(to), queue.ErrWrongState)
	}
	if queue.IsLive(to) && !queue.IsLive(cl.State()) {
		// A requeue while the batch's jobs are still being created could
		// slip between the folders the batcher lists to learn which rows
		// have jobs, and the row be made a job twice. The marker appears
		// only with a change of the batch's status, which the pinned
		// version refuses, so reading it after the status is enough.
		spawning, _, err := t.z.Exists(ctx, t.p.Batch(bid).Node(queue.NodeSpawning))
		if err != nil {
			return nil, fmt.Errorf("reading batch %s: %w", bid, err)
		}
		if s := st.GetStatus(); s == queue.BatchPending || spawning {
			return nil, fmt.Errorf("job %s: the jobs of its batch %s are still being created, so the job cannot go back to %s yet: %w",
				cl.ID(), bid, queue.JobStateName(to), queue.ErrWrongState)
		}
	}
	cl.RelyOnBatch(true, !queue.IsLive(cl.State()), stat.Version)
	return st, nil
}
