package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/proto"
)

// ClaimJob takes the lock of one job by id, whatever its state. It fails with
// ErrLocked when a consumer is working on the job and ErrNotFound when there
// is no such job. Admin actions go through it, so they are fenced exactly
// like a stage's step.
func (c *Client) ClaimJob(ctx context.Context, jid string) (*Claim, error) {
	return c.claimJob(ctx, jid, false)
}

// claimJob is ClaimJob; with unreadable, a job whose status node cannot be
// decoded is claimed too, in the state its one entry names (the claim's
// statusErr says why): an operator can then fail or delete it. Its claim
// is fenced as any other: taking the lock rewrites the status as read, so
// a live session's lock refuses it and a status changed since the read
// does too.
func (c *Client) claimJob(ctx context.Context, jid string, unreadable bool) (*Claim, error) {
	if !ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", ErrInvalid, jid)
	}
	for attempt := 0; attempt < 5; attempt++ {
		st, err := c.JobStatus(ctx, jid)
		if unreadable && errors.Is(err, ErrCorrupt) {
			cl, cerr := c.claimUnreadable(ctx, jid, err)
			if errors.Is(cerr, errStale) {
				continue
			}
			return cl, cerr
		}
		if err != nil {
			return nil, err
		}
		e, err := c.findEntry(ctx, st.GetStatus(), jid)
		if errors.Is(err, ErrCorrupt) {
			// A job moving between the two reads looks the same as a
			// corrupt one: only a status that stayed put is corrupt.
			if now, rerr := c.JobStatus(ctx, jid); rerr == nil && !proto.Equal(now, st) {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		cl, err := c.claimEntry(ctx, st.GetStatus(), e, PartsAll, true)
		switch {
		case errors.Is(err, errBusy):
			return nil, fmt.Errorf("job %s (%s): %w", jid, JobStateName(st.GetStatus()), ErrLocked)
		case errors.Is(err, errStale):
			continue // it moved between the two reads
		}
		return cl, err
	}
	return nil, fmt.Errorf("job %s: %w: it keeps changing state", jid, ErrLocked)
}

// claimUnreadable claims a job whose status could not be decoded (why),
// in the state of its one entry.
func (c *Client) claimUnreadable(ctx context.Context, jid string, why error) (*Claim, error) {
	found, in, err := c.scanEntries(ctx, jid)
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		names := make([]string, len(in))
		for i, s := range in {
			names[i] = JobStateName(s)
		}
		return nil, fmt.Errorf("%w; it has %d state entries (%s), so its state is unknown: run fsck", why, len(found), strings.Join(names, ", "))
	}
	cl, err := c.claimEntry(ctx, in[0], found[0], PartsAll, true)
	switch {
	case errors.Is(err, errBusy):
		return nil, fmt.Errorf("job %s (%s, status unreadable): %w", jid, JobStateName(in[0]), ErrLocked)
	case err != nil:
		return nil, err
	}
	if cl.statusErr == nil {
		// Mended since it was read: claimed as any job is.
		cl.Release(context.WithoutCancel(ctx))
		return nil, errStale
	}
	return cl, nil
}

// scanEntries finds a job's entries by listing every state folder, for a
// job whose status cannot say which folder holds it.
func (c *Client) scanEntries(ctx context.Context, jid string) (found []entry, in []JobState, err error) {
	for _, s := range jobStates {
		names, _, err := c.children(ctx, c.p.jobStateDir(s))
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, fmt.Errorf("listing %s: %w", JobStateName(s), err)
		}
		for _, n := range names {
			if pr, id, ok := parseEntry(n); ok && id == jid {
				found, in = append(found, entry{name: n, priority: pr, jid: jid}), append(in, s)
			}
		}
	}
	return found, in, nil
}

