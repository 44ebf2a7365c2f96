package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
	"google.golang.org/protobuf/proto"
)

// Job data nodes, in the order they are read.
const (
	nodeBid         = "bid"
	nodePriority    = "priority"
	nodeSpaceNeeded = "space_needed"
	nodeConfig      = "configuration"
	nodeIdentifiers = "identifiers"
	nodeMetadata    = "metadata"
	nodeStore       = "store"
	nodeInventory   = "inventory"
	nodeManifest    = "manifest" // ingestq's own
	nodeStatus      = "status"
	nodeLock        = "lock"
)

var jobDataNodes = []string{nodeBid, nodePriority, nodeSpaceNeeded, nodeConfig, nodeIdentifiers,
	nodeMetadata, nodeStore, nodeInventory}

// Parts says which of a job's data nodes a consumer reads when it claims a
// job. Reading only what a stage needs keeps a transition at two reads and
// two writes; the rest can still be written (presence is checked then).
type Parts uint16

// The parts of a job. The status is always read; the bid is read when a
// commit needs it.
const (
	PartConfiguration Parts = 1 << iota
	PartIdentifiers
	PartMetadata
	PartStore
	PartInventory
	PartSpaceNeeded
	PartPriority
	PartBid
	// PartManifest reads the job's file list with its claim, in the same
	// request; LoadManifest then returns it without a read of its own.
	// Only a consumer's claims honour it.
	PartManifest
	// PartsAll is every data node but the manifest (read with LoadManifest).
	PartsAll = PartConfiguration | PartIdentifiers | PartMetadata | PartStore | PartInventory | PartSpaceNeeded | PartPriority | PartBid
	// PartsStatusOnly reads nothing but the status.
	PartsStatusOnly Parts = 1 << 15
)

func (ps Parts) nodes() []string {
	if ps == 0 {
		ps = PartsAll
	}
	var out []string
	for _, x := range []struct {
		p    Parts
		node string
	}{{PartBid, nodeBid}, {PartPriority, nodePriority}, {PartSpaceNeeded, nodeSpaceNeeded}, {PartConfiguration, nodeConfig},
		{PartIdentifiers, nodeIdentifiers}, {PartMetadata, nodeMetadata}, {PartStore, nodeStore}, {PartInventory, nodeInventory},
		{PartManifest, nodeManifest}} {
		if ps&x.p != 0 {
			out = append(out, x.node)
		}
	}
	return out
}

// DefaultPriority is a job's priority when the caller gives none.
const DefaultPriority = 5

// MaxPriority is the largest priority ingestq writes. Larger numbers are read
// (and sort after 99), but the Merritt library's reader assumes two digits,
// so ingestq never writes more.
const MaxPriority = 99

// jobRead is what reading a job's data nodes found.
type jobRead struct {
	present map[string]bool // the nodes that exist
	corrupt error           // the first unreadable node
	// badPriority is why the priority node is unreadable: the job reads
	// as DefaultPriority (its state entry orders it anyway), and the next
	// move through a claim writes it anew.
	badPriority error
	// unusable is why a configuration that reads names a value ingestq
	// cannot use (an unknown payload type, say): operators see the job
	// with the rest of it; a stage's claim fails it with this.
	unusable error
}

// err is why a claim cannot work on the job: an unreadable node, else an
// unusable configuration.
func (r jobRead) err() error {
	if r.corrupt != nil {
		return r.corrupt
	}
	return r.unusable
}

// readJobData fills job from the given data nodes. raw, when not nil, gets
// the data of each node read whose unknown keys a rewrite carries forward.
func (c *Client) readJobData(ctx context.Context, job *v1.Job, nodes []string, raw map[string][]byte) (jobRead, error) {
	ps := make([]string, len(nodes))
	for i, n := range nodes {
		ps[i] = c.p.jobNode(job.Id, n)
	}
	datas, err := c.getMany(ctx, ps)
	if err != nil {
		return jobRead{}, err
	}
	return c.decodeJobData(job, nodes, datas, raw), nil
}

// decodeJobData fills job from the data read of its nodes (nil: missing).
// raw, when not nil, gets the data of each node that exists and whose
// unknown keys a rewrite carries forward.
func (c *Client) decodeJobData(job *v1.Job, nodes []string, datas [][]byte, raw map[string][]byte) jobRead {
	r := jobRead{present: map[string]bool{}}
	note := func(e error) {
		if r.corrupt == nil {
			r.corrupt = e
		}
	}
	for i, n := range nodes {
		d := datas[i]
		if d == nil {
			continue
		}
		r.present[n] = true
		if raw != nil && carriedKeys[n] != nil {
			raw[n] = d
		}
		p := c.p.jobNode(job.Id, n)
		switch n {
		case nodeBid:
			job.Bid = string(d)
		case nodePriority:
			// Read leniently: a priority another writer garbled must not
			// make the whole job unreadable (to operators, to the stage
			// that would fail it).
			v, e := decodeInt(p, d)
			if e != nil || v < 0 || v > math.MaxInt32 {
				v = DefaultPriority
				if e == nil {
					e = &CorruptError{Path: p, Err: fmt.Errorf("priority %s is out of range", d)}
				}
				r.badPriority = e
			}
			job.Priority = int32(v)
		case nodeSpaceNeeded:
			v, e := decodeInt(p, d)
			note(e)
			job.SpaceNeeded = v
		case nodeConfig:
			v, e := decodeConfiguration(p, d)
			if e != nil && v != nil {
				r.unusable = e
			} else {
				note(e)
			}
			job.Configuration = v
		case nodeIdentifiers:
			v, e := decodeIdentifiers(p, d)
			note(e)
			job.Identifiers = v
		case nodeMetadata:
			v, e := decodeMetadata(p, d)
			note(e)
			job.Metadata = v
		case nodeStore:
			v, e := decodeStore(p, d)
			note(e)
			job.Store = v
		case nodeInventory:
			v, e := decodeInventory(p, d)
			note(e)
			job.Inventory = v
		}
		// The manifest is the claim's to decode (keepManifest): a broken
		// file list is for the stage to report, not an unreadable job.
	}
	if slices.Contains(nodes, nodeBid) && job.Bid == "" {
		note(&CorruptError{Path: c.p.jobNode(job.Id, nodeBid), Err: errors.New("missing")})
	}
	return r
}

