package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// Batch nodes.
const (
	nodeSubmission   = "submission"
	nodeStatusReport = "status-report"
	nodeStates       = "states"
	nodeSpawning     = "spawning"
	nodePayload      = "payload"
)

// PayloadRecord is what the batcher records, with the move to Processing,
// of the one reading of a payload its jobs are made from (ingestq's own
// node, /batches/BID/payload; see the package doc): a batcher finishing a
// half-spawned batch makes the rest of its jobs from that same reading.
type PayloadRecord struct {
	// SHA256 (hex) and Size are the digest and length of the payload as
	// first fetched.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// SpawnStopped says why not every row of the payload became a job (set
	// by StopSpawning): the batch fails once the jobs it has end.
	SpawnStopped string `json:"spawn_stopped,omitempty"`
}

func decodePayloadRecord(path string, data []byte) (*PayloadRecord, error) {
	var r PayloadRecord
	if err := unmarshal(path, data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// MaxUUIDLength bounds a submitter's batch id (it becomes a node name).
const MaxUUIDLength = 128

func validUUID(id string) error {
	if id == "" || len(id) > MaxUUIDLength || id == "." || id == ".." || id == "zookeeper" {
		return fmt.Errorf("%w: batch id %q must be 1 to %d characters, and neither %q nor %q", ErrInvalid, truncate(id, 40), MaxUUIDLength, ".", "..")
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: batch id %q is not valid UTF-8", ErrInvalid, truncate(id, 40))
	}
	for _, r := range id {
		if r == '/' || unicode.IsControl(r) || unicode.IsSpace(r) || v1.ZooKeeperRefuses(r) {
			return fmt.Errorf("%w: batch id %q must not contain '/', spaces, control characters or a character ZooKeeper refuses in a node name (%U)",
				ErrInvalid, truncate(id, 40), r)
		}
	}
	return nil
}

// CreateBatch writes a new Pending batch (and its /batch-uuids entry when the
// submission has a batch id) and returns its bid.
func (c *Client) CreateBatch(ctx context.Context, sub *v1.Submission) (string, error) {
	if id := sub.GetBatchId(); id != "" {
		if err := validUUID(id); err != nil {
			return "", err
		}
		if bid, err := c.BatchByUUID(ctx, id); err == nil {
			return "", fmt.Errorf("batch id %s was already submitted as %s: %w", id, bid, ErrExists)
		} else if !errors.Is(err, ErrNotFound) {
			return "", err
		}
	}
	if sub.SubmissionDate == nil {
		sub.SubmissionDate = nowStamp()
	}
	created, err := c.create(ctx, c.p.batchSeq(), nil, zk.FlagSequence)
	if err != nil {
		return "", fmt.Errorf("allocating a batch id: %w", err)
	}
	bid := path.Base(created)
	ops := []any{
		c.createOp(c.p.batchNode(bid, nodeSubmission), encodeSubmission(sub), 0),
		c.createOp(c.p.batchStatus(bid), encodeBatchStatus(&v1.BatchStatus{Status: BatchPending, LastModified: nowStamp()}), 0),
	}
	if id := sub.GetBatchId(); id != "" {
		ops = append(ops, c.createOp(c.p.batchUUID(id), []byte(bid), 0))
	}
	if _, err := c.multi(ctx, ops...); err != nil {
		// Leave nothing behind; fsck removes the empty node if this fails too.
		c.conn.Delete(created, -1)
		if errors.Is(err, zk.ErrNodeExists) {
			return "", fmt.Errorf("batch id %s was already submitted: %w", sub.GetBatchId(), ErrExists)
		}
		return "", fmt.Errorf("writing batch %s: %w", bid, err)
	}
	return bid, nil
}

// BatchByUUID returns the bid submitted under a submitter's batch id.
func (c *Client) BatchByUUID(ctx context.Context, uuid string) (string, error) {
	if err := validUUID(uuid); err != nil {
		return "", err
	}
	data, _, err := c.get(ctx, c.p.batchUUID(uuid))
	if errors.Is(err, zk.ErrNoNode) {
		return "", fmt.Errorf("batch id %s: %w", uuid, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("reading batch id %s: %w", uuid, err)
	}
	return string(data), nil
}

func (c *Client) batchStatus(ctx context.Context, bid string) (*v1.BatchStatus, error) {
	return getNode(ctx, c, c.p.batchStatus(bid), "batch "+bid, decodeBatchStatus)
}

// GetBatch reads a batch: submission, status, last report, job counts per
// batch folder (from node statistics, not by reading jobs) and lock, all
// in one read.
func (c *Client) GetBatch(ctx context.Context, bid string) (*v1.Batch, error) {
	if !ValidBatchID(bid) {
		return nil, fmt.Errorf("%w: %q is not a batch id (bidNNNNNNNNNN)", ErrInvalid, bid)
	}
	b := &v1.Batch{Id: bid}
	ps := append([]string{c.p.batchStatus(bid), c.p.batchNode(bid, nodeSubmission), c.p.batchNode(bid, nodeStatusReport),
		c.p.batchLock(bid)}, c.batchFolderPaths(bid)...)
	read, err := c.getManyStat(ctx, ps)
	if err != nil {
		return nil, err
	}
	if read[0].stat == nil {
		return nil, fmt.Errorf("batch %s: %w", bid, ErrNotFound)
	}
	if b.Status, err = decodeBatchStatus(ps[0], read[0].data); err != nil {
		return nil, err
	}
	if read[1].stat != nil {
		// A submission with a word ingestq does not know is shown as far
		// as it reads: the batcher fails such a batch, saying why in its
		// status, which must stay readable.
		b.Submission, _ = decodeSubmission(ps[1], read[1].data)
	}
	if read[2].stat != nil {
		if b.StatusReport, err = decodeStatusReport(ps[2], read[2].data); err != nil {
			return nil, err
		}
	}
	b.Locked = read[3].stat != nil
	b.Counts = batchCounts(read[4:])
	return b, nil
}

// BatchCounts counts a batch's job references per folder.
func (c *Client) BatchCounts(ctx context.Context, bid string) (*v1.BatchJobCounts, error) {
	read, err := c.getManyStat(ctx, c.batchFolderPaths(bid))
	if err != nil {
		return nil, fmt.Errorf("counting batch %s: %w", bid, err)
	}
	return batchCounts(read), nil
}

// batchFolderPaths are a batch's folders of job references, in
// batchFolders' order.
func (c *Client) batchFolderPaths(bid string) []string {
	out := make([]string, len(batchFolders))
	for i, f := range batchFolders {
		out[i] = c.p.batchFolder(bid, f)
	}
	return out
}

// batchCounts are the job references in the folders read (batchFolders'
// order; a missing folder holds none).
func batchCounts(read []dataStat) *v1.BatchJobCounts {
	n := func(i int) int32 {
		if read[i].stat == nil {
			return 0
		}
		return read[i].stat.NumChildren
	}
	return &v1.BatchJobCounts{Processing: n(0), Completed: n(1), Failed: n(2), Deleted: n(3)}
}

// BatchJobIDs lists a batch's job ids per batch folder ("batch-processing",
// "batch-completed", "batch-failed", "batch-deleted"), each sorted.
func (c *Client) BatchJobIDs(ctx context.Context, bid string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, f := range batchFolders {
		names, _, err := c.children(ctx, c.p.batchFolder(bid, f))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing batch %s %s: %w", bid, f, err)
		}
		slices.Sort(names)
		out[f] = names
	}
	return out, nil
}

// BatchClaim is a batch this client holds the lock of; like a job Claim,
// every change through it is fenced by the status version it owns.
type BatchClaim struct {
	c     *Client
	Batch *v1.Batch
	// Spawning is true while the batch's jobs are still being created (a
	// batcher died half-way if it is set when the batch is claimed).
	Spawning bool
	// Payload is the record of the reading its jobs are made from (nil: the
	// payload is not a fetched document, or the batch was taken without
	// one).
	Payload *PayloadRecord
	// LoadErr is set when the batch's submission is unreadable (not JSON,
	// or a word in it ingestq does not know); Batch.Submission then holds
	// what could be read. The batch can still be failed and reported
	// through the claim.
	LoadErr error
	// Merritt is what a submission written by Merritt's ingest service
	// says beyond Batch.Submission (nil for other submissions).
	Merritt *MerrittSubmission

	from    BatchState
	version int32
	// statusData and reportData are the status and status-report as
	// read: a rewrite carries forward the keys other writers put there.
	statusData, reportData []byte
	sess                   *session
	ctx                    context.Context
	cancel                 context.CancelCauseFunc
	lock                   *ownLock // the batch's lock node, in the client's lockBook
	mu                     sync.Mutex
	done                   bool
}

// ID is the claimed batch's bid.
func (bc *BatchClaim) ID() string { return bc.Batch.GetId() }

// State is the batch's state as claimed (or as last committed with KeepLock).
func (bc *BatchClaim) State() BatchState { return bc.from }

// Context ends when the claim's session is lost or the claim ends.
func (bc *BatchClaim) Context() context.Context { return bc.ctx }

// ClaimBatch takes a batch's lock. ErrLocked: another consumer has it.
func (c *Client) ClaimBatch(ctx context.Context, bid string) (*BatchClaim, error) {
	if !ValidBatchID(bid) {
		return nil, fmt.Errorf("%w: %q is not a batch id (bidNNNNNNNNNN)", ErrInvalid, bid)
	}
	sess, err := c.currentSession()
	if err != nil {
		return nil, err
	}
	statusPath := c.p.batchStatus(bid)
	data, stat, err := c.get(ctx, statusPath)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("batch %s: %w", bid, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", statusPath, err)
	}
	st, err := decodeBatchStatus(statusPath, data)
	if err != nil {
		return nil, err
	}
	bc := &BatchClaim{c: c, from: st.GetStatus(), version: stat.Version + 1, sess: sess, statusData: data}
	bc.ctx, bc.cancel = context.WithCancelCause(sess.ctx)
	bc.lock = c.locks.add(c.p.batchLock(bid), bc.ctx)
	_, err = c.multi(ctx, c.createOp(c.p.batchLock(bid), nil, zk.FlagEphemeral), setOp(statusPath, data, stat.Version))
	if err != nil {
		bc.cancel(err)
		if errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			c.locks.forget(bc.lock) // refused: nothing was created
		} else {
			c.leave(bc.lock) // perhaps applied, its answer lost
		}
	}
	switch {
	case errors.Is(err, zk.ErrNodeExists):
		return nil, fmt.Errorf("batch %s (%s): %w", bid, BatchStateName(st.GetStatus()), ErrLocked)
	case errors.Is(err, zk.ErrBadVersion):
		return nil, fmt.Errorf("batch %s changed while being claimed: %w", bid, ErrLocked)
	case errors.Is(err, zk.ErrNoNode):
		return nil, fmt.Errorf("batch %s: %w", bid, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("locking batch %s: %w", bid, err)
	}
	release := func(err error) (*BatchClaim, error) {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	ps := []string{c.p.batchNode(bid, nodeSubmission), c.p.batchNode(bid, nodeStatusReport), c.p.batchNode(bid, nodePayload)}
	datas, err := c.getMany(ctx, ps)
	if err != nil {
		return release(err)
	}
	if bc.Spawning, _, err = c.exists(ctx, c.p.batchSpawning(bid)); err != nil {
		return release(err)
	}
	bc.Batch = &v1.Batch{Id: bid, Status: st, Locked: true}
	if datas[0] != nil {
		bc.Batch.Submission, bc.LoadErr = decodeSubmission(ps[0], datas[0])
		bc.Merritt = decodeMerrittSubmission(ps[0], datas[0])
	}
	bc.reportData = datas[1]
	if datas[1] != nil {
		if bc.Batch.StatusReport, err = decodeStatusReport(ps[1], datas[1]); err != nil {
			return release(err)
		}
	}
	if datas[2] != nil {
		if bc.Payload, err = decodePayloadRecord(ps[2], datas[2]); err != nil {
			return release(err)
		}
	}
	return bc, nil
}

// BatchChange is a batch transition: the new state, a message for the
// status, optionally the report to store, and whether to keep the lock
// (Reporting and the start of Processing keep it: work follows). A report
// too large for its node is stored trimmed, with the totals of its lists
// (see fitStatusReport); give it the batch's whole lists. Payload, only
// with Pending → Processing, records the reading of the payload the jobs
// are made from, written with the move, before any job exists.
type BatchChange struct {
	To       BatchState
	Message  string
	Report   *v1.StatusReport
	KeepLock bool
	Payload  *PayloadRecord
}

func (bc *BatchClaim) finish() error {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.done {
		return fmt.Errorf("batch %s: claim already finished", bc.ID())
	}
	if bc.sess.ctx.Err() != nil {
		return fmt.Errorf("batch %s: %w: %v", bc.ID(), ErrFenced, context.Cause(bc.sess.ctx))
	}
	return nil
}

func (bc *BatchClaim) markDone() {
	bc.mu.Lock()
	bc.done = true
	bc.mu.Unlock()
	bc.cancel(errClaimFinished)
	// Ended without its lock known gone: tidyLocks deletes it if it is
	// still this session's.
	bc.c.leave(bc.lock)
}

// settle ends a claim whose lock went with the operation that ended it.
func (bc *BatchClaim) settle() {
	bc.c.locks.forget(bc.lock)
	bc.markDone()
}

// fenced ends a claim whose change was refused (see Claim.fenced): a lock
// still its own is removed.
func (bc *BatchClaim) fenced(ctx context.Context) {
	bc.c.letGo(ctx, bc.lock)
	bc.markDone()
}

// fencedMulti runs ops after the batch's fencing checks (status version as
// owned, lock present); failing either means the claim is lost.
func (bc *BatchClaim) fencedMulti(ctx context.Context, statusOp any, ops ...any) error {
	all := append([]any{statusOp, checkOp(bc.c.p.batchLock(bc.ID()), -1)}, ops...)
	_, err := bc.c.multi(ctx, all...)
	if err == nil {
		return nil
	}
	if idx := failedOp(err); idx == 0 || idx == 1 {
		bc.fenced(ctx)
		return fmt.Errorf("batch %s: %w (%v)", bc.ID(), ErrFenced, err)
	}
	return fmt.Errorf("batch %s: %w", bc.ID(), err)
}

// Commit moves the batch to ch.To in one fenced operation. Pending →
// Processing also creates the batch's states folders (the "taken" marker)
// and the spawning marker, and keeps the lock for job creation.
func (bc *BatchClaim) Commit(ctx context.Context, ch BatchChange) error {
	return bc.commit(ctx, ch, nil)
}

// liveGuard is the check that no job entered or left a batch's
// batch-processing folder since it was read: every such move writes the
// folder (refOps), so its version tells. It is nil when the batch has no
// such folder (no job was ever created for it). live is how many jobs the
// folder held.
func (c *Client) liveGuard(ctx context.Context, bid string) (guard *zk.CheckVersionRequest, live int32, err error) {
	p := c.p.batchFolder(bid, folderProcessing)
	ok, stat, err := c.exists(ctx, p)
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", p, err)
	}
	if !ok {
		return nil, 0, nil
	}
	return checkOp(p, stat.Version), stat.NumChildren, nil
}

// commit is Commit, with guard (if not nil) checked in the same operation:
// a guard that fails refuses the change with ErrLocked.
func (bc *BatchClaim) commit(ctx context.Context, ch BatchChange, guard *zk.CheckVersionRequest) error {
	if err := checkBatchMove(bc.ID(), bc.from, ch.To); err != nil {
		return err
	}
	if ch.Payload != nil && (bc.from != BatchPending || ch.To != BatchProcessing) {
		return fmt.Errorf("%w: batch %s: a payload record is written only with the move from Pending to Processing", ErrInvalid, bc.ID())
	}
	if err := bc.finish(); err != nil {
		return err
	}
	next := &v1.BatchStatus{Status: ch.To, LastModified: nowStamp(), Message: ch.Message}
	statusData := withKeysOf(bc.statusData, encodeBatchStatus(next), batchStatusKeys)
	statusOp := setOp(bc.c.p.batchStatus(bc.ID()), statusData, bc.version)
	var ops []any
	if guard != nil {
		ops = append(ops, guard) // index 2, after fencedMulti's own checks
	}
	keep := ch.KeepLock
	if ch.To == BatchProcessing {
		keep = true
		ok, _, err := bc.c.exists(ctx, bc.c.p.batchStates(bc.ID()))
		if err != nil {
			return err
		}
		if !ok {
			ops = append(ops, bc.c.createOp(bc.c.p.batchStates(bc.ID()), nil, 0))
			for _, f := range batchFolders {
				ops = append(ops, bc.c.createOp(bc.c.p.batchFolder(bc.ID(), f), nil, 0))
			}
		}
		ops = append(ops, bc.c.createOp(bc.c.p.batchSpawning(bc.ID()), nil, 0))
		if ch.Payload != nil {
			ops = append(ops, bc.c.createOp(bc.c.p.batchNode(bc.ID(), nodePayload), marshal(ch.Payload), 0))
		}
	}
	if bc.Spawning && ch.To != BatchProcessing {
		ops = append(ops, deleteOp(bc.c.p.batchSpawning(bc.ID()), -1))
	}
	// The report as the node keeps it: trimmed to what a node holds, with
	// its totals (see fitStatusReport); the claim's copy is the same.
	var report *v1.StatusReport
	var reportData []byte
	if ch.Report != nil {
		var data []byte
		report, data = fitStatusReport(ch.Report, MaxNodeBytes)
		// Another writer's keys are kept only while they fit.
		if merged := withKeysOf(bc.reportData, data, statusReportKeys); len(merged) <= MaxNodeBytes {
			data = merged
		}
		reportData = data
		rp := bc.c.p.batchNode(bc.ID(), nodeStatusReport)
		if bc.Batch.StatusReport != nil {
			ops = append(ops, setOp(rp, data, -1))
		} else {
			ops = append(ops, bc.c.createOp(rp, data, 0))
		}
	}
	if !keep {
		ops = append(ops, deleteOp(bc.c.p.batchLock(bc.ID()), -1))
	}
	if err := bc.fencedMulti(ctx, statusOp, ops...); err != nil {
		if guard != nil && failedOp(err) == 2 {
			return fmt.Errorf("batch %s: a job of it was requeued or ended while it was being moved to %s: %w",
				bc.ID(), BatchStateName(ch.To), ErrLocked)
		}
		return err
	}
	bc.version++
	bc.from = ch.To
	bc.Batch.Status = next
	bc.statusData = statusData
	bc.Spawning = ch.To == BatchProcessing
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
		bc.settle()
	}
	return nil
}

// FinishSpawning marks the batch's jobs as all created and releases the lock;
// from then on the batch is reported once its last job ends.
func (bc *BatchClaim) FinishSpawning(ctx context.Context) error {
	if err := bc.finish(); err != nil {
		return err
	}
	if bc.from != BatchProcessing {
		return fmt.Errorf("batch %s is %s, not Processing: %w", bc.ID(), BatchStateName(bc.from), ErrWrongState)
	}
	var ops []any
	if bc.Spawning {
		ops = append(ops, deleteOp(bc.c.p.batchSpawning(bc.ID()), -1))
	}
	ops = append(ops, deleteOp(bc.c.p.batchLock(bc.ID()), -1))
	if err := bc.fencedMulti(ctx, checkOp(bc.c.p.batchStatus(bc.ID()), bc.version), ops...); err != nil {
		return err
	}
	bc.Spawning = false
	bc.settle()
	return nil
}

// StopSpawning ends the creation of a Processing batch's jobs before every
// row of its payload became one (the payload changed, say): in one fenced
// operation the batch's status message becomes msg, its payload record
// keeps reason (PayloadRecord.SpawnStopped), the spawning marker goes and
// the lock is released. The jobs it has go on; once they end the batch is
// reported, and fails with reason.
func (bc *BatchClaim) StopSpawning(ctx context.Context, reason, msg string) error {
	if err := bc.finish(); err != nil {
		return err
	}
	if bc.from != BatchProcessing || !bc.Spawning {
		return fmt.Errorf("batch %s: %w: only a Processing batch whose jobs are being created stops spawning", bc.ID(), ErrWrongState)
	}
	if reason == "" {
		return fmt.Errorf("%w: batch %s: stopping its spawning needs a reason", ErrInvalid, bc.ID())
	}
	rec := PayloadRecord{SpawnStopped: reason}
	recPath := bc.c.p.batchNode(bc.ID(), nodePayload)
	var recOp any
	if bc.Payload != nil {
		rec.SHA256, rec.Size = bc.Payload.SHA256, bc.Payload.Size
		recOp = setOp(recPath, marshal(rec), -1)
	} else {
		recOp = bc.c.createOp(recPath, marshal(rec), 0)
	}
	next := &v1.BatchStatus{Status: bc.from, LastModified: nowStamp(), Message: msg}
	statusData := withKeysOf(bc.statusData, encodeBatchStatus(next), batchStatusKeys)
	statusOp := setOp(bc.c.p.batchStatus(bc.ID()), statusData, bc.version)
	if err := bc.fencedMulti(ctx, statusOp, recOp, deleteOp(bc.c.p.batchSpawning(bc.ID()), -1),
		deleteOp(bc.c.p.batchLock(bc.ID()), -1)); err != nil {
		return err
	}
	bc.version++
	bc.Batch.Status = next
	bc.statusData = statusData
	bc.Batch.Locked = false
	bc.Spawning = false
	bc.Payload = &rec
	bc.markDone()
	return nil
}

// Release gives the batch back untouched.
func (bc *BatchClaim) Release(ctx context.Context) error {
	if err := bc.finish(); err != nil {
		bc.markDone()
		return err
	}
	_, err := bc.c.multi(ctx, checkOp(bc.c.p.batchStatus(bc.ID()), bc.version), deleteOp(bc.c.p.batchLock(bc.ID()), -1))
	if err != nil {
		bc.fenced(ctx)
		return fmt.Errorf("releasing batch %s: %w (%v)", bc.ID(), ErrFenced, err)
	}
	bc.settle()
	return nil
}

// ReleaseWithMessage gives the batch back in its state, its status message
// now msg: a batch left waiting for something says what. A message the
// status holds already is not written again.
func (bc *BatchClaim) ReleaseWithMessage(ctx context.Context, msg string) error {
	if msg == bc.Batch.GetStatus().GetMessage() {
		return bc.Release(ctx)
	}
	if err := bc.finish(); err != nil {
		bc.markDone()
		return err
	}
	next := &v1.BatchStatus{Status: bc.from, LastModified: nowStamp(), Message: msg}
	statusOp := setOp(bc.c.p.batchStatus(bc.ID()), withKeysOf(bc.statusData, encodeBatchStatus(next), batchStatusKeys), bc.version)
	if err := bc.fencedMulti(ctx, statusOp, deleteOp(bc.c.p.batchLock(bc.ID()), -1)); err != nil {
		bc.markDone()
		return err
	}
	bc.version++
	bc.Batch.Status = next
	bc.Batch.Locked = false
	bc.settle()
	return nil
}

// NewJob is one job for BatchClaim.CreateJobs.
type NewJob struct {
	Priority      int32
	SpaceNeeded   int64
	Configuration *v1.JobConfiguration // BatchEntry must be unique within the batch
	Identifiers   *v1.Identifiers      // optional
	Metadata      *v1.Metadata         // optional
	Manifest      *v1.Manifest         // optional: the object's files
	// WorkRoot, when set, makes the job's working_dir <WorkRoot>/<bid>/<jid>
	// (the jid exists only once CreateJobs has allocated it).
	WorkRoot string
}

// maxMultiBytes bounds one multi of a batch's jobs: well under ZooKeeper's
// 1 MB request limit, and small enough that the server's log of its last
// 500 transactions (kept in memory for followers) stays small: at 512 KiB a
// batch of 58,000 jobs ran a 512 MiB server out of heap.
const maxMultiBytes = 128 << 10

// idsPerMulti is how many job ids one multi allocates, idMultisInFlight
// how many such multis are sent at once. Larger multis of sequential creates
// exhaust a server's memory: a 58,000-job batch ran a 512 MiB server out of
// heap at 500 per multi (with 4, or 64, in flight); at 100 it passes.
const (
	idsPerMulti      = 100
	idMultisInFlight = 4
)

// jobMultisInFlight bounds the multis writing a batch's jobs that are sent
// at once: each holds up to maxMultiBytes of server memory until answered,
// and each whose answer a connection loss takes must be checked and sent
// again.
const jobMultisInFlight = 8

// jobResends is how many times a multi writing jobs is sent again after
// its answer was lost (the connection closed under it, as when ZooKeeper
// elects a leader); each resend first checks whether the jobs exist.
const jobResends = 5

// CreateJobs creates jobs of a Processing batch whose jobs are being
// spawned. Each job lands in its three places (/jobs/JID, its pending entry,
// its batch reference) in one atomic operation fenced by this claim, so a
// batcher that lost the batch creates nothing more. Jobs are created in
// order of the slice; it returns their ids.
//
// Job ids are reserved first (sequential creates under /jobs, each holding
// the bid), then written. A write whose answer is lost is checked and sent
// again; when creation fails, the ids reserved and not written are
// deleted before it returns, so no job node is left without a status.
func (bc *BatchClaim) CreateJobs(ctx context.Context, jobs []NewJob) ([]string, error) {
	if err := bc.finish(); err != nil {
		return nil, err
	}
	if bc.from != BatchProcessing || !bc.Spawning {
		return nil, fmt.Errorf("batch %s: %w: jobs are created only while spawning a Processing batch", bc.ID(), ErrWrongState)
	}
	for i := range jobs {
		if jobs[i].Configuration == nil {
			return nil, fmt.Errorf("%w: job %d has no configuration", ErrInvalid, i)
		}
		if err := validPriority(&jobs[i].Priority); err != nil {
			return nil, err
		}
	}
	ids, err := bc.reserveJobIDs(ctx, len(jobs))
	if err != nil {
		return nil, fmt.Errorf("allocating job ids for batch %s: %w", bc.ID(), err)
	}
	// Then write the jobs, grouped into multis of bounded size, a few in flight.
	type group struct {
		ops  []any
		jids []string
	}
	var groups []group
	var cur group
	size := 0
	for i, j := range jobs {
		ops := bc.jobOps(ids[i], j)
		n := 0
		for _, op := range ops {
			if cr, ok := op.(*zk.CreateRequest); ok {
				n += len(cr.Data) + len(cr.Path) + 16
			}
		}
		if len(cur.ops) > 0 && (size+n > maxMultiBytes || len(cur.ops) > 400) {
			groups = append(groups, cur)
			cur, size = group{}, 0
		}
		cur.ops = append(cur.ops, ops...)
		cur.jids = append(cur.jids, ids[i])
		size += n
	}
	if len(cur.ops) > 0 {
		groups = append(groups, cur)
	}
	gerrs := make([]error, len(groups))
	eachAtMost(len(groups), jobMultisInFlight, func(gi int) {
		gerrs[gi] = bc.writeJobs(ctx, groups[gi].jids[0], groups[gi].ops)
	})
	if err := errors.Join(gerrs...); err != nil {
		var unwritten []string
		for gi, g := range groups {
			if gerrs[gi] != nil {
				unwritten = append(unwritten, g.jids...)
			}
		}
		bc.c.dropReservedJobIDs(ctx, unwritten)
		return nil, fmt.Errorf("creating jobs of batch %s: %w", bc.ID(), err)
	}
	return ids, nil
}

// writeJobs sends one multi of job creations (first is the first job it
// creates), fenced by the claim. After a lost answer it looks whether the
// jobs exist (the multi is atomic: the first one tells) before sending it
// again, so a job is written once.
func (bc *BatchClaim) writeJobs(ctx context.Context, first string, ops []any) error {
	status := bc.c.p.jobStatus(first)
	var lost error
	for attempt := 0; ; attempt++ {
		err := bc.fencedMulti(ctx, checkOp(bc.c.p.batchStatus(bc.ID()), bc.version), ops...)
		if err == nil {
			return nil
		}
		// A resend refused because a node exists: the lost one was applied.
		resentOnto := lost != nil && errors.Is(err, zk.ErrNodeExists)
		if !resentOnto && (!retryable(err) || attempt >= jobResends) {
			return err
		}
		if retryable(err) {
			lost = err
		}
		written, _, xerr := bc.c.exists(ctx, status)
		if xerr != nil {
			return fmt.Errorf("%w; then checking whether its jobs were written: %w", err, xerr)
		}
		if written {
			return nil
		}
		if resentOnto {
			return err
		}
	}
}

// reserveJobIDs reserves n job ids for the claimed batch: sequential nodes
// under /jobs holding the bid, in the order they were made. When it fails,
// the ids it reserved are deleted again.
func (bc *BatchClaim) reserveJobIDs(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, n)
	chunks := (n + idsPerMulti - 1) / idsPerMulti
	errs := make([]error, chunks)
	eachAtMost(chunks, idMultisInFlight, func(ci int) {
		lo, hi := ci*idsPerMulti, min((ci+1)*idsPerMulti, n)
		got, err := bc.reserveSome(ctx, hi-lo)
		errs[ci] = err
		copy(ids[lo:hi], got)
	})
	if err := errors.Join(errs...); err != nil {
		bc.c.dropReservedJobIDs(ctx, slices.DeleteFunc(ids, func(id string) bool { return id == "" }))
		return nil, err
	}
	// Allocation ran concurrently; sorted ids keep the jobs' age order equal
	// to the order of the slice.
	slices.Sort(ids)
	return ids, nil
}

