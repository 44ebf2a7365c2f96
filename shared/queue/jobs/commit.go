package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Commit moves the job to ch.To and writes ch's data, releasing the lock, in
// one atomic operation guarded by the claim's fencing version.
func (cl *Claim) Commit(ctx context.Context, ch Change) error { return cl.commit(ctx, ch, false) }

// commit is Commit; with keep, the lock stays and the claim goes on holding
// the job in its new state (Consumer.TakeOver).
func (cl *Claim) commit(ctx context.Context, ch Change, keep bool) error {
	if err := queue.CheckJobMove(cl.ID(), cl.from, ch.To); err != nil {
		return err
	}
	if err := queue.ValidPriority(ch.Priority); err != nil {
		return err
	}
	if err := cl.hold.Finish(); err != nil {
		return err
	}
	old := cl.Job.GetStatus()
	next := &v1.JobStatus{
		Status:               ch.To,
		LastModified:         queue.NowStamp(),
		Message:              ch.Message,
		LastSuccessfulStatus: queue.NextLastSuccessful(cl.from, old.GetLastSuccessfulStatus(), ch.To),
		RetryCount:           old.GetRetryCount(),
		Traceparent:          old.GetTraceparent(),
	}
	if cl.from == queue.Failed && ch.To != queue.Deleted {
		next.RetryCount++ // only an admin resume leaves Failed
	}
	by := ch.By
	switch {
	case by != "":
	case cl.byOperator:
		by = queue.WorkerOperator
	default:
		by = cl.c.s.Worker()
	}
	added := queue.RecordChange(old, next, by, time.Now())
	prio := cl.Job.Priority
	if ch.Priority != nil {
		prio = *ch.Priority
	}
	if cl.bidUnread && !cl.noBatch {
		// Its commits check the batch the bid node names. A job without
		// a readable one goes on unchecked until it changes batch folder.
		if _, err := cl.bid(ctx); err != nil && !errors.Is(err, queue.ErrCorrupt) {
			return err
		}
	}
	bid := ""
	if queue.BatchFolderOf(ch.To) != queue.BatchFolderOf(cl.from) && !cl.noBatch {
		var err error
		if bid, err = cl.bid(ctx); errors.Is(err, queue.ErrCorrupt) {
			return cl.commitWithoutBatch(ctx, ch, keep, "")
		} else if err != nil {
			return err
		}
	}
	if err := cl.readRewritten(ctx, ch); err != nil {
		return err
	}
	statusData := queue.RewriteJobStatus(cl.statusData, next, cl.history.Entries(cl.statusData, old, next))
	statusOp := session.SetOp(cl.c.p.Job(cl.ID()).Status(), statusData, cl.hold.Version())
	var guessed map[int]string
	locks := cl.ownLocks(ch.Unlock)
	unlocks, unlockAt := unlockOps(locks), 0
	entry := cl.entry
	err := cl.commitOps(ctx, statusOp, keep, func(ref refPlace) []any {
		var ops []any
		ops, guessed = cl.dataOps(ch)
		if cl.priorityBad && ch.Priority == nil {
			ops = append(ops, session.SetOp(cl.c.p.Job(cl.ID()).Node(queue.NodePriority), queue.EncodeInt(int64(prio)), -1))
		}
		if ch.To != cl.from || prio != cl.Job.Priority {
			entry = queue.EntryName(prio, cl.ID())
			ops = append(ops,
				session.DeleteOp(cl.c.p.StateDir(cl.from)+"/"+cl.entry, -1),
				cl.c.z.CreateOp(cl.c.p.Entry(ch.To, prio, cl.ID()), nil, 0))
		}
		if bid != "" {
			ops = append(ops, cl.c.refOps(bid, cl.ID(), ref, queue.BatchFolderOf(ch.To))...)
		}
		unlockAt = len(ops)
		return append(ops, unlocks...)
	}, nil, func(data []byte) bool {
		st, err := queue.DecodeJobStatus("", data)
		return err == nil && st.GetStatus() == ch.To && st.GetMessage() == ch.Message
	}, func(i int, err error) bool {
		if len(unlocks) > 0 && i >= unlockAt && i < unlockAt+len(unlocks) && errors.Is(err, zk.ErrNoNode) {
			unlocks = nil // a lock gone already: nothing to release
			return true
		}
		return cl.learnFrom(ctx, ch, guessed, i, err)
	})
	var nb *queue.NoBatchError
	if errors.As(err, &nb) && !cl.noBatch {
		return cl.commitWithoutBatch(ctx, ch, keep, nb.Batch)
	}
	if err != nil {
		return err
	}
	for _, l := range locks {
		l.released.Store(true)
		cl.c.s.Locks().Forget(l.own)
	}
	cl.priorityBad = false
	cl.applyData(ch)
	cl.Job.Status = next
	cl.statusData = statusData
	cl.history = queue.KeptHistory{}
	if added != nil {
		cl.c.s.Changed(queue.NewStateChange(cl.ID(), next, added))
	}
	cl.Job.Priority = prio
	if keep {
		cl.from, cl.entry = ch.To, entry
		cl.hold.Moved()
		return nil
	}
	cl.Job.Locked = false
	cl.hold.Settle()
	return nil
}