// GetJob reads a job and its status (not its manifest).
func (c *Client) GetJob(ctx context.Context, jid string) (*v1.Job, error) {
	st, err := c.JobStatus(ctx, jid) // checks the id too
	if err != nil {
		return nil, err
	}
	job := &v1.Job{Id: jid, Status: st}
	r, err := c.readJobData(ctx, job, jobDataNodes, nil)
	if err != nil {
		return nil, err
	}
	if r.corrupt != nil {
		return nil, r.corrupt
	}
	if r.unusable != nil {
		c.log.WarnContext(ctx, "job configuration names a value ingestq cannot use: shown with the rest (a stage fails the job)",
			"job_id", jid, "error", r.unusable.Error())
	}
	if r.badPriority != nil {
		// The state entry orders the job: its priority is the one to show.
		if e, err := c.findEntry(ctx, st.GetStatus(), jid); err == nil {
			job.Priority = e.priority
		}
		c.log.WarnContext(ctx, "job priority unreadable: read as its state entry's (fsck reports it; the job's next move rewrites it)",
			"job_id", jid, "priority", job.Priority, "error", r.badPriority.Error())
	}
	locked, _, err := c.exists(ctx, c.p.jobLock(jid))
	if err != nil {
		return nil, fmt.Errorf("reading job %s lock: %w", jid, err)
	}
	job.Locked = locked
	return job, nil
}

// readStatusAndData reads a job's status and the given data nodes at once
// (one round trip); the status comes first in what it returns.
func (c *Client) readStatusAndData(ctx context.Context, jid string, nodes []string) ([]dataStat, error) {
	paths := make([]string, 0, len(nodes)+1)
	paths = append(paths, c.p.jobStatus(jid))
	for _, n := range nodes {
		paths = append(paths, c.p.jobNode(jid, n))
	}
	return c.getManyStat(ctx, paths)
}

// datas are the data of read (nil where a node is missing).
func datas(read []dataStat) [][]byte {
	out := make([][]byte, len(read))
	for i, r := range read {
		out[i] = r.data
	}
	return out
}

// GetJobParts reads a job's status and the data nodes of parts, all at
// once (not its lock or manifest): a reader that needs a few fields of many
// jobs, as a batch report does, reads only those.
func (c *Client) GetJobParts(ctx context.Context, jid string, parts Parts) (*v1.Job, error) {
	if !ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", ErrInvalid, jid)
	}
	nodes := parts.nodes()
	read, err := c.readStatusAndData(ctx, jid, nodes)
	if err != nil {
		return nil, err
	}
	if read[0].stat == nil {
		return nil, fmt.Errorf("job %s: %w", jid, ErrNotFound)
	}
	st, err := decodeJobStatus(c.p.jobStatus(jid), read[0].data)
	if err != nil {
		return nil, err
	}
	job := &v1.Job{Id: jid, Status: st}
	if err := c.decodeJobData(job, nodes, datas(read[1:]), nil).err(); err != nil {
		return nil, err
	}
	return job, nil
}

// JobStatus reads only a job's status node.
func (c *Client) JobStatus(ctx context.Context, jid string) (*v1.JobStatus, error) {
	if !ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", ErrInvalid, jid)
	}
	return getNode(ctx, c, c.p.jobStatus(jid), "job "+jid, decodeJobStatus)
}

// GetManifest reads the file list kept beside a job (nil if it has none).
func (c *Client) GetManifest(ctx context.Context, jid string) (*v1.Manifest, error) {
	p := c.p.jobNode(jid, nodeManifest)
	data, _, err := c.get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return decodeManifest(p, data)
}

// Claim is a job this client holds the lock of. Every change made through
// it is fenced: it is refused (ErrFenced) once the lock or session is lost or
// another writer has changed the job's status since the claim was taken.
type Claim struct {
	c *Client
	// Job is the job's data as read when it was claimed.
	Job *v1.Job
	// LoadErr is set when a node of the job is unreadable (another writer
	// broke it). The job can still be failed through the claim.
	LoadErr error
	// statusErr is why the status node is unreadable (an operator's claim
	// of such a job: claimJob); the claim's state is its entry's.
	statusErr error

	from    JobState        // state when claimed
	pick    uint64          // its consumer's pick number (InOrder)
	entry   string          // name of the state-folder entry found
	version int32           // status version owned by this claim
	loaded  map[string]bool // data nodes read (at claim time, or the manifest since)
	// manifestErr is why the manifest read with the claim is unreadable.
	manifestErr error
	absent      map[string]bool // data nodes known not to exist
	present     map[string]bool // data nodes known to exist
	// priorityBad: the priority node was read and is unreadable; the next
	// commit writes it anew (the entry's priority).
	priorityBad bool
	// Commits check that the job's batch exists (its status node), or,
	// batchPinned, that its status is still at batchVersion: an admin move
	// read the batch's state and relies on it. noBatch: the batch is known
	// not to exist; commits leave its references alone. byOperator: the
	// claim is an operator's move, refused (not turned into a failure)
	// when the batch is gone.
	batchPinned  bool
	batchVersion int32
	noBatch      bool
	byOperator   bool
	// statusData and raw are the status and the data nodes as read: a
	// rewrite carries forward the keys other writers put there.
	statusData []byte
	raw        map[string][]byte
	sess       *session
	ctx        context.Context
	cancel     context.CancelCauseFunc
	lock       *ownLock // the job's lock node, in the client's lockBook
	// history is the status's history entries as read (keptEntries).
	history keptHistory
	// givenBack tells the consumer that handed out this claim that the job
	// is free again in its state: a release changes no child of the state
	// folder, so the folder watch would never bring the job back.
	givenBack func(entry string)

	mu   sync.Mutex
	done bool
	// settled: the claim ended with its job committed or given back, not
	// lost (its consumer need not look for the job again).
	settled bool
}

