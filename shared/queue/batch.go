package queue

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// Batch nodes.
const (
	nodeSubmission   = "submission"
	nodeStatusReport = "status-report"
	nodeStates       = "states"
	nodeSpawning     = "spawning"
)

// MaxUUIDLength bounds a submitter's batch id (it becomes a node name).
const MaxUUIDLength = 128

func validUUID(id string) error {
	if id == "" || len(id) > MaxUUIDLength || id == "." || id == ".." || id == "zookeeper" {
		return fmt.Errorf("%w: batch id %q must be 1..%d characters and not . or ..", ErrInvalid, truncate(id, 40), MaxUUIDLength)
	}
	for _, r := range id {
		if r == '/' || unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%w: batch id %q must not contain '/', spaces or control characters", ErrInvalid, truncate(id, 40))
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
	_, err = c.multi(ctx, c.createOp(c.p.batchLock(bid), nil, zk.FlagEphemeral), setOp(statusPath, data, stat.Version))
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
	bc := &BatchClaim{c: c, from: st.GetStatus(), version: stat.Version + 1, sess: sess, statusData: data}
	bc.ctx, bc.cancel = context.WithCancelCause(sess.ctx)
	release := func(err error) (*BatchClaim, error) {
		bc.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	ps := []string{c.p.batchNode(bid, nodeSubmission), c.p.batchNode(bid, nodeStatusReport)}
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
	return bc, nil
}

// BatchChange is a batch transition: the new state, a message for the
// status, optionally the report to store, and whether to keep the lock
// (Reporting and the start of Processing keep it: work follows). A report
// too large for its node is stored trimmed, with the totals of its lists
// (see fitStatusReport); give it the batch's whole lists.
type BatchChange struct {
	To       BatchState
	Message  string
	Report   *v1.StatusReport
	KeepLock bool
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
		bc.markDone()
		return fmt.Errorf("batch %s: %w (%v)", bc.ID(), ErrFenced, err)
	}
	return fmt.Errorf("batch %s: %w", bc.ID(), err)
}

// Commit moves the batch to ch.To in one fenced operation. Pending →
// Processing also creates the batch's states folders (the "taken" marker)
// and the spawning marker, and keeps the lock for job creation.
func (bc *BatchClaim) Commit(ctx context.Context, ch BatchChange) error {
	if err := checkBatchMove(bc.ID(), bc.from, ch.To); err != nil {
		return err
	}
	if err := bc.finish(); err != nil {
		return err
	}
	next := &v1.BatchStatus{Status: ch.To, LastModified: nowStamp(), Message: ch.Message}
	statusData := withKeysOf(bc.statusData, encodeBatchStatus(next), batchStatusKeys)
	statusOp := setOp(bc.c.p.batchStatus(bc.ID()), statusData, bc.version)
	var ops []any
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
		return err
	}
	bc.version++
	bc.from = ch.To
	bc.Batch.Status = next
	bc.statusData = statusData
	bc.Spawning = ch.To == BatchProcessing
	if report != nil {
		bc.Batch.StatusReport = report
		bc.reportData = reportData
	}
	if !keep {
		bc.Batch.Locked = false
		bc.markDone()
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
	bc.markDone()
	return nil
}

// Release gives the batch back untouched.
func (bc *BatchClaim) Release(ctx context.Context) error {
	if err := bc.finish(); err != nil {
		bc.markDone()
		return err
	}
	defer bc.markDone()
	_, err := bc.c.multi(ctx, checkOp(bc.c.p.batchStatus(bc.ID()), bc.version), deleteOp(bc.c.p.batchLock(bc.ID()), -1))
	if err != nil {
		return fmt.Errorf("releasing batch %s: %w (%v)", bc.ID(), ErrFenced, err)
	}
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
	defer bc.markDone()
	next := &v1.BatchStatus{Status: bc.from, LastModified: nowStamp(), Message: msg}
	statusOp := setOp(bc.c.p.batchStatus(bc.ID()), withKeysOf(bc.statusData, encodeBatchStatus(next), batchStatusKeys), bc.version)
	if err := bc.fencedMulti(ctx, statusOp, deleteOp(bc.c.p.batchLock(bc.ID()), -1)); err != nil {
		return err
	}
	bc.version++
	bc.Batch.Status = next
	bc.Batch.Locked = false
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

// CreateJobs creates jobs of a Processing batch whose jobs are being
// spawned. Each job lands in its three places (/jobs/JID, its pending entry,
// its batch reference) in one atomic operation fenced by this claim, so a
// batcher that lost the batch creates nothing more. Jobs are created in
// order of the slice; it returns their ids.
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
	// Allocate ids first, many sequential creates to a multi, a few multis
	// in flight (each holds server memory until answered): a crash here
	// leaves empty job nodes that no reader mistakes for jobs (no status)
	// and that fsck removes.
	ids := make([]string, len(jobs))
	chunks := (len(jobs) + idsPerMulti - 1) / idsPerMulti
	errs := make([]error, chunks)
	eachAtMost(chunks, idMultisInFlight, func(ci int) {
		lo, hi := ci*idsPerMulti, min((ci+1)*idsPerMulti, len(jobs))
		ops := make([]any, hi-lo)
		for i := range ops {
			ops[i] = bc.c.createOp(bc.c.p.jobSeq(), nil, zk.FlagSequence)
		}
		// Sent alone, not grouped: it is a large request already.
		res, err := call(ctx, func() ([]zk.MultiResponse, error) { return bc.c.conn.Multi(ops...) })
		err = multiError(res, err)
		if err != nil {
			errs[ci] = err
			return
		}
		for i, r := range res {
			ids[lo+i] = path.Base(r.String)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("allocating job ids for batch %s: %w", bc.ID(), err)
	}
	// Allocation ran concurrently; sorted ids keep the jobs' age order equal
	// to the order of the slice.
	slices.Sort(ids)
	// Then write the jobs, grouped into multis of bounded size, several in flight.
	var groups [][]any
	var cur []any
	size := 0
	for i, j := range jobs {
		ops := bc.jobOps(ids[i], j)
		n := 0
		for _, op := range ops {
			if cr, ok := op.(*zk.CreateRequest); ok {
				n += len(cr.Data) + len(cr.Path) + 16
			}
		}
		if len(cur) > 0 && (size+n > maxMultiBytes || len(cur) > 400) {
			groups = append(groups, cur)
			cur, size = nil, 0
		}
		cur = append(cur, ops...)
		size += n
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	gerrs := make([]error, len(groups))
	const inflight = 64
	eachAtMost(len(groups), inflight, func(gi int) {
		gerrs[gi] = bc.fencedMulti(ctx, checkOp(bc.c.p.batchStatus(bc.ID()), bc.version), groups[gi]...)
	})
	if err := errors.Join(gerrs...); err != nil {
		return nil, fmt.Errorf("creating jobs of batch %s: %w", bc.ID(), err)
	}
	return ids, nil
}

func (bc *BatchClaim) jobOps(jid string, j NewJob) []any {
	c := bc.c
	conf := j.Configuration
	conf.BatchId = bc.ID()
	if j.WorkRoot != "" {
		conf.WorkingDir = filepath.Join(j.WorkRoot, bc.ID(), jid)
	}
	status := &v1.JobStatus{Status: Pending, LastModified: nowStamp(), Traceparent: conf.GetTraceparent()}
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

// SpawnedEntries maps batch_entry → jid for the jobs a batch already has, so
// that a batcher finishing a half-spawned batch creates only the rest.
func (bc *BatchClaim) SpawnedEntries(ctx context.Context) (map[int32]string, error) {
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
	out := map[int32]string{}
	for i, d := range datas {
		if d == nil {
			continue
		}
		conf, err := decodeConfiguration(ps[i], d)
		if err != nil {
			return nil, err
		}
		out[conf.GetBatchEntry()] = jids[i]
	}
	return out, nil
}

// ListBatchIDs lists every bid, oldest first.
func (c *Client) ListBatchIDs(ctx context.Context) ([]string, error) {
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

// UpdateReport is the admin action Failed → UpdateReporting: troubleshooting
// is over, the batcher sends a second report.
func (c *Client) UpdateReport(ctx context.Context, bid string) (*v1.Batch, error) {
	return c.moveBatch(ctx, bid, BatchUpdateReporting, "update report requested by an operator")
}

// ReleaseBatch is the admin action Held → Pending. The caller checks that
// the batch's collection is no longer held.
func (c *Client) ReleaseBatch(ctx context.Context, bid string) (*v1.Batch, error) {
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
		if errors.Is(err, zk.ErrNotEmpty) {
			return fmt.Errorf("a job changed while being deleted: %w", ErrLocked)
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
		if data, _, err := c.get(ctx, c.p.jobStatus(jid)); err == nil {
			job.Status, _ = decodeJobStatus("", data)
		}
		c.readJobData(ctx, job, jobDataNodes, nil)
		jobs = append(jobs, job)
		if job.Status != nil {
			if e, err := c.findEntry(ctx, job.Status.GetStatus(), jid); err == nil {
				ops = append(ops, deleteOp(c.p.jobStateDir(job.Status.GetStatus())+"/"+e.name, -1))
			}
		}
		for _, n := range children {
			ops = append(ops, deleteOp(c.p.jobNode(jid, n), -1))
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

// DeleteBatch removes a held or failed batch with all its jobs. It refuses a
// failed batch that still has a live (requeued) job. It returns the deleted
// jobs so that the caller can remove their working directories.
func (c *Client) DeleteBatch(ctx context.Context, bid string) ([]*v1.Job, error) {
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		return nil, err
	}
	if bc.from != BatchHeld && bc.from != BatchFailed && bc.from != BatchDeleted {
		bc.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("batch %s is %s, not Held or Failed: %w", bid, BatchStateName(bc.from), ErrWrongState)
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
		if err := bc.Commit(ctx, BatchChange{To: BatchDeleted, Message: "deleted by an operator", KeepLock: true}); err != nil {
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
	bc.markDone()
	return jobs, nil
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
