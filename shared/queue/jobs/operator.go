package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	"google.golang.org/protobuf/proto"
)

// ClaimJob takes the lock of one job by id, whatever its state. It fails
// with ErrLocked when a consumer is working on the job and
// ErrNotFound when there is no such job. Its claim is fenced exactly
// like a stage's.
func (c *Client) ClaimJob(ctx context.Context, jid string) (*Claim, error) {
	return c.claimJob(ctx, jid, false)
}

// ClaimForOperator is ClaimJob for an operator's move (package admin). A
// job whose status node cannot be decoded is claimed too, in the state its
// one entry names (the claim's StatusErr says why), so that it can be
// failed or deleted. Its commits are an operator's: recorded as such in the
// job's history, and refused (not turned into a failure) when the job's
// batch is gone. Its claim is fenced as any other: taking the lock rewrites
// the status as read, so a live session's lock refuses it and a status
// changed since the read does too.
func (c *Client) ClaimForOperator(ctx context.Context, jid string) (*Claim, error) {
	cl, err := c.claimJob(ctx, jid, true)
	if err != nil {
		return nil, err
	}
	cl.byOperator = true
	return cl, nil
}

// claimJob claims a job by id; with unreadable, one whose status cannot
// be decoded too.
func (c *Client) claimJob(ctx context.Context, jid string, unreadable bool) (*Claim, error) {
	if !queue.ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", queue.ErrInvalid, jid)
	}
	for attempt := 0; attempt < 5; attempt++ {
		st, err := c.r.JobStatus(ctx, jid)
		if unreadable && errors.Is(err, queue.ErrCorrupt) {
			cl, cerr := c.claimUnreadable(ctx, jid, err)
			if errors.Is(cerr, errStale) {
				continue
			}
			return cl, cerr
		}
		if err != nil {
			return nil, err
		}
		e, err := c.r.findEntry(ctx, st.GetStatus(), jid)
		if errors.Is(err, queue.ErrCorrupt) {
			// A job moving between the two reads looks the same as a
			// corrupt one: only a status that stayed put is corrupt.
			if now, rerr := c.r.JobStatus(ctx, jid); rerr == nil && !proto.Equal(now, st) {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		cl, err := c.claimEntry(ctx, st.GetStatus(), entry{Entry: e}, queue.PartsAll, true)
		switch {
		case errors.Is(err, errBusy):
			return nil, fmt.Errorf("job %s (%s): %w", jid, queue.JobStateName(st.GetStatus()), queue.ErrLocked)
		case errors.Is(err, errStale):
			continue // it moved between the two reads
		}
		return cl, err
	}
	return nil, fmt.Errorf("job %s: %w: it keeps changing state", jid, queue.ErrLocked)
}

// claimUnreadable claims a job whose status could not be decoded (why),
// in the state of its one entry.
func (c *Client) claimUnreadable(ctx context.Context, jid string, why error) (*Claim, error) {
	found, in, err := c.r.scanEntries(ctx, jid)
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		names := make([]string, len(in))
		for i, s := range in {
			names[i] = queue.JobStateName(s)
		}
		return nil, fmt.Errorf("%w; it has %d state entries (%s), so its state is unknown: run fsck", why, len(found), strings.Join(names, ", "))
	}
	cl, err := c.claimEntry(ctx, in[0], entry{Entry: found[0]}, queue.PartsAll, true)
	switch {
	case errors.Is(err, errBusy):
		return nil, fmt.Errorf("job %s (%s, status unreadable): %w", jid, queue.JobStateName(in[0]), queue.ErrLocked)
	case err != nil:
		return nil, err
	}
	if cl.StatusErr == nil {
		// Mended since it was read: claimed as any job is.
		cl.Release(context.WithoutCancel(ctx))
		return nil, errStale
	}
	return cl, nil
}

// RelyOnBatch makes the commits of an operator's claim rely on the job's
// batch as the operator read it. A batch that does not exist (exists
// false) is left alone: the job's references are not moved. With pinned,
// the batch's status must still be at version when the claim commits, or
// the commit is refused (ErrLocked): the move relies on the batch's
// state as read.
func (cl *Claim) RelyOnBatch(exists, pinned bool, version int32) {
	if !exists {
		cl.noBatch = true
		return
	}
	cl.batchPinned, cl.batchVersion = pinned, version
}

// Has reports whether the claim knows the job's data node name to exist
// (read with the claim, or written through it).
func (cl *Claim) Has(name string) bool { return cl.present[name] }

// Delete removes the job: its nodes and its state entry, its batch
// reference moved to batch-deleted, in one operation fenced as any commit.
// Only an operator's claim (ClaimForOperator) deletes, from a state the
// state machine lets go to Deleted; the caller decides whether the job's
// batch allows it.
func (cl *Claim) Delete(ctx context.Context) error {
	if !cl.byOperator {
		return fmt.Errorf("job %s: %w: only an operator's claim deletes a job", cl.ID(), queue.ErrInvalid)
	}
	if err := queue.CheckJobMove(cl.ID(), cl.from, queue.Deleted); err != nil {
		return err
	}
	c, jid := cl.c, cl.ID()
	children, _, err := c.z.Children(ctx, c.p.Job(jid).Dir())
	if err != nil {
		return fmt.Errorf("listing job %s: %w", jid, err)
	}
	if err := cl.hold.Finish(); err != nil {
		return err
	}
	ref := refPlace{folder: queue.BatchFolderOf(cl.from), known: true}
	for attempt := 0; ; attempt++ {
		txn := cl.hold.Txn(nil).ReleaseLock()
		if err := cl.guardBatch(txn); err != nil {
			return err
		}
		for _, n := range children {
			if n != queue.NodeLock {
				txn.Then(session.Delete(opRemove, c.p.Job(jid).Node(n), -1))
			}
		}
		txn.Then(session.Delete(opEntry, c.p.StateDir(cl.from)+"/"+cl.entry, -1))
		if cl.Job.Bid != "" && !cl.noBatch {
			txn.Then(c.refOps(cl.Job.Bid, jid, ref, queue.FolderDeleted)...)
		}
		txn.Then(session.Delete(opRemove, c.p.Job(jid).Dir(), -1))
		err := txn.Commit(ctx)
		if err == nil {
			return nil
		}
		if session.Retryable(err) {
			// The status goes with the job: still there as the claim owns
			// it, the deletion was not applied.
			_, stat, gerr := c.z.Get(ctx, c.p.Job(jid).Status())
			switch {
			case gerr != nil:
				return fmt.Errorf("job %s: deletion outcome unknown after %v: %w", jid, err, gerr)
			case stat.Version == cl.hold.Version() && attempt < 3:
				continue
			}
			cl.hold.Fenced(ctx)
			return fmt.Errorf("job %s: %w: connection lost during its deletion", jid, queue.ErrFenced)
		}
		ref, err = cl.refused(ctx, err, attempt)
		var nb *queue.NoBatchError
		switch {
		case errors.As(err, &nb) && !cl.noBatch:
			cl.noBatch = true // gone since it was read: nothing of it to move
			attempt = -1
		case errors.Is(err, zk.ErrNotEmpty):
			return fmt.Errorf("job %s changed while being deleted: %w", jid, queue.ErrLocked)
		case err != nil:
			return err
		}
	}
}