// State is the state the job was in when it was claimed.
func (cl *Claim) State() JobState { return cl.from }

// ID is the claimed job's id.
func (cl *Claim) ID() string { return cl.Job.GetId() }

// Data is the job's data, Job: what a reader that has the claim only as
// an interface (a stage handler's) reads. Load and LoadManifest fill it in.
func (cl *Claim) Data() *v1.Job { return cl.Job }

// entryPriority is the priority of the claim's state entry, which orders
// the job.
func (cl *Claim) entryPriority() int32 {
	if pr, _, ok := parseEntry(cl.entry); ok {
		return pr
	}
	return DefaultPriority
}

// Context ends when the claim's lock or session is lost, or the claim is
// committed or released. Work done for the claim should stop then.
func (cl *Claim) Context() context.Context { return cl.ctx }

var (
	errStale = errors.New("entry is stale")
	errBusy  = errors.New("job is locked")
	// errDataChanged: a data node read for the claim changed before the
	// claim was taken (a writer that leaves the status alone).
	errDataChanged = errors.New("job data changed while claiming")
)

// claimEntry tries to take the job behind one state-folder entry. It returns
// errStale when the entry no longer describes the job and errBusy when another
// consumer holds it. With checkLock the lock is looked at first (a read), so
// that a held job costs no failed write; consumers that rarely meet held jobs
// skip it.
//
// The status and the data nodes are read together, before the claim, and
// the claim checks that the data nodes are still as read: a claim costs two
// round trips, not three.
func (c *Client) claimEntry(ctx context.Context, state JobState, e entry, parts Parts, checkLock bool) (*Claim, error) {
	sess, err := c.currentSession()
	if err != nil {
		return nil, err
	}
	nodes := parts.nodes()
	if parts != PartsStatusOnly {
		// Every claim reads the job's bid and priority too (two small
		// nodes, in the same request): its commits check that the batch
		// still exists, and a priority another writer garbled is written
		// anew with the job's next move.
		for _, n := range []string{nodeBid, nodePriority} {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	for attempt := 0; ; attempt++ {
		cl, err := c.tryClaim(ctx, sess, state, e, nodes, checkLock)
		if errors.Is(err, errDataChanged) && attempt < 2 {
			continue
		}
		if errors.Is(err, errDataChanged) {
			err = errBusy // changing under us: leave it for now
		}
		return cl, err
	}
}

func (c *Client) tryClaim(ctx context.Context, sess *session, state JobState, e entry, nodes []string, checkLock bool) (*Claim, error) {
	jid := e.jid
	statusPath, lockPath := c.p.jobStatus(jid), c.p.jobLock(jid)
	var (
		locked   bool
		lockStat *zk.Stat
		existErr error
		wg       sync.WaitGroup
	)
	if checkLock {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locked, lockStat, existErr = c.exists(ctx, lockPath)
		}()
	}
	read, err := c.readStatusAndData(ctx, jid, nodes)
	wg.Wait()
	switch {
	case err != nil:
		return nil, err
	case read[0].stat == nil:
		return nil, errStale
	case existErr != nil:
		return nil, fmt.Errorf("reading %s: %w", lockPath, existErr)
	}
	data, stat := read[0].data, read[0].stat
	status, historyRaw, loadErr := decodeJobStatusKeeping(statusPath, data)
	if loadErr == nil && status.GetStatus() != state {
		// The job moved on; this entry is left over (a non-atomic writer) or
		// about to vanish. fsck deals with the former.
		return nil, errStale
	}
	if locked {
		return nil, c.busy(ctx, sess, state, e, status, loadErr, stat, nodes, read, lockStat)
	}

	// Taking the lock rewrites the status unchanged: its version becomes this
	// claim's fencing token, so a consumer that lost the job cannot commit.
	ops := []any{c.createOp(lockPath, nil, zk.FlagEphemeral), setOp(statusPath, data, stat.Version)}
	for i, r := range read[1:] {
		if r.stat != nil {
			ops = append(ops, checkOp(c.p.jobNode(jid, nodes[i]), r.stat.Version))
		}
	}
	cl := c.newClaim(sess, state, e, stat.Version+1)
	cl.lock = c.locks.add(lockPath, cl.ctx)
	_, err = c.multi(ctx, ops...)
	if retryable(err) && c.ownsNode(ctx, lockPath, sess.id) {
		// Applied, its answer lost with the connection: the claim is ours.
		// Dropped, its lock would hold the job for as long as this session
		// lives, with nobody working on it.
		err = nil
	}
	if err != nil {
		cl.cancel(err)
		switch {
		case errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			c.locks.forget(cl.lock) // refused: nothing was created
		default:
			// Perhaps applied, its answer lost: a lock of this session
			// would hold the job with nobody working on it.
			c.leave(cl.lock)
		}
	}
	switch idx := failedOp(err); {
	case errors.Is(err, zk.ErrNodeExists):
		ok, ls, lerr := c.exists(ctx, lockPath)
		if lerr != nil || !ok {
			return nil, errBusy
		}
		return nil, c.busy(ctx, sess, state, e, status, loadErr, stat, nodes, read, ls)
	case idx >= 2 && (errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode)):
		return nil, errDataChanged
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
		return nil, errStale
	case err != nil:
		return nil, fmt.Errorf("locking job %s: %w", jid, err)
	}
	c.loadClaim(cl, e, state, status, loadErr, nodes, read)
	cl.history = keptHistory{of: status, raw: historyRaw}
	// Locks vanish with their session, which the claim's context follows
	// already. Only a step that runs long gets a watch on the lock node too,
	// for an operator removing it by hand: short steps save the read.
	time.AfterFunc(lockWatchAfter, func() {
		if cl.ctx.Err() == nil {
			cl.watchLock()
		}
	})
	return cl, nil
}

