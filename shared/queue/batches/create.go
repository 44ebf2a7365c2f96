package batches

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
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

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
// the bid, fenced by the claim), then written. A write whose answer is lost
// is checked and sent again; when creation fails, the ids reserved and not
// written are deleted before it returns. Ids a batcher reserved and never
// wrote because it stopped in between (a crash) are removed by whoever
// ends the batch's spawning (removeStrays), so no job node is left without
// a status once the batch is spawned.
func (bc *BatchClaim) CreateJobs(ctx context.Context, jobs []NewJob) (ids []string, err error) {
	if err := bc.hold.Check(); err != nil {
		return nil, err
	}
	if bc.from != queue.BatchProcessing || !bc.Spawning {
		return nil, fmt.Errorf("batch %s: %w: jobs are created only while spawning a Processing batch", bc.ID(), queue.ErrWrongState)
	}
	for i := range jobs {
		if jobs[i].Configuration == nil {
			return nil, fmt.Errorf("%w: job %d has no configuration", queue.ErrInvalid, i)
		}
		if err := queue.ValidPriority(&jobs[i].Priority); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			// What it reserved may not all be deleted (or known, after a
			// lost answer): the end of the spawning looks.
			bc.strays = true
		}
	}()
	ids, err = bc.reserveJobIDs(ctx, len(jobs))
	if err != nil {
		return nil, fmt.Errorf("allocating job ids for batch %s: %w", bc.ID(), err)
	}
	// gofail: var batcherJobIDsReserved struct{}

	// Then write the jobs, grouped into multis of bounded size, a few in flight.
	type group struct {
		ops  []session.Op
		jids []string
	}
	var groups []group
	var cur group
	size := 0
	for i, j := range jobs {
		ops := bc.jobOps(ids[i], j)
		n := 0
		for _, op := range ops {
			n += op.Size()
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
	session.EachAtMost(len(groups), jobMultisInFlight, func(gi int) {
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
func (bc *BatchClaim) writeJobs(ctx context.Context, first string, ops []session.Op) error {
	status := bc.c.p.Job(first).Status()
	txn := bc.hold.Txn(nil).Then(ops...)
	var lost error
	for attempt := 0; ; attempt++ {
		err := bc.commit(ctx, txn)
		if err == nil {
			// gofail: var batcherJobsWritten struct{}
			return nil
		}
		// A resend refused because a node exists: the lost one was applied.
		resentOnto := lost != nil && errors.Is(err, zk.ErrNodeExists)
		if !resentOnto && (!session.Retryable(err) || attempt >= jobResends) {
			return err
		}
		if session.Retryable(err) {
			lost = err
		}
		written, _, xerr := bc.c.z.Exists(ctx, status)
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
	session.EachAtMost(chunks, idMultisInFlight, func(ci int) {
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
//
// The multi is fenced by the claim, as every write of a batch's jobs is: a
// batcher that lost the batch reserves nothing more, so the ids its next
// holder looks through when it ends the spawning (removeStrays) are all
// there is.
func (bc *BatchClaim) reserveSome(ctx context.Context, n int) ([]string, error) {
	c := bc.c
	mark := queue.EncodeJobReservation(bc.ID(), strconv.FormatUint(rand.Uint64(), 36))
	// Sent alone, not grouped: it is a large request already.
	txn := bc.hold.Txn(nil).Alone()
	for range n {
		txn.Then(session.Create(opJobID, c.p.JobSeq(), mark, zk.FlagSequence))
	}
	for attempt := 0; ; attempt++ {
		_, before, err := c.z.Exists(ctx, c.p.Jobs())
		if err != nil {
			return nil, err
		}
		err = txn.Commit(ctx)
		if err == nil {
			ids := make([]string, 0, n)
			for _, p := range txn.Created(opJobID) {
				ids = append(ids, path.Base(p))
			}
			return ids, nil
		}
		if !session.Retryable(err) {
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
// that, what was left is removed when the batch's spawning ends
// (removeStrays).
const maxMarkedScan = 20000

// findMarked returns the job nodes holding mark whose sequence number is
// from on: a sequential create takes its parent's child version as its
// number, so nodes made after /jobs was read at version from are numbered
// from there to its present child version.
func (c *Client) findMarked(ctx context.Context, from int32, mark []byte) ([]string, error) {
	jobs := c.p.Jobs()
	if err := c.z.Sync(ctx, jobs); err != nil {
		return nil, fmt.Errorf("syncing %s: %w", jobs, err)
	}
	_, now, err := c.z.Exists(ctx, jobs)
	if err != nil {
		return nil, err
	}
	if int(now.Cversion)-int(from) > maxMarkedScan {
		return nil, fmt.Errorf("%d jobs made or deleted meanwhile: too many to look through", now.Cversion-from)
	}
	var ps []string
	for n := from; n < now.Cversion; n++ {
		ps = append(ps, fmt.Sprintf("%s%010d", c.p.JobSeq(), n))
	}
	read, err := c.z.Read(ctx, ps)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, r := range read {
		if r.Stat != nil && bytes.Equal(r.Data, mark) {
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
// is removed when the batch's spawning ends (removeStrays).
func (c *Client) dropReservedJobIDs(ctx context.Context, jids []string) {
	if len(jids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var left atomic.Int32
	session.EachAtMost(len(jids), 16, func(i int) {
		p := c.p.Job(jids[i]).Dir()
		err := c.z.Delete(ctx, p, -1)
		if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNotEmpty) {
			left.Add(1)
		}
	})
	if n := left.Load(); n > 0 {
		c.log.WarnContext(ctx, "reserved job ids not deleted; the end of the batch's spawning removes them", "jobs", n, "first", jids[0])
	}
}

func (bc *BatchClaim) jobOps(jid string, j NewJob) []session.Op {
	c := bc.c
	conf := j.Configuration
	conf.BatchId = bc.ID()
	if j.WorkRoot != "" {
		conf.WorkingDir = filepath.Join(j.WorkRoot, bc.ID(), jid)
	}
	status := &v1.JobStatus{Status: queue.Pending, LastModified: queue.NowStamp(), Traceparent: conf.GetTraceparent()}
	queue.RecordChange(nil, status, c.s.Worker(), time.Now())
	node := func(name string, data []byte) session.Op {
		return session.Create(opJob, c.p.Job(jid).Node(name), data, 0)
	}
	ops := []session.Op{
		node(queue.NodeBid, []byte(bc.ID())),
		node(queue.NodePriority, queue.EncodeInt(int64(j.Priority))),
		node(queue.NodeSpaceNeeded, queue.EncodeInt(j.SpaceNeeded)),
		node(queue.NodeConfig, queue.EncodeJobConfiguration(jid, conf)),
	}
	if j.Identifiers != nil {
		ops = append(ops, node(queue.NodeIdentifiers, queue.EncodeIdentifiers(j.Identifiers)))
	}
	if j.Metadata != nil {
		ops = append(ops, node(queue.NodeMetadata, queue.EncodeMetadata(j.Metadata)))
	}
	if j.Manifest != nil {
		ops = append(ops, node(queue.NodeManifest, queue.EncodeManifest(j.Manifest)))
	}
	return append(ops,
		node(queue.NodeStatus, queue.EncodeJobStatus(status)),
		session.Create(opJob, c.p.Entry(queue.Pending, j.Priority, jid), nil, 0),
		session.Create(opJob, c.p.Batch(bc.ID()).Ref(queue.FolderProcessing, jid), nil, 0),
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
	refs, err := bc.c.r.BatchJobIDs(ctx, bc.ID())
	if err != nil {
		return nil, err
	}
	var jids []string
	for _, f := range queue.BatchRefFolders() {
		jids = append(jids, refs[f]...)
	}
	ps := make([]string, len(jids))
	for i, jid := range jids {
		ps[i] = bc.c.p.Job(jid).Node(queue.NodeConfig)
	}
	datas, err := bc.c.z.ReadData(ctx, ps)
	if err != nil {
		return nil, err
	}
	out := map[int32]SpawnedJob{}
	for i, d := range datas {
		if d == nil {
			continue
		}
		conf, err := queue.DecodeConfiguration(ps[i], d)
		if err != nil {
			return nil, err
		}
		out[conf.GetBatchEntry()] = SpawnedJob{ID: jids[i], Configuration: conf}
	}
	return out, nil
}

// idsPerMulti is how many job ids one multi allocates, idMultisInFlight
// how many such multis are sent at once. Larger multis of sequential creates
// exhaust a server's memory: a 58,000-job batch ran a 512 MiB server out of
// heap at 500 per multi (with 4, or 64, in flight); at 100 it passes.
const (
	idsPerMulti      = 100
	idMultisInFlight = 4
)

// strayPage is how many sequence numbers removeStrays reads at once.
const strayPage = 1000

// removeStrays deletes the job ids reserved for the batch that no job was
// written into, before its spawning ends: a batcher that stopped between
// reserving ids and writing its jobs (a crash, a lost session) left them,
// and nothing else would ever write them. It looks only when there may be
// some (bc.strays): the batch was claimed half spawned, or a creation of
// its jobs failed. The ids are found among the job nodes numbered from
// where the batch's spawning began (bc.spawnFrom; all of /jobs for a batch
// whose spawning began without that record), by the batch their data
// names and the children they lack. Only this claim writes jobs of the
// batch, and every write is fenced by it, so none is on its way into an id
// found; each is deleted under the claim's fences too.
func (bc *BatchClaim) removeStrays(ctx context.Context) error {
	if !bc.strays {
		return nil
	}
	c := bc.c
	jobs := c.p.Jobs()
	if err := c.z.Sync(ctx, jobs); err != nil {
		return fmt.Errorf("batch %s: syncing %s: %w", bc.ID(), jobs, err)
	}
	// The job nodes to look at, a page at a time: from where the
	// spawning began to the present, or all of them.
	var names []string
	from, to := int64(0), int64(0)
	if bc.spawnFrom < 0 {
		all, _, err := c.z.Children(ctx, jobs)
		if err != nil {
			return fmt.Errorf("batch %s: listing %s: %w", bc.ID(), jobs, err)
		}
		names = slices.DeleteFunc(all, func(n string) bool { return !queue.ValidJobID(n) })
		to = int64(len(names))
	} else {
		_, now, err := c.z.Exists(ctx, jobs)
		if err != nil {
			return fmt.Errorf("batch %s: reading %s: %w", bc.ID(), jobs, err)
		}
		if now != nil {
			from, to = int64(bc.spawnFrom), int64(now.Cversion)
		}
	}
	var strays []string
	for start := from; start < to; start += strayPage {
		var page []string
		for n := start; n < min(start+strayPage, to); n++ {
			if names != nil {
				page = append(page, names[n])
			} else {
				page = append(page, path.Base(fmt.Sprintf("%s%010d", c.p.JobSeq(), n)))
			}
		}
		ps := make([]string, len(page))
		for i, n := range page {
			ps[i] = c.p.Job(n).Dir()
		}
		read, err := c.z.Read(ctx, ps)
		if err != nil {
			return fmt.Errorf("batch %s: reading the job ids reserved for it: %w", bc.ID(), err)
		}
		for i, r := range read {
			if r.Stat == nil || r.Stat.NumChildren > 0 {
				continue
			}
			if bid, ok := queue.JobReservationBatch(r.Data); ok && bid == bc.ID() {
				strays = append(strays, page[i])
			}
		}
	}
	errs := make([]error, len(strays))
	session.EachAtMost(len(strays), 16, func(i int) {
		err := bc.commit(ctx, bc.hold.Txn(nil).Then(session.Delete(opJobID, c.p.Job(strays[i]).Dir(), -1)))
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs[i] = err
		}
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("batch %s: removing the job ids reserved for it and never written: %w", bc.ID(), err)
	}
	bc.strays = false
	if len(strays) > 0 {
		bc.StraysRemoved = append(bc.StraysRemoved, strays...)
		c.log.InfoContext(ctx, "job ids reserved and never written removed", "batch_id", bc.ID(), "jobs", len(strays),
			"first", strays[0], "last", strays[len(strays)-1],
			"why", "a batcher stopped between reserving them and writing the batch's jobs; the batch's rows without a job are created anew")
	}
	return nil
}