// commitWithoutBatch is commit for a job whose batch does not exist (bid,
// or none when the job names none): nothing of the batch is touched. A
// change that ends the job (Failed, Deleted) is made as asked. Any other
// is not: a stage's step is failed instead, with a message saying why (the
// job would otherwise fail its every commit, for ever), and an operator's
// move is refused. Either way the answer is a NoBatchError.
func (cl *Claim) commitWithoutBatch(ctx context.Context, ch Change, keep bool, bid string) error {
	cl.noBatch = true
	nb := &queue.NoBatchError{Job: cl.ID(), Batch: bid}
	if ch.To == queue.Failed || ch.To == queue.Deleted {
		return cl.commit(ctx, ch, keep)
	}
	if cl.byOperator || !queue.CanMoveJob(cl.from, queue.Failed) {
		return nb
	}
	fail := Change{To: queue.Failed, Unlock: ch.Unlock,
		Message: fmt.Sprintf("%s: the job cannot go on to %s", nb.Reason(), queue.JobStateName(ch.To))}
	if ch.Message != "" {
		fail.Message += " (its step said: " + ch.Message + ")"
	}
	if err := cl.commit(ctx, fail, false); err != nil {
		return err
	}
	nb.Failed = true
	return nb
}

// refPlace is where a job's batch reference was found: its folder, or ""
// when it has none; known=false means "assume the folder its state implies".
type refPlace struct {
	folder string
	known  bool
}

// refOps moves a job's batch reference to the folder `to`, touching the
// batch-processing folder whenever a job leaves or enters it so that a
// batcher watching that node (a data watch: O(1), whatever the batch size)
// learns that the batch may be done.
func (c *Client) refOps(bid, jid string, ref refPlace, to string) []any {
	from := ref.folder
	if from == to && ref.known {
		return nil
	}
	var ops []any
	if ref.known && from != "" {
		ops = append(ops, session.DeleteOp(c.p.Batch(bid).Ref(from, jid), -1))
	}
	ops = append(ops, c.z.CreateOp(c.p.Batch(bid).Ref(to, jid), nil, 0))
	if from == queue.FolderProcessing || to == queue.FolderProcessing || !ref.known {
		ops = append(ops, session.SetOp(c.p.Batch(bid).Folder(queue.FolderProcessing), nil, -1))
	}
	return ops
}