// claimOf is the claim of a job in state at entry e, read as read (its
// status first, then nodes), owning status version version.
func (c *Client) claimOf(sess *session, state JobState, e entry, status *v1.JobStatus, loadErr error, version int32, nodes []string, read []dataStat) *Claim {
	cl := c.newClaim(sess, state, e, version)
	c.loadClaim(cl, e, state, status, loadErr, nodes, read)
	return cl
}

// newClaim is the claim of the job at entry e in state, owning status
// version version, with nothing loaded yet; its context ends with sess.
func (c *Client) newClaim(sess *session, state JobState, e entry, version int32) *Claim {
	cl := &Claim{c: c, from: state, entry: e.name, version: version, sess: sess}
	cl.ctx, cl.cancel = context.WithCancelCause(sess.ctx)
	return cl
}

// loadClaim gives cl the job as read (its status first, then nodes).
func (c *Client) loadClaim(cl *Claim, e entry, state JobState, status *v1.JobStatus, loadErr error, nodes []string, read []dataStat) {
	cl.Job, cl.LoadErr, cl.statusErr = &v1.Job{Id: e.jid, Priority: e.priority, Status: status}, loadErr, loadErr
	if status == nil {
		cl.Job.Status = &v1.JobStatus{Status: state}
	}
	cl.statusData, cl.raw = read[0].data, map[string][]byte{}
	r := c.decodeJobData(cl.Job, nodes, datas(read[1:]), cl.raw)
	cl.present = r.present
	cl.priorityBad = r.badPriority != nil
	cl.loaded = map[string]bool{}
	cl.absent = map[string]bool{}
	for _, n := range nodes {
		cl.loaded[n] = true
	}
	if i := slices.Index(nodes, nodeManifest); i >= 0 {
		cl.keepManifest(read[i+1].data)
	}
	if cl.LoadErr == nil {
		cl.LoadErr = r.err()
	}
	// The entry's priority is what orders the job; keep it authoritative.
	cl.Job.Priority = e.priority
	cl.Job.Locked = true
}

// foreignLockMessage begins the message of a job whose lock node belongs
// to no session.
const foreignLockMessage = "its lock node is not a session's (ephemeralOwner 0, left by another writer), so no consumer could ever take it"

// busy is why a job found locked cannot be claimed: errBusy while a
// session holds the lock. A lock no session holds (a persistent node,
// which the contract never writes) would hold the job for ever, silently:
// the job is failed with a message saying so and the lock removed, in one
// operation fenced by the status version read (a job that cannot fail, as
// a held or failed one, keeps its state and gets the message); the entry
// is then errStale.
func (c *Client) busy(ctx context.Context, sess *session, state JobState, e entry, status *v1.JobStatus, loadErr error, stat *zk.Stat,
	nodes []string, read []dataStat, lockStat *zk.Stat) error {
	if lockStat == nil || lockStat.EphemeralOwner != 0 || loadErr != nil {
		return errBusy // an unreadable status is fsck's to report
	}
	var err error
	if CanMoveJob(state, Failed) {
		// The lock goes with the commit (its delete is the commit's lock
		// operation); the status version read fences it.
		cl := c.claimOf(sess, state, e, status, nil, stat.Version, nodes, read)
		err = cl.commit(ctx, Change{To: Failed, Message: foreignLockMessage + ": the lock was removed and the job failed"}, false)
		cl.markDone()
	} else {
		next := proto.Clone(status).(*v1.JobStatus)
		next.Message = foreignLockMessage + ": the lock was removed"
		next.LastModified = nowStamp()
		_, err = c.multi(ctx, setOp(c.p.jobStatus(e.jid), withKeysOf(read[0].data, encodeJobStatus(next), jobStatusKeys), stat.Version),
			deleteOp(c.p.jobLock(e.jid), lockStat.Version))
	}
	if err != nil {
		if errors.Is(err, ErrFenced) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			return errStale // the job changed meanwhile: look again
		}
		c.log.ErrorContext(ctx, "a job's lock is not a session's, and failing the job did not work", "job_id", e.jid, "error", err)
		return errBusy
	}
	c.log.WarnContext(ctx, "job lock not held by any session: lock removed", "job_id", e.jid, "state", JobStateName(state),
		"failed", CanMoveJob(state, Failed))
	return errStale
}

// lockWatchAfter is how long a step runs before its lock node is watched.
const lockWatchAfter = time.Second