// reserveSome reserves n job ids in one multi. Its nodes hold a mark of
// their own, so that after a lost answer they can be found among the nodes
// made meanwhile: found, they are the answer; absent, the multi is sent
// again.
func (bc *BatchClaim) reserveSome(ctx context.Context, n int) ([]string, error) {
	c := bc.c
	mark := []byte(bc.ID() + " " + strconv.FormatUint(rand.Uint64(), 36))
	ops := make([]any, n)
	for i := range ops {
		ops[i] = c.createOp(c.p.jobSeq(), mark, zk.FlagSequence)
	}
	for attempt := 0; ; attempt++ {
		_, before, err := c.exists(ctx, path.Dir(c.p.jobSeq()))
		if err != nil {
			return nil, err
		}
		// Sent alone, not grouped: it is a large request already.
		res, err := call(ctx, func() ([]zk.MultiResponse, error) { return c.group.send(ops) })
		if err = multiError(res, err); err == nil {
			ids := make([]string, len(res))
			for i, r := range res {
				ids[i] = path.Base(r.String)
			}
			return ids, nil
		}
		if !retryable(err) {
			return nil, err
		}
		found, ferr := c.findMarked(ctx, before.Cversion, mark)
		switch {
		case ferr != nil:
			return nil, fmt.Errorf("%w; then looking for the ids it may have reserved: %w", err, ferr)
		case len(found) == n:
			return found, nil
		case len(found) > 0:
			// A multi is atomic: part of it is not its doing.
			return found, fmt.Errorf("%w; then found %d of its %d ids", err, len(found), n)
		case attempt >= jobResends:
			return nil, err
		}
	}
}

