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
	"google.golang.org/protobuf/proto"
)

// Change is what a stage's step did to a job. To is the next state; the data
// fields, when set, are written in the same atomic operation.
type Change struct {
	To          queue.JobState
	Message     string
	Priority    *int32 // re-prioritise: the state entry is renamed in the same operation
	SpaceNeeded *int64
	Identifiers *v1.Identifiers
	Metadata    *v1.Metadata
	Store       *v1.Store
	Inventory   *v1.Inventory
	Manifest    *v1.Manifest
	// Unlock are object locks this session holds that the commit releases,
	// in the same atomic operation: the object stays locked until the job
	// has moved on, and its release costs no request of its own. A lock
	// found gone already does not stop the commit.
	Unlock []*ObjectLock
	// By names who makes the change in the job's history (a stage
	// replica's worker id); empty: the client's Worker, or "operator" for
	// an operator's move.
	By string
}

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

// move writes ch as one Txn fenced by the claim (moveTxn): the status
// with its history, ch's data, the state entry renamed, the batch
// reference moved, the object locks ch names released and, unless keep,
// the job's lock. A job whose batch is missing is a NoBatchError. A Txn
// refused for what a retry mends is built and sent again: an object lock
// gone already, a data node guessed wrong (dataOps), a batch reference
// not where the contract puts it (refused).
func (cl *Claim) move(ctx context.Context, ch Change, keep bool) error {
	m, err := cl.planMove(ctx, ch, keep)
	if err != nil {
		return err
	}
	ref := refPlace{folder: queue.BatchFolderOf(cl.from), known: true}
	for attempt := 0; ; attempt++ {
		txn, guessed, err := cl.moveTxn(m, ref)
		if err != nil {
			return err
		}
		err = txn.Commit(ctx)
		if err == nil {
			break
		}
		if i := goneLock(m.locks, err); i >= 0 {
			// An object lock gone already: nothing to release.
			m.locks[i].gone()
			m.locks = slices.Delete(m.locks, i, i+1)
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
	cl.moved(m)
	return nil
}

// jobMove is a claimed job's move as planned (planMove): what its Txn
// writes, however often it is built.
type jobMove struct {
	ch   Change
	keep bool
	// next is the status written (statusData, its bytes); added the
	// change its history records (nil: none).
	next       *v1.JobStatus
	added      *v1.JobStateChange
	statusData []byte
	prio       int32
	// entry is the job's state entry after the move; moveEntry, whether
	// it is renamed, moveRef whether the batch reference moves.
	entry              string
	moveEntry, moveRef bool
	locks              []*ObjectLock // object locks the move releases
}

// planMove checks ch and plans the move: the next status and its history
// by queue's rules, the entry and reference to move, what to read first
// (the bid of a job whose claim did not read it, the nodes ch rewrites).
func (cl *Claim) planMove(ctx context.Context, ch Change, keep bool) (*jobMove, error) {
	if err := queue.CheckJobMove(cl.ID(), cl.from, ch.To); err != nil {
		return nil, err
	}
	if err := queue.ValidPriority(ch.Priority); err != nil {
		return nil, err
	}
	if err := cl.hold.Check(); err != nil {
		return nil, err
	}
	old := cl.Job.GetStatus()
	m := &jobMove{ch: ch, keep: keep, prio: cl.Job.Priority, entry: cl.entry, locks: cl.ownLocks(ch.Unlock)}
	m.next = &v1.JobStatus{
		Status:               ch.To,
		LastModified:         queue.NowStamp(),
		Message:              ch.Message,
		LastSuccessfulStatus: queue.NextLastSuccessful(cl.from, old.GetLastSuccessfulStatus(), ch.To),
		RetryCount:           old.GetRetryCount(),
		Traceparent:          old.GetTraceparent(),
	}
	if cl.from == queue.Failed && ch.To != queue.Deleted {
		m.next.RetryCount++ // only an admin resume leaves Failed
	}
	by := ch.By
	switch {
	case by != "":
	case cl.byOperator:
		by = queue.WorkerOperator
	default:
		by = cl.c.s.Worker()
	}
	m.added = queue.RecordChange(old, m.next, by, time.Now())
	m.statusData = queue.RewriteJobStatus(cl.statusData, m.next, cl.history.Entries(cl.statusData, old, m.next))
	if ch.Priority != nil {
		m.prio = *ch.Priority
	}
	if m.moveEntry = ch.To != cl.from || m.prio != cl.Job.Priority; m.moveEntry {
		m.entry = queue.EntryName(m.prio, cl.ID())
	}
	if cl.bidUnread && !cl.noBatch {
		// Its commits check the batch the bid node names. A job without
		// a readable one goes on unchecked until it changes batch folder.
		if _, err := cl.bid(ctx); err != nil && !errors.Is(err, queue.ErrCorrupt) {
			return nil, err
		}
	}
	// The batch reference moves when the job changes batch folder.
	if m.moveRef = queue.BatchFolderOf(ch.To) != queue.BatchFolderOf(cl.from) && !cl.noBatch; m.moveRef {
		if _, err := cl.bid(ctx); errors.Is(err, queue.ErrCorrupt) {
			return nil, &queue.NoBatchError{Job: cl.ID()}
		} else if err != nil {
			return nil, err
		}
	}
	if err := cl.readRewritten(ctx, ch); err != nil {
		return nil, err
	}
	return m, nil
}

// moveTxn builds m's Txn, fenced by the claim, for a batch reference found
// at ref; guessed names the data nodes written on a guess (dataOps).
func (cl *Claim) moveTxn(m *jobMove, ref refPlace) (txn *session.Txn, guessed map[string]bool, err error) {
	txn = cl.hold.Txn(m.statusData)
	if !m.keep {
		txn.ReleaseLock()
	}
	if err := cl.guardBatch(txn); err != nil {
		return nil, nil, err
	}
	data, guessed := cl.dataOps(m.ch)
	txn.Then(data...)
	if cl.priorityBad && m.ch.Priority == nil {
		txn.Then(session.Set(queue.NodePriority, cl.c.p.Job(cl.ID()).Node(queue.NodePriority), queue.EncodeInt(int64(m.prio)), -1))
	}
	if m.moveEntry {
		txn.Then(session.Delete(opEntry, cl.c.p.StateDir(cl.from)+"/"+cl.entry, -1),
			session.Create(opEntry, cl.c.p.Entry(m.ch.To, m.prio, cl.ID()), nil, 0))
	}
	if m.moveRef {
		txn.Then(cl.c.refOps(cl.Job.Bid, cl.ID(), ref, queue.BatchFolderOf(m.ch.To))...)
	}
	for _, l := range m.locks {
		txn.Then(session.Delete(l.path, l.path, -1))
	}
	return txn, guessed, nil
}

// moved records in the claim what m wrote.
func (cl *Claim) moved(m *jobMove) {
	for _, l := range m.locks {
		l.gone()
	}
	cl.priorityBad = false
	cl.applyData(m.ch)
	cl.Job.Status = m.next
	cl.statusData = m.statusData
	cl.history = queue.KeptHistory{}
	if m.added != nil {
		cl.c.s.Changed(queue.NewStateChange(cl.ID(), m.next, m.added))
	}
	cl.Job.Priority = m.prio
	if m.keep {
		cl.from, cl.entry = m.ch.To, m.entry
		return
	}
	cl.Job.Locked = false
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

// goneLock is which of locks a commit's Txn was refused by (err) for it
// being gone already (-1: none).
func goneLock(locks []*ObjectLock, err error) int {
	return slices.IndexFunc(locks, func(l *ObjectLock) bool {
		r, ok := session.RefusedBy(err, l.path)
		return ok && r.Gone()
	})
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

func (cl *Claim) known(name string) bool {
	return cl.loaded[name] || cl.present[name] || cl.absent[name]
}

func (cl *Claim) learn(name string, present bool) {
	cl.present[name] = present
	cl.absent[name] = !present
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

// applyData records in memory what dataOps wrote.
func (cl *Claim) applyData(ch Change) {
	j := cl.Job
	if ch.Priority != nil {
		j.Priority = *ch.Priority
		cl.present[queue.NodePriority] = true
	}
	if ch.SpaceNeeded != nil {
		j.SpaceNeeded = *ch.SpaceNeeded
		cl.present[queue.NodeSpaceNeeded] = true
	}
	if ch.Identifiers != nil {
		j.Identifiers = ch.Identifiers
		cl.present[queue.NodeIdentifiers] = true
	}
	if ch.Metadata != nil {
		j.Metadata = ch.Metadata
		cl.present[queue.NodeMetadata] = true
	}
	if ch.Store != nil {
		j.Store = ch.Store
		cl.present[queue.NodeStore] = true
	}
	if ch.Inventory != nil {
		j.Inventory = ch.Inventory
		cl.present[queue.NodeInventory] = true
	}
	if ch.Manifest != nil {
		j.Manifest = ch.Manifest
		cl.present[queue.NodeManifest] = true
		cl.loaded[queue.NodeManifest] = true
		cl.manifestErr = nil
	}
}

// ownLocks are the object locks among locks that this claim's session
// holds and has not released: a commit releases them with a delete each,
// as the claim's fence (its job lock, also this session's) proves the
// session alive, and with it each lock still its own. Locks of another
// session are left to their own Unlock.
func (cl *Claim) ownLocks(locks []*ObjectLock) []*ObjectLock {
	var own []*ObjectLock
	for _, l := range locks {
		if l != nil && l.sess == cl.hold.Live().ID && !l.released.Load() {
			own = append(own, l)
		}
	}
	return own
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

// Update writes data fields while keeping the job and its lock (for example
// an ARK the processor must record at once). ch.To is ignored; a new
// ch.Priority renames the state entry.
func (cl *Claim) Update(ctx context.Context, ch Change) error {
	if err := queue.ValidPriority(ch.Priority); err != nil {
		return err
	}
	if err := cl.hold.Check(); err != nil {
		return err
	}
	if err := cl.readRewritten(ctx, ch); err != nil {
		return err
	}
	newEntry := cl.entry
	for {
		data, guessed := cl.dataOps(ch)
		txn := cl.hold.Txn(nil).Then(data...)
		if ch.Priority != nil && *ch.Priority != cl.Job.Priority {
			newEntry = queue.EntryName(*ch.Priority, cl.ID())
			txn.Then(session.Delete(opEntry, cl.c.p.StateDir(cl.from)+"/"+cl.entry, -1),
				session.Create(opEntry, cl.c.p.StateDir(cl.from)+"/"+newEntry, nil, 0))
		}
		if txn.Len() == 0 {
			return nil
		}
		err := txn.Commit(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, queue.ErrFenced) {
			return err
		}
		if !cl.learnFrom(ctx, ch, guessed, err) {
			return fmt.Errorf("updating job %s: %w", cl.ID(), err)
		}
	}
	if ch.Priority != nil {
		cl.priorityBad = false
	}
	cl.applyData(ch)
	cl.entry = newEntry
	return nil
}

// MintFromCounter gives the claimed job a primary id made from the next
// number of a counter and records it in the job's identifiers (fenced by the
// claim) before it returns: a step that restarts finds the id already there,
// and a number is never used twice. It returns the id (the existing one if
// the job has a primary id already).
//
// Numbers are reserved from the counter in blocks (counterBlock), so that
// concurrent jobs do not race for the counter node: a job costs one write,
// its identifiers. Numbers reserved by a client that stops are never used.
func (cl *Claim) MintFromCounter(ctx context.Context, counter string, makeID func(n int64) string) (string, error) {
	if err := queue.ValidName("counter", counter); err != nil {
		return "", err
	}
	if id := cl.Job.GetIdentifiers().GetPrimaryId(); id != "" {
		return id, nil
	}
	if err := cl.hold.Check(); err != nil {
		return "", err
	}
	c := cl.c
	n, err := c.nextNumber(ctx, counter)
	if err != nil {
		return "", err
	}
	id := makeID(n)
	ids := &v1.Identifiers{}
	if cl.Job.GetIdentifiers() != nil {
		ids = proto.Clone(cl.Job.GetIdentifiers()).(*v1.Identifiers)
	}
	ids.PrimaryId = id
	idsPath := c.p.Job(cl.ID()).Node(queue.NodeIdentifiers)
	// The number is this job's alone: after a lost answer the same id is
	// written again, never a second number.
	for attempt := 0; ; attempt++ {
		err := cl.Update(ctx, Change{Identifiers: ids})
		switch {
		case err == nil:
			return id, nil
		case session.Retryable(err) && attempt < 3:
			data, _, gerr := c.z.Get(ctx, idsPath)
			if gerr != nil && !errors.Is(gerr, zk.ErrNoNode) {
				return "", fmt.Errorf("minting for job %s: after %v: %w", cl.ID(), err, gerr)
			}
			if gerr == nil {
				if got, derr := queue.DecodeIdentifiers(idsPath, data); derr == nil && got.GetPrimaryId() == id {
					cl.applyData(Change{Identifiers: ids})
					return id, nil
				}
			}
		default:
			return "", fmt.Errorf("minting %s for job %s: %w", id, cl.ID(), err)
		}
	}
}

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
	if err := cl.hold.Check(); err != nil {
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
		// An answer lost with the connection, the Txn reads the status,
		// which goes with the job, to learn whether it was applied.
		err := txn.Commit(ctx)
		if err == nil {
			return nil
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