// watchLock ends the claim's context if its lock node disappears while the
// session lives on (an operator or fsck removed it).
func (cl *Claim) watchLock() {
	for {
		ok, _, ev, err := cl.c.existsW(cl.ctx, cl.c.p.jobLock(cl.ID()))
		if err != nil {
			return // session or claim ended: its context is already done
		}
		if !ok {
			cl.c.locks.forget(cl.lock)
			cl.cancel(fmt.Errorf("job %s: %w: lock node removed", cl.ID(), ErrFenced))
			return
		}
		select {
		case <-cl.ctx.Done():
			return
		case e := <-ev:
			if e.Type == zk.EventNodeDeleted {
				cl.c.locks.forget(cl.lock)
				cl.cancel(fmt.Errorf("job %s: %w: lock node removed", cl.ID(), ErrFenced))
				return
			}
		}
	}
}

// Load reads the data nodes of parts the claim has neither read nor
// written (a stage that needs some only for some jobs leaves them out of
// its consumer's Parts), but the manifest (LoadManifest). An unreadable
// node is an error wrapping ErrCorrupt.
func (cl *Claim) Load(ctx context.Context, parts Parts) error {
	var missing []string
	for _, n := range (parts &^ PartManifest).nodes() {
		if !cl.known(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	r, err := cl.c.readJobData(ctx, cl.Job, missing, cl.raw)
	if err != nil {
		return fmt.Errorf("job %s: %w", cl.ID(), err)
	}
	for _, n := range missing {
		cl.loaded[n] = true
		cl.present[n] = r.present[n]
	}
	if r.badPriority != nil {
		cl.Job.Priority = cl.entryPriority()
		cl.priorityBad = true
	}
	return r.err()
}

// LoadManifest reads the job's file list (nil if the job has none), once:
// a file list the claim read (PartManifest) or wrote already is not read
// again. An unreadable one is an error wrapping ErrCorrupt.
func (cl *Claim) LoadManifest(ctx context.Context) (*v1.Manifest, error) {
	if cl.loaded[nodeManifest] {
		return cl.Job.Manifest, cl.manifestErr
	}
	m, err := cl.c.GetManifest(ctx, cl.ID())
	if err == nil {
		cl.Job.Manifest = m
		cl.loaded[nodeManifest] = true
		cl.present[nodeManifest] = m != nil
	}
	return m, err
}

// keepManifest keeps the file list read with the claim (nil: the job has
// none) for LoadManifest, decoded or with the reason it is unreadable.
func (cl *Claim) keepManifest(data []byte) {
	cl.present[nodeManifest] = data != nil
	if data != nil {
		cl.Job.Manifest, cl.manifestErr = decodeManifest(cl.c.p.jobNode(cl.ID(), nodeManifest), data)
	}
}

// Change is what a stage's step did to a job. To is the next state; the data
// fields, when set, are written in the same atomic operation.
type Change struct {
	To          JobState
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

func (cl *Claim) finish() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.done {
		return fmt.Errorf("job %s: claim already finished", cl.ID())
	}
	if err := cl.sess.ctx.Err(); err != nil {
		return fmt.Errorf("job %s: %w: %v", cl.ID(), ErrFenced, context.Cause(cl.sess.ctx))
	}
	return nil
}

func (cl *Claim) markDone() {
	cl.mu.Lock()
	cl.done = true
	cl.mu.Unlock()
	cl.cancel(errClaimFinished)
	// Ended without its lock known gone (a release that failed, a session
	// presumed lost): tidyLocks deletes it if it is still this session's.
	cl.c.leave(cl.lock)
}

// settle ends a claim whose job was committed or given back: its lock is
// gone with the operation that did it.
func (cl *Claim) settle() {
	cl.c.locks.forget(cl.lock)
	cl.mu.Lock()
	cl.settled = true
	cl.mu.Unlock()
	cl.markDone()
}

// fenced ends a claim whose change was refused: the job's status moved on
// under it or its lock is gone. A lock still there is this claim's own
// (the status was written by someone who ignores locks, as a peer's admin
// failing a job does): it is removed now, or the job would stay locked
// for as long as this session lives.
func (cl *Claim) fenced(ctx context.Context) {
	cl.c.letGo(ctx, cl.lock)
	cl.markDone()
}

var errClaimFinished = errors.New("claim finished")

// ownLocks are the object locks among locks that this claim's session
// holds and has not released: a commit releases them with a delete each
// (unlockOps), as the claim's fence (its job lock, also this session's)
// proves the session alive, and with it each lock still its own. Locks of
// another session are left to their own Unlock.
func (cl *Claim) ownLocks(locks []*ObjectLock) []*ObjectLock {
	var own []*ObjectLock
	for _, l := range locks {
		if l != nil && l.sess == cl.sess.id && !l.released.Load() {
			own = append(own, l)
		}
	}
	return own
}

func unlockOps(locks []*ObjectLock) []any {
	ops := make([]any, len(locks))
	for i, l := range locks {
		ops[i] = deleteOp(l.path, -1)
	}
	return ops
}

func (cl *Claim) known(name string) bool {
	return cl.loaded[name] || cl.present[name] || cl.absent[name]
}

func (cl *Claim) learn(name string, present bool) {
	cl.present[name] = present
	cl.absent[name] = !present
}

// likelyPresent are the data nodes every job gets when it is created (ours
// and the peer library's alike); the others appear as stages write them.
var likelyPresent = map[string]bool{nodeBid: true, nodePriority: true, nodeSpaceNeeded: true, nodeConfig: true}

// dataOps writes the data fields of ch: existing nodes are set, new ones
// created. Whether a node the claim did not read exists is not looked up
// (a request per node, on every step): it is guessed, and guessed names
// the operations built on a guess, by their index in ops. A wrong guess
// fails the multi on that operation; learnFrom corrects it for the next
// try.
func (cl *Claim) dataOps(ch Change) (ops []any, guessed map[int]string) {
	put := func(name string, data []byte) {
		p := cl.c.p.jobNode(cl.ID(), name)
		if known := carriedKeys[name]; known != nil {
			data = withKeysOf(cl.raw[name], data, known)
		}
		present := cl.present[name]
		if !cl.known(name) {
			present = likelyPresent[name]
			if guessed == nil {
				guessed = map[int]string{}
			}
			guessed[len(ops)] = name
		}
		if present {
			ops = append(ops, setOp(p, data, -1))
		} else {
			ops = append(ops, cl.c.createOp(p, data, 0))
		}
	}
	if ch.Priority != nil && (*ch.Priority != cl.Job.Priority || cl.priorityBad) {
		put(nodePriority, encodeInt(int64(*ch.Priority)))
	}
	if ch.SpaceNeeded != nil {
		put(nodeSpaceNeeded, encodeInt(*ch.SpaceNeeded))
	}
	if ch.Identifiers != nil {
		put(nodeIdentifiers, encodeIdentifiers(ch.Identifiers))
	}
	if ch.Metadata != nil {
		put(nodeMetadata, encodeMetadata(ch.Metadata))
	}
	if ch.Store != nil {
		put(nodeStore, encodeStore(ch.Store))
	}
	if ch.Inventory != nil {
		put(nodeInventory, encodeInventory(ch.Inventory))
	}
	if ch.Manifest != nil {
		put(nodeManifest, encodeManifest(ch.Manifest))
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
	for name, set := range map[string]bool{nodeIdentifiers: ch.Identifiers != nil, nodeMetadata: ch.Metadata != nil,
		nodeStore: ch.Store != nil, nodeInventory: ch.Inventory != nil} {
		if !set || !cl.present[name] || cl.raw[name] != nil {
			continue
		}
		data, _, err := cl.c.get(ctx, cl.c.p.jobNode(cl.ID(), name))
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

// bid returns the job's batch id, reading it if the claim did not.
func (cl *Claim) bid(ctx context.Context) (string, error) {
	if cl.Job.Bid != "" {
		return cl.Job.Bid, nil
	}
	p := cl.c.p.jobNode(cl.ID(), nodeBid)
	data, _, err := cl.c.get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) || (err == nil && len(data) == 0) {
		return "", &CorruptError{Path: p, Err: errors.New("missing")}
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	cl.Job.Bid = string(data)
	return cl.Job.Bid, nil
}

// JobWorkingDir is the folder that holds a job's files: the working_dir
// its configuration names or, for a job created without one (the peer
// library's createJobConfiguration writes none), <workRoot>/<bid>/<jid>,
// where the batcher puts every job's (NewJob.WorkRoot). "" when the job
// names none and its bid is not known.
func JobWorkingDir(workRoot string, j *v1.Job) string {
	if wd := j.GetConfiguration().GetWorkingDir(); wd != "" {
		return wd
	}
	if workRoot == "" || j.GetBid() == "" || j.GetId() == "" {
		return ""
	}
	return filepath.Join(workRoot, j.GetBid(), j.GetId())
}

// WorkingDir is JobWorkingDir of the claimed job; the bid is read if the
// job names no working_dir and the claim did not read it.
func (cl *Claim) WorkingDir(ctx context.Context, workRoot string) (string, error) {
	if wd := cl.Job.GetConfiguration().GetWorkingDir(); wd != "" {
		return wd, nil
	}
	if _, err := cl.bid(ctx); err != nil {
		return "", err
	}
	return JobWorkingDir(workRoot, cl.Job), nil
}

// applyData records in memory what dataOps wrote.
func (cl *Claim) applyData(ch Change) {
	j := cl.Job
	if ch.Priority != nil {
		j.Priority = *ch.Priority
		cl.present[nodePriority] = true
	}
	if ch.SpaceNeeded != nil {
		j.SpaceNeeded = *ch.SpaceNeeded
		cl.present[nodeSpaceNeeded] = true
	}
	if ch.Identifiers != nil {
		j.Identifiers = ch.Identifiers
		cl.present[nodeIdentifiers] = true
	}
	if ch.Metadata != nil {
		j.Metadata = ch.Metadata
		cl.present[nodeMetadata] = true
	}
	if ch.Store != nil {
		j.Store = ch.Store
		cl.present[nodeStore] = true
	}
	if ch.Inventory != nil {
		j.Inventory = ch.Inventory
		cl.present[nodeInventory] = true
	}
	if ch.Manifest != nil {
		j.Manifest = ch.Manifest
		cl.present[nodeManifest] = true
		cl.loaded[nodeManifest] = true
		cl.manifestErr = nil
	}
}

func validPriority(p *int32) error {
	if p != nil && (*p < 0 || *p > MaxPriority) {
		return fmt.Errorf("%w: priority %d is outside 0..%d", ErrInvalid, *p, MaxPriority)
	}
	return nil
}

// Commit moves the job to ch.To and writes ch's data, releasing the lock, in
// one atomic operation guarded by the claim's fencing version.
func (cl *Claim) Commit(ctx context.Context, ch Change) error { return cl.commit(ctx, ch, false) }

// commit is Commit; with keep, the lock stays and the claim goes on holding
// the job in its new state (Consumer.TakeOver).
func (cl *Claim) commit(ctx context.Context, ch Change, keep bool) error {
	if err := checkJobMove(cl.ID(), cl.from, ch.To); err != nil {
		return err
	}
	if err := validPriority(ch.Priority); err != nil {
		return err
	}
	if err := cl.finish(); err != nil {
		return err
	}
	old := cl.Job.GetStatus()
	next := &v1.JobStatus{
		Status:               ch.To,
		LastModified:         nowStamp(),
		Message:              ch.Message,
		LastSuccessfulStatus: nextLastSuccessful(cl.from, old.GetLastSuccessfulStatus(), ch.To),
		RetryCount:           old.GetRetryCount(),
		Traceparent:          old.GetTraceparent(),
	}
	if cl.from == Failed && ch.To != Deleted {
		next.RetryCount++ // only an admin resume leaves Failed
	}
	by := ch.By
	switch {
	case by != "":
	case cl.byOperator:
		by = WorkerOperator
	default:
		by = cl.c.worker
	}
	added := recordChange(old, next, by, time.Now())
	prio := cl.Job.Priority
	if ch.Priority != nil {
		prio = *ch.Priority
	}
	bid := ""
	if batchFolder(ch.To) != batchFolder(cl.from) && !cl.noBatch {
		var err error
		if bid, err = cl.bid(ctx); errors.Is(err, ErrCorrupt) {
			return cl.commitWithoutBatch(ctx, ch, keep, "")
		} else if err != nil {
			return err
		}
	}
	if err := cl.readRewritten(ctx, ch); err != nil {
		return err
	}
	statusData := withKeysOf(cl.statusData, encodeJobStatusReusing(next, cl.history.entries(cl.statusData, old, next)), jobStatusKeys)
	statusOp := setOp(cl.c.p.jobStatus(cl.ID()), statusData, cl.version)
	var guessed map[int]string
	locks := cl.ownLocks(ch.Unlock)
	unlocks, unlockAt := unlockOps(locks), 0
	entry := cl.entry
	err := cl.commitOps(ctx, statusOp, keep, func(ref refPlace) []any {
		var ops []any
		ops, guessed = cl.dataOps(ch)
		if cl.priorityBad && ch.Priority == nil {
			ops = append(ops, setOp(cl.c.p.jobNode(cl.ID(), nodePriority), encodeInt(int64(prio)), -1))
		}
		if ch.To != cl.from || prio != cl.Job.Priority {
			entry = entryName(prio, cl.ID())
			ops = append(ops,
				deleteOp(cl.c.p.jobStateDir(cl.from)+"/"+cl.entry, -1),
				cl.c.createOp(cl.c.p.jobEntry(ch.To, prio, cl.ID()), nil, 0))
		}
		if bid != "" {
			ops = append(ops, cl.c.refOps(bid, cl.ID(), ref, batchFolder(ch.To))...)
		}
		unlockAt = len(ops)
		return append(ops, unlocks...)
	}, nil, func(data []byte) bool {
		st, err := decodeJobStatus("", data)
		return err == nil && st.GetStatus() == ch.To && st.GetMessage() == ch.Message
	}, func(i int, err error) bool {
		if len(unlocks) > 0 && i >= unlockAt && i < unlockAt+len(unlocks) && errors.Is(err, zk.ErrNoNode) {
			unlocks = nil // a lock gone already: nothing to release
			return true
		}
		return cl.learnFrom(ctx, ch, guessed, i, err)
	})
	var nb *NoBatchError
	if errors.As(err, &nb) && !cl.noBatch {
		return cl.commitWithoutBatch(ctx, ch, keep, nb.Batch)
	}
	if err != nil {
		return err
	}
	for _, l := range locks {
		l.released.Store(true)
		cl.c.locks.forget(l.own)
	}
	cl.priorityBad = false
	cl.applyData(ch)
	cl.Job.Status = next
	cl.statusData = statusData
	cl.history = keptHistory{}
	cl.c.changed(cl.ID(), next, added)
	cl.Job.Priority = prio
	if keep {
		cl.mu.Lock()
		cl.from, cl.entry, cl.version = ch.To, entry, cl.version+1
		cl.mu.Unlock()
		return nil
	}
	cl.Job.Locked = false
	cl.settle()
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
	nb := &NoBatchError{Job: cl.ID(), Batch: bid}
	if ch.To == Failed || ch.To == Deleted {
		return cl.commit(ctx, ch, keep)
	}
	if cl.byOperator || !CanMoveJob(cl.from, Failed) {
		return nb
	}
	fail := Change{To: Failed, Unlock: ch.Unlock,
		Message: fmt.Sprintf("%s: the job cannot go on to %s", nb.Reason(), JobStateName(ch.To))}
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
		ops = append(ops, deleteOp(c.p.batchRef(bid, from, jid), -1))
	}
	ops = append(ops, c.createOp(c.p.batchRef(bid, to, jid), nil, 0))
	if from == folderProcessing || to == folderProcessing || !ref.known {
		ops = append(ops, setOp(c.p.batchFolder(bid, folderProcessing), nil, -1))
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
	ref := refPlace{folder: batchFolder(cl.from), known: true}
	lockOp := any(deleteOp(cl.c.p.jobLock(cl.ID()), -1))
	if keepLock {
		lockOp = checkOp(cl.c.p.jobLock(cl.ID()), -1)
	}
	// The batch the job belongs to must exist (or be as an admin move read
	// it): a job must never go on without it.
	var guard []any
	bid := cl.Job.GetBid()
	if bid != "" && !cl.noBatch {
		if !ValidBatchID(bid) {
			return &NoBatchError{Job: cl.ID(), Batch: bid}
		}
		v := int32(-1)
		if cl.batchPinned {
			v = cl.batchVersion
		}
		guard = append(guard, checkOp(cl.c.p.batchStatus(bid), v))
	}
	for attempt := 0; ; attempt++ {
		ops := append([]any{statusOp}, guard...)
		first := len(ops)
		ops = append(ops, build(ref)...)
		lockIdx := len(ops)
		ops = append(append(ops, lockOp), tail...)
		_, err := cl.c.multi(ctx, ops...)
		if err == nil {
			return nil
		}
		if retryable(err) {
			data, stat, gerr := cl.c.get(ctx, cl.c.p.jobStatus(cl.ID()))
			switch {
			case gerr != nil:
				return fmt.Errorf("job %s: commit outcome unknown after %v: %w", cl.ID(), err, gerr)
			case stat.Version == cl.version+1 && applied(data):
				return nil
			case stat.Version == cl.version && attempt < 3:
				continue
			}
			cl.fenced(ctx)
			return fmt.Errorf("job %s: %w: connection lost during commit", cl.ID(), ErrFenced)
		}
		idx := failedOp(err)
		if idx == 0 || idx == lockIdx {
			// The status moved on, or our lock is gone.
			if idx == lockIdx {
				cl.c.locks.forget(cl.lock)
			}
			cl.fenced(ctx)
			return fmt.Errorf("job %s: %w (%v)", cl.ID(), ErrFenced, err)
		}
		if len(guard) > 0 && idx == 1 {
			if errors.Is(err, zk.ErrNoNode) {
				return &NoBatchError{Job: cl.ID(), Batch: bid}
			}
			return fmt.Errorf("job %s: its batch %s changed while the job was being moved (an operator or the batcher is at it): %w",
				cl.ID(), bid, ErrLocked)
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
		return refPlace{}, fmt.Errorf("job %s: %w: no bid", jid, ErrCorrupt)
	}
	if err := c.ensure(ctx, c.p.batchStates(bid)); err != nil {
		return refPlace{}, err
	}
	found := refPlace{known: true}
	for _, f := range batchFolders {
		if err := c.ensure(ctx, c.p.batchFolder(bid, f)); err != nil {
			return refPlace{}, err
		}
		ok, _, err := c.exists(ctx, c.p.batchRef(bid, f, jid))
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
	if err := validPriority(ch.Priority); err != nil {
		return err
	}
	if err := cl.finish(); err != nil {
		return err
	}
	if err := cl.readRewritten(ctx, ch); err != nil {
		return err
	}
	newEntry := cl.entry
	for {
		data, guessed := cl.dataOps(ch)
		ops := append([]any{checkOp(cl.c.p.jobStatus(cl.ID()), cl.version), checkOp(cl.c.p.jobLock(cl.ID()), -1)}, data...)
		if ch.Priority != nil && *ch.Priority != cl.Job.Priority {
			newEntry = entryName(*ch.Priority, cl.ID())
			ops = append(ops,
				deleteOp(cl.c.p.jobStateDir(cl.from)+"/"+cl.entry, -1),
				cl.c.createOp(cl.c.p.jobStateDir(cl.from)+"/"+newEntry, nil, 0))
		}
		if len(ops) == 2 {
			return nil
		}
		_, err := cl.c.multi(ctx, ops...)
		if err == nil {
			break
		}
		idx := failedOp(err)
		if idx == 0 || idx == 1 {
			return fmt.Errorf("job %s: %w (%v)", cl.ID(), ErrFenced, err)
		}
		if !cl.learnFrom(ctx, ch, guessed, idx-2, err) {
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

// Release gives the job back untouched: its lock is removed (only if this
// claim still owns the job) and another consumer may take it. It is worth
// calling even after the claim's context ended: a session presumed lost may
// come back, and its lock with it.
func (cl *Claim) Release(ctx context.Context) error {
	cl.mu.Lock()
	done := cl.done
	cl.mu.Unlock()
	if done {
		return fmt.Errorf("job %s: claim already finished", cl.ID())
	}
	return cl.release(ctx)
}

// errSessionEnded stops a release's wait when the claim's session ends.
var errSessionEnded = errors.New("session ended")

// releaseRetry repeats a release across connection loss for as long as
// the session may come back.
func releaseRetry() retrypolicy.Policy {
	return retrypolicy.Policy{Backoff: 50 * time.Millisecond, Max: time.Second}
}

func (cl *Claim) release(ctx context.Context) error {
	// The wait between attempts also ends with the session: its lock is
	// gone with it.
	wait, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(cl.sess.ctx, func() { stop(errSessionEnded) })()
	var last error
	_, err := releaseRetry().Do(wait, retryable, func(attempt int) error {
		_, err := cl.c.multi(ctx, checkOp(cl.c.p.jobStatus(cl.ID()), cl.version), deleteOp(cl.c.p.jobLock(cl.ID()), -1))
		// After a lost answer the lock may be gone already: with the status
		// unchanged, the job is free all the same.
		if err != nil && attempt > 1 && failedOp(err) == 1 && errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		last = err
		return err
	})
	switch {
	case err == nil:
	case !retryable(last):
		// Do gives up early only on such an error (it has no limit on
		// attempts): the status moved on (the lock, if still there, is
		// removed all the same) or the lock is gone.
		cl.fenced(ctx)
		return fmt.Errorf("releasing job %s: %w (%v)", cl.ID(), ErrFenced, last)
	case cl.sess.ctx.Err() != nil:
		// The connection dropped, but the lock lives as long as the
		// session: left there it would hold the job, with nobody working
		// on it, until this process ends. Tried again once reconnected;
		// past the session, the client's tidyLocks removes it if the
		// session comes back.
		cl.markDone()
		return fmt.Errorf("releasing job %s: %w: %v", cl.ID(), ErrFenced, context.Cause(cl.sess.ctx))
	default:
		cl.markDone()
		return fmt.Errorf("releasing job %s: %w (%v)", cl.ID(), context.Cause(ctx), last)
	}
	if cl.givenBack != nil {
		cl.givenBack(cl.entry)
	}
	cl.settle()
	return nil
}

// CloneJob returns a deep copy of a job message.
func CloneJob(j *v1.Job) *v1.Job { return proto.Clone(j).(*v1.Job) }
