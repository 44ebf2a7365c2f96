package batches

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// BatchClaim is a batch this client holds the lock of; like a job Claim,
// every change through it is fenced by the status version it owns.
type BatchClaim struct {
	c     *Client
	Batch *v1.Batch
	// Spawning is true while the batch's jobs are still being created (a
	// batcher died half-way if it is set when the batch is claimed).
	Spawning bool
	// StraysRemoved are the job ids reserved for the batch and never
	// written (a spawn cut short between the two) that this claim removed
	// when it ended the batch's spawning.
	StraysRemoved []string
	// Payload is the record of the reading its jobs are made from (nil: the
	// payload is not a fetched document, or the batch was taken without
	// one).
	Payload *queue.PayloadRecord
	// LoadErr is set when the batch's submission is unreadable (not JSON,
	// or a word in it ingestq does not know); Batch.Submission then holds
	// what could be read. The batch can still be failed and reported
	// through the claim.
	LoadErr error
	// Merritt is what a submission written by Merritt's ingest service
	// says beyond Batch.Submission (nil for other submissions).
	Merritt *queue.MerrittSubmission

	hold *session.Hold // the batch's lock and the status version it owns
	from queue.BatchState
	// statusData and reportData are the status and status-report as
	// read: a rewrite carries forward the keys other writers put there.
	statusData, reportData []byte
	// liveGuard checks that no job entered or left the batch's
	// batch-processing folder since LiveJobs read it (nil: not read, or
	// the batch has no such folder).
	liveGuard *session.Guard
	// spawnFrom is the child version /jobs had when the batch's spawning
	// began (-1: not recorded): every job id reserved for the batch is
	// numbered from there.
	spawnFrom int32
	// strays says that job ids reserved for the batch may be left
	// unwritten: the batch was claimed half spawned, or a creation of its
	// jobs failed. The end of its spawning looks for them (removeStrays).
	strays bool
}

// ID is the claimed batch's bid.
func (bc *BatchClaim) ID() string { return bc.Batch.GetId() }

// State is the batch's state as claimed (or as last committed with KeepLock).
func (bc *BatchClaim) State() queue.BatchState { return bc.from }

// Context ends when the claim's session is lost or the claim ends.
func (bc *BatchClaim) Context() context.Context { return bc.hold.Context() }