// maxMarkedScan bounds how many sequence numbers findMarked reads: past
// that, fsck removes what was left (job-without-status).
const maxMarkedScan = 20000

// findMarked returns the job nodes holding mark whose sequence number is
// from on: a sequential create takes its parent's child version as its
// number, so nodes made after /jobs was read at version from are numbered
// from there to its present child version.
func (c *Client) findMarked(ctx context.Context, from int32, mark []byte) ([]string, error) {
	jobs := path.Dir(c.p.jobSeq())
	if _, err := call(ctx, func() (string, error) { return c.conn.Sync(jobs) }); err != nil {
		return nil, fmt.Errorf("syncing %s: %w", jobs, err)
	}
	_, now, err := c.exists(ctx, jobs)
	if err != nil {
		return nil, err
	}
	if int(now.Cversion)-int(from) > maxMarkedScan {
		return nil, fmt.Errorf("%d jobs made or deleted meanwhile: too many to look through", now.Cversion-from)
	}
	var ps []string
	for n := from; n < now.Cversion; n++ {
		ps = append(ps, fmt.Sprintf("%s%010d", c.p.jobSeq(), n))
	}
	read, err := c.getManyStat(ctx, ps)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, r := range read {
		if r.stat != nil && bytes.Equal(r.data, mark) {
			out = append(out, path.Base(ps[i]))
		}
	}
	return out, nil
}