// commitOps runs one multi: the fenced status operation, the operations
// built by build, the deletion of the lock (which fails if the lock is gone:
// a second fence; with keepLock a check that it is there), then tail. Beside fencing it copes with two things a peer writer
// or a crash can leave: a batch reference in an unexpected folder (it is
// found and moved), and a lost connection that hides whether the multi was
// applied (the status node tells: applied(data) says whether it holds what
// the multi wrote).
//
// learn, if not nil, is told of an operation that failed for a reason other
// than fencing (its index among build's); when it returns true the multi is
// built and tried again. A batch that does not exist is a NoBatchError.
func (cl *Claim) commitOps(ctx context.Context, statusOp any, keepLock bool, build func(refPlace) []any, tail []any, applied func([]byte) bool, learn func(idx int, err error) bool) error {
	ref := refPlace{folder: queue.BatchFolderOf(cl.from), known: true}
	lockOp := any(session.DeleteOp(cl.c.p.Job(cl.ID()).Lock(), -1))
	if keepLock {
		lockOp = session.CheckOp(cl.c.p.Job(cl.ID()).Lock(), -1)
	}
	// The batch the job belongs to must exist (or be as an admin move read
	// it): a job must never go on without it.
	var guard []any
	bid := cl.Job.GetBid()
	if bid != "" && !cl.noBatch {
		if !queue.ValidBatchID(bid) {
			return &queue.NoBatchError{Job: cl.ID(), Batch: bid}
		}
		v := int32(-1)
		if cl.batchPinned {
			v = cl.batchVersion
		}
		guard = append(guard, session.CheckOp(cl.c.p.Batch(bid).Status(), v))
	}
	for attempt := 0; ; attempt++ {
		ops := append([]any{statusOp}, guard...)
		first := len(ops)
		ops = append(ops, build(ref)...)
		lockIdx := len(ops)
		ops = append(append(ops, lockOp), tail...)
		_, err := cl.c.z.Multi(ctx, ops...)
		if err == nil {
			return nil
		}
		if session.Retryable(err) {
			data, stat, gerr := cl.c.z.Get(ctx, cl.c.p.Job(cl.ID()).Status())
			switch {
			case gerr != nil:
				return fmt.Errorf("job %s: commit outcome unknown after %v: %w", cl.ID(), err, gerr)
			case stat.Version == cl.hold.Version()+1 && applied(data):
				return nil
			case stat.Version == cl.hold.Version() && attempt < 3:
				continue
			}
			cl.hold.Fenced(ctx)
			return fmt.Errorf("job %s: %w: connection lost during commit", cl.ID(), queue.ErrFenced)
		}
		idx := session.FailedOp(err)
		if idx == 0 || idx == lockIdx {
			// The status moved on, or our lock is gone.
			fenced := fmt.Errorf("job %s: %w (%v)", cl.ID(), queue.ErrFenced, err)
			if idx == lockIdx {
				cl.hold.Lost(fenced)
				cl.hold.End()
			} else {
				cl.hold.Fenced(ctx)
			}
			return fenced
		}
		if len(guard) > 0 && idx == 1 {
			if errors.Is(err, zk.ErrNoNode) {
				return &queue.NoBatchError{Job: cl.ID(), Batch: bid}
			}
			return fmt.Errorf("job %s: its batch %s changed while the job was being moved (an operator or the batcher is at it): %w",
				cl.ID(), bid, queue.ErrLocked)
		}
		if learn != nil && learn(idx-first, err) {
			attempt-- // a corrected guess; each can be corrected once
			continue
		}
		if attempt >= 2 || !(errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNodeExists)) {
			return fmt.Errorf("committing job %s: %w", cl.ID(), err)
		}
		// A reference or folder is not where the contract puts it.
		if ref, err = cl.c.locateRef(ctx, cl.Job.Bid, cl.ID()); err != nil {
			return err
		}
	}
}

// locateRef finds which batch folder references jid, creating the folders
// if a peer created the batch without them.
func (c *Client) locateRef(ctx context.Context, bid, jid string) (refPlace, error) {
	if bid == "" {
		return refPlace{}, fmt.Errorf("job %s: %w: no bid", jid, queue.ErrCorrupt)
	}
	if err := c.z.Ensure(ctx, c.p.Batch(bid).States()); err != nil {
		return refPlace{}, err
	}
	found := refPlace{known: true}
	for _, f := range queue.BatchRefFolders() {
		if err := c.z.Ensure(ctx, c.p.Batch(bid).Folder(f)); err != nil {
			return refPlace{}, err
		}
		ok, _, err := c.z.Exists(ctx, c.p.Batch(bid).Ref(f, jid))
		if err != nil {
			return refPlace{}, err
		}
		if ok && found.folder == "" {
			found.folder = f
		}
	}
	return found, nil
}

