package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// Names of a job commit's guards and operations, as a refusal
// (session.Refused) gives them. The data nodes a commit writes go under
// their own names (queue.NodeIdentifiers…), the object locks it releases
// under their paths.
const (
	// guardBatch: the job's batch exists, or is at the version an
	// operator's move read (RelyOnBatch). Gone: the job has no batch;
	// changed: someone is at the batch.
	guardBatch = "batch"
	// guardData: a data node read with the claim is as read.
	guardData = "data as read"
	opEntry   = "state entry"
	opRef     = "batch reference"
	opRemove  = "job node"
)

// Commit moves the job to ch.To and writes ch's data, releasing the lock, in
// one atomic operation guarded by the claim's fencing version.
func (cl *Claim) Commit(ctx context.Context, ch Change) error { return cl.commit(ctx, ch, false) }

// commit is Commit; with keep, the lock stays and the claim goes on holding
// the job in its new state (Consumer.TakeOver).
//
// A job whose batch does not exist (deleted under it, or never written by
// its writer) is moved with nothing of the batch touched when the change
// ends it (Failed, Deleted). Any other change is not made: a stage's step
// is failed instead, with a message saying why (the job would otherwise
// fail its every commit, for ever), and an operator's move is refused.
// Either way the answer is a NoBatchError.
func (cl *Claim) commit(ctx context.Context, ch Change, keep bool) error {
	err := cl.move(ctx, ch, keep)
	var nb *queue.NoBatchError
	if !errors.As(err, &nb) || cl.noBatch {
		return err
	}
	cl.noBatch = true
	switch {
	case ch.To == queue.Failed || ch.To == queue.Deleted:
		return cl.move(ctx, ch, keep)
	case cl.byOperator || !queue.CanMoveJob(cl.from, queue.Failed):
		return nb
	}
	fail := Change{To: queue.Failed, Unlock: ch.Unlock,
		Message: fmt.Sprintf("%s: the job cannot go on to %s", nb.Reason(), queue.JobStateName(ch.To))}
	if ch.Message != "" {
		fail.Message += " (its step said: " + ch.Message + ")"
	}
	if err := cl.move(ctx, fail, false); err != nil {
		return err
	}
	nb.Failed = true
	return nb
}

// move writes ch as one Txn fenced by the claim: the status with its
// history, ch's data, the state entry renamed, the batch reference moved,
// the object locks ch names released and, unless keep, the job's lock.
// A job whose batch is missing is a NoBatchError.
func (cl *Claim) move(ctx context.Context, ch Change, keep bool) error {
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
	// The batch reference moves when the job changes batch folder.
	moveRef := queue.BatchFolderOf(ch.To) != queue.BatchFolderOf(cl.from) && !cl.noBatch
	if moveRef {
		if _, err := cl.bid(ctx); errors.Is(err, queue.ErrCorrupt) {
			return &queue.NoBatchError{Job: cl.ID()}
		} else if err != nil {
			return err
		}
	}
	if err := cl.readRewritten(ctx, ch); err != nil {
		return err
	}
	statusData := queue.RewriteJobStatus(cl.statusData, next, cl.history.Entries(cl.statusData, old, next))
	locks := cl.ownLocks(ch.Unlock)
	entry, moveEntry := cl.entry, ch.To != cl.from || prio != cl.Job.Priority
	if moveEntry {
		entry = queue.EntryName(prio, cl.ID())
	}
	ref := refPlace{folder: queue.BatchFolderOf(cl.from), known: true}
	for attempt := 0; ; attempt++ {
		txn := cl.hold.Txn(statusData)
		if !keep {
			txn.ReleaseLock()
		}
		if err := cl.guardBatch(txn); err != nil {
			return err
		}
		data, guessed := cl.dataOps(ch)
		txn.Then(data...)
		if cl.priorityBad && ch.Priority == nil {
			txn.Then(session.Set(queue.NodePriority, cl.c.p.Job(cl.ID()).Node(queue.NodePriority), queue.EncodeInt(int64(prio)), -1))
		}
		if moveEntry {
			txn.Then(session.Delete(opEntry, cl.c.p.StateDir(cl.from)+"/"+cl.entry, -1),
				session.Create(opEntry, cl.c.p.Entry(ch.To, prio, cl.ID()), nil, 0))
		}
		if moveRef {
			txn.Then(cl.c.refOps(cl.Job.Bid, cl.ID(), ref, queue.BatchFolderOf(ch.To))...)
		}
		for _, l := range locks {
			txn.Then(session.Delete(l.path, l.path, -1))
		}
		err := txn.Commit(ctx)
		if err == nil {
			break
		}
		if i := goneLock(locks, err); i >= 0 {
			// An object lock gone already: nothing to release.
			locks[i].gone()
			locks = slices.Delete(locks, i, i+1)
			attempt--
			continue
		}
		if cl.learnFrom(ctx, ch, guessed, err) {
			attempt-- // a corrected guess; each can be corrected once
			continue
		}
		if ref, err = cl.refused(ctx, err, attempt); err != nil {
			return err
		}
	}
	for _, l := range locks {
		l.gone()
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
		return nil
	}
	cl.Job.Locked = false
	return nil
}