// dropReservedJobIDs deletes job nodes reserved and not written. A node
// whose jobs were written after all has children and stays (the delete
// fails); a write still on its way after the delete fails as a whole (its
// job node is gone), so a job is either whole or absent. It runs after the
// caller's ctx ended too, within a bound of its own: what it cannot delete
// fsck reports (job-without-status) and removes.
func (c *Client) dropReservedJobIDs(ctx context.Context, jids []string) {
	if len(jids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var left atomic.Int32
	eachAtMost(len(jids), 16, func(i int) {
		p := c.p.job(jids[i])
		_, err := retry(ctx, func() (struct{}, error) { return struct{}{}, c.conn.Delete(p, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNotEmpty) {
			left.Add(1)
		}
	})
	if n := left.Load(); n > 0 {
		c.log.WarnContext(ctx, "reserved job ids not deleted; fsck removes them", "jobs", n, "first", jids[0])
	}
}

func (bc *BatchClaim) jobOps(jid string, j NewJob) []any {
	c := bc.c
	conf := j.Configuration
	conf.BatchId = bc.ID()
	if j.WorkRoot != "" {
		conf.WorkingDir = filepath.Join(j.WorkRoot, bc.ID(), jid)
	}
	status := &v1.JobStatus{Status: Pending, LastModified: nowStamp(), Traceparent: conf.GetTraceparent()}
	recordChange(nil, status, c.worker, time.Now())
	ops := []any{
		c.createOp(c.p.jobNode(jid, nodeBid), []byte(bc.ID()), 0),
		c.createOp(c.p.jobNode(jid, nodePriority), encodeInt(int64(j.Priority)), 0),
		c.createOp(c.p.jobNode(jid, nodeSpaceNeeded), encodeInt(j.SpaceNeeded), 0),
		c.createOp(c.p.jobNode(jid, nodeConfig), encodeJobConfiguration(jid, conf), 0),
	}
	if j.Identifiers != nil {
		ops = append(ops, c.createOp(c.p.jobNode(jid, nodeIdentifiers), encodeIdentifiers(j.Identifiers), 0))
	}
	if j.Metadata != nil {
		ops = append(ops, c.createOp(c.p.jobNode(jid, nodeMetadata), encodeMetadata(j.Metadata), 0))
	}
	if j.Manifest != nil {
		ops = append(ops, c.createOp(c.p.jobNode(jid, nodeManifest), encodeManifest(j.Manifest), 0))
	}
	return append(ops,
		c.createOp(c.p.jobStatus(jid), encodeJobStatus(status), 0),
		c.createOp(c.p.jobEntry(Pending, j.Priority, jid), nil, 0),
		c.createOp(c.p.batchRef(bc.ID(), folderProcessing, jid), nil, 0),
	)
}

// SpawnedJob is a job a batch has already: its id and configuration.
type SpawnedJob struct {
	ID            string
	Configuration *v1.JobConfiguration
}

// SpawnedEntries maps batch_entry → job for the jobs a batch already has, so
// that a batcher finishing a half-spawned batch creates only the rest. Only
// the holder of the batch's claim creates its jobs, each with its batch
// reference in one operation fenced by the claim's status version (which
// ClaimBatch moves), so no job of an earlier holder appears after this
// reads: a job exists with its reference, or not at all.
func (bc *BatchClaim) SpawnedEntries(ctx context.Context) (map[int32]SpawnedJob, error) {
	refs, err := bc.c.BatchJobIDs(ctx, bc.ID())
	if err != nil {
		return nil, err
	}
	var jids []string
	for _, f := range batchFolders {
		jids = append(jids, refs[f]...)
	}
	ps := make([]string, len(jids))
	for i, jid := range jids {
		ps[i] = bc.c.p.jobNode(jid, nodeConfig)
	}
	datas, err := bc.c.getMany(ctx, ps)
	if err != nil {
		return nil, err
	}
	out := map[int32]SpawnedJob{}
	for i, d := range datas {
		if d == nil {
			continue
		}
		conf, err := decodeConfiguration(ps[i], d)
		if err != nil {
			return nil, err
		}
		out[conf.GetBatchEntry()] = SpawnedJob{ID: jids[i], Configuration: conf}
	}
	return out, nil
}

// listBatchIDs lists every bid, oldest first.
func (c *Client) listBatchIDs(ctx context.Context) ([]string, error) {
	names, _, err := c.children(ctx, c.p.batches())
	if err != nil {
		return nil, fmt.Errorf("listing batches: %w", err)
	}
	out := names[:0]
	for _, n := range names {
		if ValidBatchID(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// updateReport is the admin action Failed → UpdateReporting: troubleshooting
// is over, the batcher sends a second report. Every requeued job must have
// ended (none left in batch-processing), checked in the same operation.
func (c *Client) updateReport(ctx context.Context, bid string) (*v1.Batch, error) {
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	guard, live, err := c.liveGuard(ctx, bid)
	if err == nil && bc.from == BatchFailed && live > 0 {
		err = fmt.Errorf("batch %s still has %d live job(s) (requeued, not ended): update-report once they have completed or failed: %w",
			bid, live, ErrWrongState)
	}
	if err == nil {
		err = bc.commit(ctx, BatchChange{To: BatchUpdateReporting, Message: "update report requested by an operator"}, guard)
	}
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return bc.Batch, nil
}

// releaseBatch is the admin action Held → Pending. The caller checks that
// the batch's collection is no longer held.
func (c *Client) releaseBatch(ctx context.Context, bid string) (*v1.Batch, error) {
	return c.moveBatch(ctx, bid, BatchPending, "released by an operator")
}

func (c *Client) moveBatch(ctx context.Context, bid string, to BatchState, msg string) (*v1.Batch, error) {
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	if err := bc.Commit(ctx, BatchChange{To: to, Message: msg}); err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return bc.Batch, nil
}

// deleteChunk is how many deletions go into one multi when removing trees.
const deleteChunk = 500

// deleteJobTrees removes jobs entirely (nodes, state entries, batch refs are
// left to the caller). A job someone holds stops the deletion (ErrLocked).
func (c *Client) deleteJobTrees(ctx context.Context, jids []string) ([]*v1.Job, error) {
	var ops []any
	var jobs []*v1.Job
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := c.multi(ctx, ops...)
		ops = ops[:0]
		if errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("a job changed while being deleted (%v): %w", err, ErrLocked)
		}
		return err
	}
	for _, jid := range jids {
		children, _, err := c.children(ctx, c.p.job(jid))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(children, nodeLock) {
			return nil, fmt.Errorf("job %s: %w", jid, ErrLocked)
		}
		job := &v1.Job{Id: jid}
		// The status is deleted at the version read: a job that moves
		// meanwhile stops the deletion rather than leave its new entry
		// behind.
		statusVersion := int32(-1)
		if data, st, err := c.get(ctx, c.p.jobStatus(jid)); err == nil {
			job.Status, _ = decodeJobStatus("", data)
			statusVersion = st.Version
		}
		c.readJobData(ctx, job, jobDataNodes, nil)
		jobs = append(jobs, job)
		if job.Status != nil {
			if e, err := c.findEntry(ctx, job.Status.GetStatus(), jid); err == nil {
				ops = append(ops, deleteOp(c.p.jobStateDir(job.Status.GetStatus())+"/"+e.name, -1))
			}
		} else {
			// An unreadable status cannot say where the entry is: a
			// scan finds it, or it would outlive its job.
			found, in, err := c.scanEntries(ctx, jid)
			if err != nil {
				return nil, err
			}
			for i, e := range found {
				ops = append(ops, deleteOp(c.p.jobStateDir(in[i])+"/"+e.name, -1))
			}
		}
		for _, n := range children {
			v := int32(-1)
			if n == nodeStatus {
				v = statusVersion
			}
			ops = append(ops, deleteOp(c.p.jobNode(jid, n), v))
		}
		ops = append(ops, deleteOp(c.p.job(jid), -1))
		if len(ops) >= deleteChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	return jobs, flush()
}

// deleteBatchTree removes a batch's own nodes (jobs must be gone already).
func (c *Client) deleteBatchTree(ctx context.Context, bid string, uuid string) error {
	var ops []any
	refs, err := c.BatchJobIDs(ctx, bid)
	if err != nil {
		return err
	}
	for _, f := range batchFolders {
		for _, jid := range refs[f] {
			ops = append(ops, deleteOp(c.p.batchRef(bid, f, jid), -1))
			if len(ops) >= deleteChunk {
				if _, err := c.multi(ctx, ops...); err != nil {
					return fmt.Errorf("deleting batch %s references: %w", bid, err)
				}
				ops = ops[:0]
			}
		}
	}
	children, _, err := c.children(ctx, c.p.batch(bid))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range children {
		if n == nodeStates {
			for _, f := range batchFolders {
				if ok, _, _ := c.exists(ctx, c.p.batchFolder(bid, f)); ok {
					ops = append(ops, deleteOp(c.p.batchFolder(bid, f), -1))
				}
			}
		}
		if n != nodeStatus && n != nodeLock {
			ops = append(ops, deleteOp(c.p.batchNode(bid, n), -1))
		}
	}
	if uuid != "" {
		if data, _, err := c.get(ctx, c.p.batchUUID(uuid)); err == nil && string(data) == bid {
			ops = append(ops, deleteOp(c.p.batchUUID(uuid), -1))
		}
	}
	// Lock and status go last: until then the batch is visibly Deleted (or
	// Completed) and a crash leaves something that cleanup or fsck finishes.
	for _, n := range []string{nodeLock, nodeStatus} {
		if slices.Contains(children, n) {
			ops = append(ops, deleteOp(c.p.batchNode(bid, n), -1))
		}
	}
	ops = append(ops, deleteOp(c.p.batch(bid), -1))
	if _, err := c.multi(ctx, ops...); err != nil {
		return fmt.Errorf("deleting batch %s: %w", bid, err)
	}
	return nil
}

// deleteBatch removes a held or failed batch with all its jobs. It refuses a
// failed batch that still has a live (requeued) job. It returns the deleted
// jobs so that the caller can remove their working directories.
func (c *Client) deleteBatch(ctx context.Context, bid string) ([]*v1.Job, error) {
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	if bc.from != BatchHeld && bc.from != BatchFailed && bc.from != BatchDeleted {
		bc.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batch %s is %s, not Held or Failed: %w", bid, BatchStateName(bc.from), ErrWrongState)
	}
	// The folders are listed one after another: a job requeued meanwhile
	// could be missed in both. Its move writes batch-processing, whose
	// version, read first, guards the commit to Deleted; once Deleted, no
	// job of the batch can be requeued (RequeueJob checks the batch's state
	// in its own commit).
	guard, _, err := c.liveGuard(ctx, bid)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	refs, err := c.BatchJobIDs(ctx, bid)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	if live := refs[folderProcessing]; len(live) > 0 {
		bc.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batch %s still has %d live job(s) (%s): %w", bid, len(live), strings.Join(first(live, 5), ", "), ErrWrongState)
	}
	if bc.from != BatchDeleted {
		if err := bc.commit(ctx, BatchChange{To: BatchDeleted, Message: "deleted by an operator", KeepLock: true}, guard); err != nil {
			bc.Release(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return c.removeClaimedBatch(ctx, bc, refs)
}

// removeClaimedBatch deletes the jobs that refs lists, then the batch's own
// tree, under the claim bc. When either fails the claim is released: what
// is left is still a batch (Deleted or Completed), which a later try,
// cleanup or fsck finishes.
func (c *Client) removeClaimedBatch(ctx context.Context, bc *BatchClaim, refs map[string][]string) ([]*v1.Job, error) {
	var jids []string
	for _, f := range batchFolders {
		jids = append(jids, refs[f]...)
	}
	jobs, err := c.deleteJobTrees(ctx, jids)
	if err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := c.deleteBatchTree(ctx, bc.ID(), bc.Batch.GetSubmission().GetBatchId()); err != nil {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	bc.settle() // the batch's tree went with its lock
	return jobs, nil
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