// likelyPresent reports whether name is a data node every job gets when
// it is created (ours and the peer library's alike); the others appear as
// stages write them.
func likelyPresent(name string) bool {
	switch name {
	case queue.NodeBid, queue.NodePriority, queue.NodeSpaceNeeded, queue.NodeConfig:
		return true
	}
	return false
}

// dataOps writes the data fields of ch: existing nodes are set, new ones
// created. Whether a node the claim did not read exists is not looked up
// (a request per node, on every step): it is guessed, and guessed names
// the operations built on a guess, by their index in ops. A wrong guess
// fails the multi on that operation; learnFrom corrects it for the next
// try.
func (cl *Claim) dataOps(ch Change) (ops []any, guessed map[int]string) {
	put := func(name string, data []byte) {
		p := cl.c.p.Job(cl.ID()).Node(name)
		data = queue.RewriteData(name, cl.raw[name], data)
		present := cl.present[name]
		if !cl.known(name) {
			present = likelyPresent(name)
			if guessed == nil {
				guessed = map[int]string{}
			}
			guessed[len(ops)] = name
		}
		if present {
			ops = append(ops, session.SetOp(p, data, -1))
		} else {
			ops = append(ops, cl.c.z.CreateOp(p, data, 0))
		}
	}
	if ch.Priority != nil && (*ch.Priority != cl.Job.Priority || cl.priorityBad) {
		put(queue.NodePriority, queue.EncodeInt(int64(*ch.Priority)))
	}
	if ch.SpaceNeeded != nil {
		put(queue.NodeSpaceNeeded, queue.EncodeInt(*ch.SpaceNeeded))
	}
	if ch.Identifiers != nil {
		put(queue.NodeIdentifiers, queue.EncodeIdentifiers(ch.Identifiers))
	}
	if ch.Metadata != nil {
		put(queue.NodeMetadata, queue.EncodeMetadata(ch.Metadata))
	}
	if ch.Store != nil {
		put(queue.NodeStore, queue.EncodeStore(ch.Store))
	}
	if ch.Inventory != nil {
		put(queue.NodeInventory, queue.EncodeInventory(ch.Inventory))
	}
	if ch.Manifest != nil {
		put(queue.NodeManifest, queue.EncodeManifest(ch.Manifest))
	}
	return ops, guessed
}

// learnFrom corrects a wrong guess of dataOps: err failed the operation at
// index i of the data operations. It reports whether it learned something
// (and trying again is worth it). A node found to exist is read, for the
// keys its rewrite carries forward.
func (cl *Claim) learnFrom(ctx context.Context, ch Change, guessed map[int]string, i int, err error) bool {
	name, ok := guessed[i]
	switch {
	case !ok:
		return false
	case errors.Is(err, zk.ErrNoNode):
		cl.learn(name, false)
	case errors.Is(err, zk.ErrNodeExists):
		cl.learn(name, true)
	default:
		return false
	}
	return cl.readRewritten(ctx, ch) == nil
}

// readRewritten reads the nodes ch rewrites that the claim knows exist but
// has not read: a rewrite keeps the keys other writers put in them.
func (cl *Claim) readRewritten(ctx context.Context, ch Change) error {
	for name, set := range map[string]bool{queue.NodeIdentifiers: ch.Identifiers != nil, queue.NodeMetadata: ch.Metadata != nil,
		queue.NodeStore: ch.Store != nil, queue.NodeInventory: ch.Inventory != nil} {
		if !set || !cl.present[name] || cl.raw[name] != nil {
			continue
		}
		data, _, err := cl.c.z.Get(ctx, cl.c.p.Job(cl.ID()).Node(name))
		if errors.Is(err, zk.ErrNoNode) {
			cl.learn(name, false)
			continue
		}
		if err != nil {
			return fmt.Errorf("reading job %s %s: %w", cl.ID(), name, err)
		}
		cl.raw[name] = data
	}
	return nil
}