// goneLock is which of locks a commit's Txn was refused by (err) for it
// being gone already (-1: none).
func goneLock(locks []*ObjectLock, err error) int {
	return slices.IndexFunc(locks, func(l *ObjectLock) bool {
		r, ok := session.RefusedBy(err, l.path)
		return ok && r.Gone()
	})
}

// guardBatch adds to txn the guard on the job's batch: it must exist (or
// be as an operator's move read it), for a job must never go on without
// it. A job whose batch is known missing has none.
func (cl *Claim) guardBatch(txn *session.Txn) error {
	bid := cl.Job.GetBid()
	switch {
	case bid == "" || cl.noBatch:
		return nil
	case !queue.ValidBatchID(bid):
		return &queue.NoBatchError{Job: cl.ID(), Batch: bid}
	case cl.batchPinned:
		txn.If(session.IfVersion(guardBatch, cl.c.p.Batch(bid).Status(), cl.batchVersion))
	default:
		txn.If(session.IfExists(guardBatch, cl.c.p.Batch(bid).Status()))
	}
	return nil
}

// refused says what the refusal err of a claim's commit means, for what
// every commit may meet: the fence lost, the batch gone or changed, or a
// batch reference or folder not where the contract puts it (a peer writer
// or a crash left it so), which is looked for: where the reference is, to
// try again (up to attempt 2); else the error to return.
func (cl *Claim) refused(ctx context.Context, err error, attempt int) (refPlace, error) {
	var r *session.Refused
	switch {
	case !errors.As(err, &r) || r.Fence():
		return refPlace{}, err
	case r.Name == guardBatch && r.Gone():
		return refPlace{}, &queue.NoBatchError{Job: cl.ID(), Batch: cl.Job.GetBid()}
	case r.Name == guardBatch:
		return refPlace{}, fmt.Errorf("job %s: its batch %s changed while the job was being moved (an operator or the batcher is at it): %w",
			cl.ID(), cl.Job.GetBid(), queue.ErrLocked)
	case attempt >= 2 || !(r.Gone() || r.Exists()):
		return refPlace{}, fmt.Errorf("committing job %s: %w", cl.ID(), err)
	}
	return cl.c.locateRef(ctx, cl.Job.Bid, cl.ID())
}

// refPlace is where a job's batch reference was found: its folder, or ""
// when it has none; known=false means "assume the folder its state implies".
type refPlace struct {
	folder string
	known  bool
}

// refOps move a job's batch reference to the folder `to`, touching the
// batch-processing folder whenever a job leaves or enters it so that a
// batcher watching that node (a data watch: O(1), whatever the batch size)
// learns that the batch may be done.
func (c *Client) refOps(bid, jid string, ref refPlace, to string) []session.Op {
	from := ref.folder
	if from == to && ref.known {
		return nil
	}
	var ops []session.Op
	if ref.known && from != "" {
		ops = append(ops, session.Delete(opRef, c.p.Batch(bid).Ref(from, jid), -1))
	}
	ops = append(ops, session.Create(opRef, c.p.Batch(bid).Ref(to, jid), nil, 0))
	if from == queue.FolderProcessing || to == queue.FolderProcessing || !ref.known {
		ops = append(ops, session.Set(opRef, c.p.Batch(bid).Folder(queue.FolderProcessing), nil, -1))
	}
	return ops
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
// created, each operation named by its node. Whether a node the claim did
// not read exists is not looked up (a request per node, on every step):
// it is guessed, and guessed names the nodes written on a guess. A wrong
// guess gets the Txn refused by that node; learnFrom corrects it for the
// next try.
func (cl *Claim) dataOps(ch Change) (ops []session.Op, guessed map[string]bool) {
	put := func(name string, data []byte) {
		p := cl.c.p.Job(cl.ID()).Node(name)
		data = queue.RewriteData(name, cl.raw[name], data)
		present := cl.present[name]
		if !cl.known(name) {
			present = likelyPresent(name)
			if guessed == nil {
				guessed = map[string]bool{}
			}
			guessed[name] = true
		}
		if present {
			ops = append(ops, session.Set(name, p, data, -1))
		} else {
			ops = append(ops, session.Create(name, p, data, 0))
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

// learnFrom corrects a wrong guess of dataOps that got a Txn refused (err).
// It reports whether it learned something (and trying again is worth it).
// A node found to exist is read, for the keys its rewrite carries forward.
func (cl *Claim) learnFrom(ctx context.Context, ch Change, guessed map[string]bool, err error) bool {
	var r *session.Refused
	switch {
	case !errors.As(err, &r) || r.Guard || !guessed[r.Name]:
		return false
	case r.Gone():
		cl.learn(r.Name, false)
	case r.Exists():
		cl.learn(r.Name, true)
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