// findEntry locates a job's entry in its state folder: by its priority node
// first, by a scan of the folder if a writer left them disagreeing.
func (c *Client) findEntry(ctx context.Context, s JobState, jid string) (entry, error) {
	pdata, _, err := c.get(ctx, c.p.jobNode(jid, nodePriority))
	if err == nil {
		if pr, perr := decodeInt("", pdata); perr == nil {
			name := entryName(int32(pr), jid)
			ok, _, err := c.exists(ctx, c.p.jobStateDir(s)+"/"+name)
			if err != nil {
				return entry{}, err
			}
			if ok {
				return entry{name: name, priority: int32(pr), jid: jid}, nil
			}
		}
	}
	names, _, err := c.children(ctx, c.p.jobStateDir(s))
	if err != nil {
		return entry{}, fmt.Errorf("listing %s: %w", JobStateName(s), err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, "-"+jid) {
			if pr, id, ok := parseEntry(n); ok {
				return entry{name: n, priority: pr, jid: id}, nil
			}
		}
	}
	return entry{}, fmt.Errorf("job %s: %w: status %s but no entry in /jobs/states/%s (run fsck)",
		jid, ErrCorrupt, JobStateName(s), jobStateSegment(s))
}

// moveJob claims a job, checks it is in one of want, and commits ch.
func (c *Client) moveJob(ctx context.Context, jid string, want []JobState, ch func(*Claim) (Change, error)) (*v1.Job, error) {
	cl, err := c.claimJob(ctx, jid, true)
	if err != nil {
		return nil, err
	}
	if cl.statusErr != nil && len(want) > 0 {
		// Only a failure (no want: the state table decides) may rewrite a
		// status nobody can read.
		cl.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("job %s: %w: its status is unreadable, so it can only be failed or deleted", jid, ErrCorrupt)
	}
	ok := len(want) == 0
	for _, s := range want {
		ok = ok || cl.from == s
	}
	if !ok {
		cl.Release(context.WithoutCancel(ctx))
		names := make([]string, len(want))
		for i, s := range want {
			names[i] = JobStateName(s)
		}
		return nil, fmt.Errorf("job %s is %s, not %s: %w", jid, JobStateName(cl.from), strings.Join(names, " or "), ErrWrongState)
	}
	change, err := ch(cl)
	if err == nil && cl.statusErr != nil && change.To != Failed {
		err = fmt.Errorf("job %s: %w: its status is unreadable, so it can only be failed or deleted", jid, ErrCorrupt)
	}
	if err == nil {
		_, err = c.pinBatch(ctx, cl, change.To)
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
// reference in batch-processing stops DeleteBatch), so a move from a live
// state only needs the batch to exist, as a stage's does: the batcher
// working on the batch meanwhile does not refuse it. A requeue waits until
// the batch's jobs are all created. It returns the batch's status (nil when
// it has none).
func (c *Client) pinBatch(ctx context.Context, cl *Claim, to JobState) (*v1.BatchStatus, error) {
	cl.byOperator = true
	bid := cl.Job.GetBid()
	gone := func() (*v1.BatchStatus, error) {
		if IsLive(to) {
			return nil, &NoBatchError{Job: cl.ID(), Batch: bid}
		}
		cl.noBatch = true
		return nil, nil
	}
	if !ValidBatchID(bid) {
		return gone()
	}
	p := c.p.batchStatus(bid)
	data, stat, err := c.get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) {
		return gone()
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	st, err := decodeBatchStatus(p, data)
	if err != nil && IsLive(to) {
		return nil, err
	}
	if s := st.GetStatus(); IsLive(to) && (s == BatchCompleted || s == BatchDeleted) {
		return nil, fmt.Errorf("job %s: its batch %s is %s, so the job cannot go back to %s: %w",
			cl.ID(), bid, BatchStateName(s), JobStateName(to), ErrWrongState)
	}
	if IsLive(to) && !IsLive(cl.from) {
		// A requeue while the batch's jobs are still being created could
		// slip between the folders the batcher lists to learn which rows
		// have jobs, and the row be made a job twice. The marker appears
		// only with a change of the batch's status, which the pinned
		// version refuses, so reading it after the status is enough.
		spawning, _, err := c.exists(ctx, c.p.batchSpawning(bid))
		if err != nil {
			return nil, fmt.Errorf("reading batch %s: %w", bid, err)
		}
		if s := st.GetStatus(); s == BatchPending || spawning {
			return nil, fmt.Errorf("job %s: the jobs of its batch %s are still being created, so the job cannot go back to %s yet: %w",
				cl.ID(), bid, JobStateName(to), ErrWrongState)
		}
	}
	cl.batchPinned, cl.batchVersion = !IsLive(cl.from), stat.Version
	return st, nil
}

// deleteJob removes a failed or held job's nodes and moves its batch
// reference to batch-deleted. Deleting a job whose batch is still open needs
// force: its depositor will never hear of it. It returns the job as its
// claim read it: its bid and configuration name its working directory even
// when its status was unreadable.
func (c *Client) deleteJob(ctx context.Context, jid string, force bool) (*v1.Job, error) {
	cl, err := c.claimJob(ctx, jid, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !cl.done {
			cl.Release(context.WithoutCancel(ctx))
		}
	}()
	if err := checkJobMove(jid, cl.from, Deleted); err != nil {
		if cl.statusErr != nil {
			return nil, fmt.Errorf("job %s: its status is unreadable and its entry says %s, not Failed or Held: %w: fail it first",
				jid, JobStateName(cl.from), ErrWrongState)
		}
		return nil, fmt.Errorf("job %s is %s, not Failed or Held: %w", jid, JobStateName(cl.from), ErrWrongState)
	}
	// The batch's state decides (an open batch needs force), and its
	// reference moves: the deletion relies on the batch as read.
	bst, err := c.pinBatch(ctx, cl, Deleted)
	if err != nil {
		return nil, err
	}
	if !force && bst != nil && BatchOpen(bst.GetStatus()) {
		return nil, fmt.Errorf("job %s: batch %s is still %s and its depositor would never hear of this job; %w: pass force to delete anyway",
			jid, cl.Job.Bid, BatchStateName(bst.GetStatus()), ErrWrongState)
	}
	children, _, err := c.children(ctx, c.p.job(jid))
	if err != nil {
		return nil, fmt.Errorf("listing job %s: %w", jid, err)
	}
	if err := cl.finish(); err != nil {
		return nil, err
	}
	commit := func() error {
		return cl.commitOps(ctx, checkOp(c.p.jobStatus(jid), cl.version), false, func(ref refPlace) []any {
			var ops []any
			for _, n := range children {
				if n != nodeLock {
					ops = append(ops, deleteOp(c.p.jobNode(jid, n), -1))
				}
			}
			ops = append(ops, deleteOp(c.p.jobStateDir(cl.from)+"/"+cl.entry, -1))
			if cl.Job.Bid != "" && !cl.noBatch {
				ops = append(ops, c.refOps(cl.Job.Bid, jid, ref, folderDeleted)...)
			}
			return ops
		}, []any{deleteOp(c.p.job(jid), -1)}, func([]byte) bool { return false }, nil)
	}
	err = commit()
	var nb *NoBatchError
	if errors.As(err, &nb) && !cl.noBatch {
		cl.noBatch = true // gone since it was read: nothing of it to move
		err = commit()
	}
	if err != nil {
		if errors.Is(err, zk.ErrNotEmpty) {
			return nil, fmt.Errorf("job %s changed while being deleted: %w", jid, ErrLocked)
		}
		return nil, err
	}
	cl.settle()
	return cl.Job, nil
}

// BatchOpen reports whether a batch in s will still report to its
// depositor: deleting one of its jobs needs force.
func BatchOpen(s BatchState) bool {
	switch s {
	case BatchCompleted, BatchFailed, BatchDeleted:
		return false
	}
	return true
}

// RequeueStates are the states a failed job may be requeued to, in pipeline
// order: those the state machine allows from Failed up to the one after its
// last successful state (a step it never reached would find nothing of the
// steps before it: a file list, downloaded files), each only with the nodes
// it needs (a store, an inventory: hasWhatItNeeds, as fsck decides).
func RequeueStates(lastSuccessful JobState, hasStore, hasInventory bool) []JobState {
	reach := slices.Index(jobStates, ResumeState(lastSuccessful))
	var out []JobState
	for i, s := range jobStates {
		if i <= reach && s != Deleted && CanMoveJob(Failed, s) && hasWhatItNeeds(s, hasStore, hasInventory) {
			out = append(out, s)
		}
	}
	return out
}

// hasWhatItNeeds reports whether a job in s has the nodes the steps
// before s write: processing writes its store (a job in Storing has it),
// storing its inventory (a job in Recording or later has both).
func hasWhatItNeeds(s JobState, hasStore, hasInventory bool) bool {
	switch s {
	case Storing:
		return hasStore
	case Recording, Notify, Completed:
		return hasStore && hasInventory
	}
	return true
}

// neededNodes names what hasWhatItNeeds looks for in s.
func neededNodes(s JobState) string {
	if s == Storing {
		return "store"
	}
	return "store and inventory"
}