// ClaimBatch takes a batch's lock. ErrLocked: another consumer has it.
// Given states, it takes the lock only of a batch in one of them, and
// otherwise answers ErrWrongState without touching it: a batch that moved
// on is not locked, even briefly, by a consumer with nothing to do on it.
func (c *Client) ClaimBatch(ctx context.Context, bid string, states ...queue.BatchState) (*BatchClaim, error) {
	if !queue.ValidBatchID(bid) {
		return nil, fmt.Errorf("%w: %q is not a batch id (bidNNNNNNNNNN)", queue.ErrInvalid, bid)
	}
	statusPath := c.p.Batch(bid).Status()
	data, stat, err := c.z.Get(ctx, statusPath)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("batch %s: %w", bid, queue.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", statusPath, err)
	}
	st, err := queue.DecodeBatchStatus(statusPath, data)
	if err != nil {
		return nil, err
	}
	if len(states) > 0 && !slices.Contains(states, st.GetStatus()) {
		return nil, fmt.Errorf("batch %s is %s: %w", bid, queue.BatchStateName(st.GetStatus()), queue.ErrWrongState)
	}
	hold, err := c.s.Locks().Take(ctx, "batch "+bid, c.p.Batch(bid).Lock(), statusPath, data, stat.Version)
	var refused *session.Refused
	switch {
	case err == nil:
	case !errors.As(err, &refused):
		return nil, fmt.Errorf("locking batch %s: %w", bid, err)
	case refused.Name == session.LockStep && refused.Exists():
		return nil, fmt.Errorf("batch %s (%s): %w", bid, queue.BatchStateName(st.GetStatus()), queue.ErrLocked)
	case refused.Name == session.StatusStep && refused.Changed():
		return nil, fmt.Errorf("batch %s changed while being claimed: %w", bid, queue.ErrLocked)
	case refused.Gone():
		// Its status or its node is gone: the batch with them.
		return nil, fmt.Errorf("batch %s: %w", bid, queue.ErrNotFound)
	default:
		return nil, fmt.Errorf("locking batch %s: %w", bid, err)
	}
	bc := &BatchClaim{c: c, hold: hold, from: st.GetStatus(), statusData: data}
	release := func(err error) (*BatchClaim, error) {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	ps := []string{c.p.Batch(bid).Node(queue.NodeSubmission), c.p.Batch(bid).Node(queue.NodeStatusReport), c.p.Batch(bid).Node(queue.NodePayload),
		c.p.Batch(bid).Node(queue.NodeSpawning)}
	read, err := c.z.Read(ctx, ps)
	if err != nil {
		return release(err)
	}
	datas := session.Datas(read)
	bc.Spawning, bc.spawnFrom = read[3].Stat != nil, -1
	if bc.Spawning {
		// An earlier holder may have reserved job ids it never wrote.
		bc.strays = true
		if n, err := queue.DecodeInt(ps[3], datas[3]); err == nil && n >= 0 && n <= math.MaxInt32 {
			bc.spawnFrom = int32(n)
		}
	}
	bc.Batch = &v1.Batch{Id: bid, Status: st, Locked: true}
	if datas[0] != nil {
		bc.Batch.Submission, bc.LoadErr = queue.DecodeSubmission(ps[0], datas[0])
		bc.Merritt = queue.DecodeMerrittSubmission(ps[0], datas[0])
	}
	bc.reportData = datas[1]
	if datas[1] != nil {
		if bc.Batch.StatusReport, err = queue.DecodeStatusReport(ps[1], datas[1]); err != nil {
			return release(err)
		}
	}
	if datas[2] != nil {
		if bc.Payload, err = queue.DecodePayloadRecord(ps[2], datas[2]); err != nil {
			return release(err)
		}
	}
	return bc, nil
}

// BatchChange is a batch transition: the new state, a message for the
// status, optionally the report to store, and whether to keep the lock
// (Reporting and the start of Processing keep it: work follows). A report
// too large for its node is stored trimmed, with the totals of its lists
// (see FitStatusReport); give it the batch's whole lists. Payload, only
// with Pending → Processing, records the reading of the payload the jobs
// are made from, written with the move, before any job exists.
type BatchChange struct {
	To       queue.BatchState
	Message  string
	Report   *v1.StatusReport
	KeepLock bool
	Payload  *queue.PayloadRecord
	// IfNoJobMoved refuses the change (ErrLocked) if a job entered
	// or left the batch's batch-processing folder since LiveJobs read it.
	IfNoJobMoved bool
}

// Names of a batch claim's guards and operations, as a refusal
// (session.Refused) gives them.
const (
	// guardNoJobMoved: the batch's batch-processing folder is at the
	// version LiveJobs read.
	guardNoJobMoved = "no job moved"
	opFolder        = "states folder"
	opJob           = "job"
	opJobID         = "job id"
)

// commit sends a Txn fenced by the claim (BatchClaim.hold.Txn): refused by
// its fence, the claim is lost (queue.ErrFenced); any other error names
// the batch.
func (bc *BatchClaim) commit(ctx context.Context, txn *session.Txn) error {
	err := txn.Commit(ctx)
	if err == nil || errors.Is(err, queue.ErrFenced) {
		return err
	}
	return fmt.Errorf("batch %s: %w", bc.ID(), err)
}

// Commit moves the batch to ch.To in one fenced operation. Pending →
// Processing also creates the batch's states folders (the "taken" marker)
// and the spawning marker, and keeps the lock for job creation.
//
// With ch.IfNoJobMoved, the change is refused (ErrLocked) if a job
// entered or left the batch's batch-processing folder since LiveJobs read
// it, checked in the same operation.
func (bc *BatchClaim) Commit(ctx context.Context, ch BatchChange) error {
	var guard *session.Guard
	if ch.IfNoJobMoved {
		guard = bc.liveGuard
	}
	if err := queue.CheckBatchMove(bc.ID(), bc.from, ch.To); err != nil {
		return err
	}
	if ch.Payload != nil && (bc.from != queue.BatchPending || ch.To != queue.BatchProcessing) {
		return fmt.Errorf("%w: batch %s: a payload record is written only with the move from Pending to Processing", queue.ErrInvalid, bc.ID())
	}
	if err := bc.hold.Check(); err != nil {
		return err
	}
	next := &v1.BatchStatus{Status: ch.To, LastModified: queue.NowStamp(), Message: ch.Message}
	statusData := queue.RewriteBatchStatus(bc.statusData, next)
	txn := bc.hold.Txn(statusData)
	if guard != nil {
		txn.If(*guard)
	}
	keep := ch.KeepLock
	spawnFrom := int32(-1)
	if ch.To == queue.BatchProcessing {
		keep = true
		ok, _, err := bc.c.z.Exists(ctx, bc.c.p.Batch(bc.ID()).States())
		if err != nil {
			return err
		}
		if !ok {
			txn.Then(session.Create(opFolder, bc.c.p.Batch(bc.ID()).States(), nil, 0))
			for _, f := range queue.BatchRefFolders() {
				txn.Then(session.Create(opFolder, bc.c.p.Batch(bc.ID()).Folder(f), nil, 0))
			}
		}
		// The spawning marker holds /jobs's child version as it is before
		// any job id is reserved for the batch: every id reserved for it,
		// by this batcher or one that finishes the batch, is numbered from
		// there, which is where removeStrays looks.
		_, jobsStat, err := bc.c.z.Exists(ctx, bc.c.p.Jobs())
		if err != nil {
			return err
		}
		spawnFrom = 0
		if jobsStat != nil {
			spawnFrom = jobsStat.Cversion
		}
		txn.Then(session.Create(queue.NodeSpawning, bc.c.p.Batch(bc.ID()).Node(queue.NodeSpawning), queue.EncodeInt(int64(spawnFrom)), 0))
		if ch.Payload != nil {
			txn.Then(session.Create(queue.NodePayload, bc.c.p.Batch(bc.ID()).Node(queue.NodePayload), queue.EncodePayloadRecord(*ch.Payload), 0))
		}
	}
	if bc.Spawning && ch.To != queue.BatchProcessing {
		if err := bc.removeStrays(ctx); err != nil {
			return err
		}
		txn.Then(session.Delete(queue.NodeSpawning, bc.c.p.Batch(bc.ID()).Node(queue.NodeSpawning), -1))
	}
	// The report as the node keeps it: trimmed to what a node holds, with
	// its totals (see FitStatusReport); the claim's copy is the same.
	var report *v1.StatusReport
	var reportData []byte
	if ch.Report != nil {
		var data []byte
		report, data = queue.FitStatusReport(ch.Report, queue.MaxNodeBytes)
		// Another writer's keys are kept only while they fit.
		if merged := queue.RewriteStatusReport(bc.reportData, data); len(merged) <= queue.MaxNodeBytes {
			data = merged
		}
		reportData = data
		rp := bc.c.p.Batch(bc.ID()).Node(queue.NodeStatusReport)
		if bc.Batch.StatusReport != nil {
			txn.Then(session.Set(queue.NodeStatusReport, rp, data, -1))
		} else {
			txn.Then(session.Create(queue.NodeStatusReport, rp, data, 0))
		}
	}
	if !keep {
		txn.ReleaseLock()
	}
	if err := bc.commit(ctx, txn); err != nil {
		if _, ok := session.RefusedBy(err, guardNoJobMoved); ok {
			return fmt.Errorf("batch %s: a job of it was requeued or ended while it was being moved to %s: %w",
				bc.ID(), queue.BatchStateName(ch.To), queue.ErrLocked)
		}
		return err
	}
	bc.from = ch.To
	bc.Batch.Status = next
	bc.statusData = statusData
	bc.Spawning = ch.To == queue.BatchProcessing
	if spawnFrom >= 0 {
		bc.spawnFrom = spawnFrom
	}
	if ch.Payload != nil {
		rec := *ch.Payload
		bc.Payload = &rec
	}
	if report != nil {
		bc.Batch.StatusReport = report
		bc.reportData = reportData
	}
	if !keep {
		bc.Batch.Locked = false
	}
	return nil
}

// LiveJobs reads how many jobs of the batch are live (its batch-processing
// folder's size), and remembers the folder's version for a Commit with
// IfNoJobMoved: every move of a job into or out of the folder writes it,
// so its version tells whether one moved since.
func (bc *BatchClaim) LiveJobs(ctx context.Context) (int32, error) {
	p := bc.c.p.Batch(bc.ID()).Folder(queue.FolderProcessing)
	ok, stat, err := bc.c.z.Exists(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", p, err)
	}
	if !ok {
		bc.liveGuard = nil // no job was ever created for the batch
		return 0, nil
	}
	g := session.IfVersion(guardNoJobMoved, p, stat.Version)
	bc.liveGuard = &g
	return stat.NumChildren, nil
}

// FinishSpawning marks the batch's jobs as all created and releases the lock;
// from then on the batch is reported once its last job ends.
func (bc *BatchClaim) FinishSpawning(ctx context.Context) error {
	if err := bc.hold.Check(); err != nil {
		return err
	}
	if bc.from != queue.BatchProcessing {
		return fmt.Errorf("batch %s is %s, not Processing: %w", bc.ID(), queue.BatchStateName(bc.from), queue.ErrWrongState)
	}
	// The status says what the batch waits for now, in the same write.
	next := &v1.BatchStatus{Status: bc.from, LastModified: queue.NowStamp(), Message: SpawnedMessage}
	statusData := queue.RewriteBatchStatus(bc.statusData, next)
	txn := bc.hold.Txn(statusData).ReleaseLock()
	if bc.Spawning {
		if err := bc.removeStrays(ctx); err != nil {
			return err
		}
		txn.Then(session.Delete(queue.NodeSpawning, bc.c.p.Batch(bc.ID()).Node(queue.NodeSpawning), -1))
	}
	if err := bc.commit(ctx, txn); err != nil {
		return err
	}
	bc.Batch.Status = next
	bc.statusData = statusData
	bc.Batch.Locked = false
	bc.Spawning = false
	return nil
}

// SpawnedMessage is the status message of a Processing batch whose jobs
// are all created.
const SpawnedMessage = "its jobs are all created and being ingested: the batch is reported once every one has ended"

// StopSpawning ends the creation of a Processing batch's jobs before every
// row of its payload became one (the payload changed, say): in one fenced
// operation the batch's status message becomes msg, its payload record
// keeps reason (PayloadRecord.SpawnStopped), the spawning marker goes and
// the lock is released. The jobs it has go on; once they end the batch is
// reported, and fails with reason.
func (bc *BatchClaim) StopSpawning(ctx context.Context, reason, msg string) error {
	if err := bc.hold.Check(); err != nil {
		return err
	}
	if bc.from != queue.BatchProcessing || !bc.Spawning {
		return fmt.Errorf("batch %s: %w: only a Processing batch whose jobs are being created stops spawning", bc.ID(), queue.ErrWrongState)
	}
	if reason == "" {
		return fmt.Errorf("%w: batch %s: stopping its spawning needs a reason", queue.ErrInvalid, bc.ID())
	}
	if err := bc.removeStrays(ctx); err != nil {
		return err
	}
	rec := queue.PayloadRecord{SpawnStopped: reason}
	recPath := bc.c.p.Batch(bc.ID()).Node(queue.NodePayload)
	var recOp session.Op
	if bc.Payload != nil {
		rec.SHA256, rec.Size = bc.Payload.SHA256, bc.Payload.Size
		recOp = session.Set(queue.NodePayload, recPath, queue.EncodePayloadRecord(rec), -1)
	} else {
		recOp = session.Create(queue.NodePayload, recPath, queue.EncodePayloadRecord(rec), 0)
	}
	next := &v1.BatchStatus{Status: bc.from, LastModified: queue.NowStamp(), Message: msg}
	statusData := queue.RewriteBatchStatus(bc.statusData, next)
	txn := bc.hold.Txn(statusData).ReleaseLock().
		Then(recOp, session.Delete(queue.NodeSpawning, bc.c.p.Batch(bc.ID()).Node(queue.NodeSpawning), -1))
	if err := bc.commit(ctx, txn); err != nil {
		return err
	}
	bc.Batch.Status = next
	bc.statusData = statusData
	bc.Batch.Locked = false
	bc.Spawning = false
	bc.Payload = &rec
	return nil
}

// Release gives the batch back untouched.
func (bc *BatchClaim) Release(ctx context.Context) error { return bc.hold.Release(ctx) }

// ReleaseWithMessage gives the batch back in its state, its status message
// now msg: a batch left waiting for something says what. A message the
// status holds already is not written again.
func (bc *BatchClaim) ReleaseWithMessage(ctx context.Context, msg string) error {
	if msg == bc.Batch.GetStatus().GetMessage() {
		return bc.Release(ctx)
	}
	if err := bc.hold.Check(); err != nil {
		bc.hold.Abandon()
		return err
	}
	next := &v1.BatchStatus{Status: bc.from, LastModified: queue.NowStamp(), Message: msg}
	if err := bc.commit(ctx, bc.hold.Txn(queue.RewriteBatchStatus(bc.statusData, next)).ReleaseLock()); err != nil {
		bc.hold.Abandon()
		return err
	}
	bc.Batch.Status = next
	bc.Batch.Locked = false
	return nil
}

// Remove removes the claimed batch, Completed or Deleted: every job it
// references (jobs.Client.RemoveJobs), then its own tree, which ends the
// claim. It returns the jobs removed, for their working directories. When
// either step fails the claim is released: what is left is still a batch
// (Deleted or Completed), which a later try, the cleanup or fsck finishes.
func (bc *BatchClaim) Remove(ctx context.Context) ([]*v1.Job, error) {
	if err := bc.hold.Check(); err != nil {
		return nil, err
	}
	if bc.from != queue.BatchCompleted && bc.from != queue.BatchDeleted {
		return nil, fmt.Errorf("batch %s is %s, not Completed or Deleted: %w", bc.ID(), queue.BatchStateName(bc.from), queue.ErrWrongState)
	}
	refs, err := bc.c.r.BatchJobIDs(ctx, bc.ID())
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	var jids []string
	for _, f := range queue.BatchRefFolders() {
		jids = append(jids, refs[f]...)
	}
	removed, err := bc.c.j.RemoveJobs(ctx, jids)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	// The batch's tree goes with its lock, in a Txn fenced by the claim.
	ops, err := bc.c.treeOps(ctx, bc.ID(), bc.Batch.GetSubmission().GetBatchId(), false)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	if ops == nil {
		// Gone already, its lock with it.
		bc.hold.Abandon()
		return removed, nil
	}
	if err := bc.hold.Txn(nil).ReleaseLock().Then(ops...).Commit(ctx); err != nil {
		if !errors.Is(err, queue.ErrFenced) {
			bc.Release(context.WithoutCancel(ctx))
		}
		return nil, fmt.Errorf("deleting batch %s: %w", bc.ID(), err)
	}
	return removed, nil
}
