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

// Claim is a job this client holds the lock of. Every change made through
// it is fenced: it is refused (ErrFenced) once the lock or session is lost or
// another writer has changed the job's status since the claim was taken.
//
// Its code goes by role: take.go takes a claim (a consumer's, from a state
// entry; an operator's, by id), this file reads through it and gives it
// back, commit.go writes through it, each write one session.Txn fenced by
// its hold.
type Claim struct {
	c *Client
	// Job is the job's data as read when it was claimed.
	Job *v1.Job
	// LoadErr is set when a node of the job is unreadable (another writer
	// broke it). The job can still be failed through the claim.
	LoadErr error
	// StatusErr is why the status node is unreadable (an operator's
	// claim of such a job: ClaimJob with AsOperator); the claim's state is
	// its entry's, and the job may only be failed or deleted.
	StatusErr error

	hold   *session.Hold   // the job's lock and the status version it owns
	from   queue.JobState  // state when claimed (or last committed with the lock kept)
	pick   uint64          // its consumer's pick number (InOrder)
	entry  string          // name of the state-folder entry found
	loaded map[string]bool // data nodes read (at claim time, or the manifest since)
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
	// bidUnread: the claim read the job's data but not its bid node, and
	// its configuration names no batch (a peer's job): a commit reads the
	// bid node first, to check the batch.
	bidUnread bool
	// statusData and raw are the status and the data nodes as read: a
	// rewrite carries forward the keys other writers put there.
	statusData []byte
	raw        map[string][]byte
	// history is the status's history entries as read (KeptHistory).
	history queue.KeptHistory
	// givenBack tells the consumer that handed out this claim that the job
	// is free again in its state: a release changes no child of the state
	// folder, so the folder watch would never bring the job back.
	givenBack func(entry string)
}

// State is the state the job was in when it was claimed.
func (cl *Claim) State() queue.JobState { return cl.from }

// ID is the claimed job's id.
func (cl *Claim) ID() string { return cl.Job.GetId() }

// Data is the job's data, Job: what a reader that has the claim only as
// an interface (a stage handler's) reads. Load and LoadManifest fill it in.
func (cl *Claim) Data() *v1.Job { return cl.Job }

// entryPriority is the priority of the claim's state entry, which orders
// the job.
func (cl *Claim) entryPriority() int32 {
	if e, ok := queue.ParseEntry(cl.entry); ok {
		return e.Priority
	}
	return queue.DefaultPriority
}

// Context ends when the claim's lock or session is lost, or the claim is
// committed or released. Work done for the claim should stop then.
func (cl *Claim) Context() context.Context { return cl.hold.Context() }

// Load reads the data nodes of parts the claim has neither read nor
// written (a stage that needs some only for some jobs leaves them out of
// its consumer's Parts), but the manifest (LoadManifest). An unreadable
// node is an error wrapping ErrCorrupt.
func (cl *Claim) Load(ctx context.Context, parts queue.Parts) error {
	var missing []string
	for _, n := range (parts &^ queue.PartManifest).Nodes() {
		if !cl.known(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	r, err := cl.c.r.readJobData(ctx, cl.Job, missing, cl.raw)
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
	if cl.loaded[queue.NodeManifest] {
		return cl.Job.Manifest, cl.manifestErr
	}
	m, err := cl.c.r.GetManifest(ctx, cl.ID())
	if err == nil {
		cl.Job.Manifest = m
		cl.loaded[queue.NodeManifest] = true
		cl.present[queue.NodeManifest] = m != nil
	}
	return m, err
}

// keepManifest keeps the file list read with the claim (nil: the job has
// none) for LoadManifest, decoded or with the reason it is unreadable.
func (cl *Claim) keepManifest(data []byte) {
	cl.present[queue.NodeManifest] = data != nil
	if data != nil {
		cl.Job.Manifest, cl.manifestErr = queue.DecodeManifest(cl.c.p.Job(cl.ID()).Node(queue.NodeManifest), data)
	}
}

// bid returns the job's batch id, reading it if the claim did not.
func (cl *Claim) bid(ctx context.Context) (string, error) {
	if cl.Job.Bid != "" {
		return cl.Job.Bid, nil
	}
	p := cl.c.p.Job(cl.ID()).Node(queue.NodeBid)
	data, _, err := cl.c.z.Get(ctx, p)
	if errors.Is(err, zk.ErrNoNode) || (err == nil && len(data) == 0) {
		return "", &queue.CorruptError{Path: p, Err: errors.New("missing")}
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	cl.Job.Bid = string(data)
	cl.bidUnread = false
	return cl.Job.Bid, nil
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
	return queue.JobWorkingDir(workRoot, cl.Job), nil
}

// Release gives the job back untouched: its lock is removed (only if this
// claim still owns the job) and another consumer may take it. It is worth
// calling even after the claim's context ended: a session presumed lost may
// come back, and its lock with it.
func (cl *Claim) Release(ctx context.Context) error {
	if err := cl.hold.Release(ctx); err != nil {
		return err
	}
	if cl.givenBack != nil {
		cl.givenBack(cl.entry)
	}
	return nil
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

// lockWatchAfter is how long a step runs before its lock node is watched.
const lockWatchAfter = time.Second

// watchLock ends the claim's context if its lock node disappears while the
// session lives on (an operator or fsck removed it).
func (cl *Claim) watchLock() {
	for {
		ok, _, ev, err := cl.c.z.WatchExists(cl.Context(), cl.c.p.Job(cl.ID()).Lock())
		if err != nil {
			return // session or claim ended: its context is already done
		}
		if !ok {
			cl.hold.LockRemoved(fmt.Errorf("job %s: %w: lock node removed", cl.ID(), queue.ErrFenced))
			return
		}
		select {
		case <-cl.Context().Done():
			return
		case e := <-ev:
			if e.Type == zk.EventNodeDeleted {
				cl.hold.LockRemoved(fmt.Errorf("job %s: %w: lock node removed", cl.ID(), queue.ErrFenced))
				return
			}
		}
	}
}
