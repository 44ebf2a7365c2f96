package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	"google.golang.org/protobuf/proto"
)

// entry is a state entry as a consumer picked it: pick is its number
// (Consumer InOrder).
type entry struct {
	queue.Entry
	pick uint64
}

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
func (c *Client) claimEntry(ctx context.Context, state queue.JobState, e entry, parts queue.Parts, checkLock bool) (*Claim, error) {
	if _, err := c.s.Current(); err != nil {
		return nil, err
	}
	nodes := parts.Nodes()
	if parts != queue.PartsStatusOnly {
		// Every claim reads the job's priority too (a small node, in the
		// same request), so that a priority another writer garbled is
		// written anew with the job's next move; and its bid, which its
		// commits need to check that the batch still exists, unless the
		// configuration read names it (batch_id, written with the job).
		extra := []string{queue.NodePriority}
		if !slices.Contains(nodes, queue.NodeConfig) {
			extra = append(extra, queue.NodeBid)
		}
		for _, n := range extra {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	for attempt := 0; ; attempt++ {
		cl, err := c.tryClaim(ctx, state, e, nodes, checkLock)
		if errors.Is(err, errDataChanged) && attempt < 2 {
			continue
		}
		if errors.Is(err, errDataChanged) {
			err = errBusy // changing under us: leave it for now
		}
		return cl, err
	}
}

func (c *Client) tryClaim(ctx context.Context, state queue.JobState, e entry, nodes []string, checkLock bool) (*Claim, error) {
	jid := e.JID
	statusPath, lockPath := c.p.Job(jid).Status(), c.p.Job(jid).Lock()
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
			locked, lockStat, existErr = c.z.Exists(ctx, lockPath)
		}()
	}
	read, err := c.r.readStatusAndData(ctx, jid, nodes)
	wg.Wait()
	switch {
	case err != nil:
		return nil, err
	case read[0].Stat == nil:
		return nil, errStale
	case existErr != nil:
		return nil, fmt.Errorf("reading %s: %w", lockPath, existErr)
	}
	data, stat := read[0].Data, read[0].Stat
	status, history, loadErr := queue.DecodeJobStatusKeeping(statusPath, data)
	if loadErr == nil && status.GetStatus() != state {
		// The job moved on; this entry is left over (a non-atomic writer) or
		// about to vanish. fsck deals with the former.
		return nil, errStale
	}
	if locked {
		return nil, c.busy(ctx, state, e, status, loadErr, stat, nodes, read, lockStat)
	}

	// Taking the lock rewrites the status unchanged: its version becomes
	// this claim's fencing token, so a consumer that lost the job cannot
	// commit. The data nodes read must still be as read: all but those
	// written only with the job, and the priority, which is read only to
	// mend it (the entry's priority orders the job).
	var asRead []session.Guard
	for i, r := range read[1:] {
		if r.Stat != nil && !queue.WrittenOnce(nodes[i]) && nodes[i] != queue.NodePriority {
			asRead = append(asRead, session.IfVersion(guardData, c.p.Job(jid).Node(nodes[i]), r.Stat.Version))
		}
	}
	hold, err := c.s.Locks().Take(ctx, "job "+jid, lockPath, statusPath, data, stat.Version, asRead...)
	var refused *session.Refused
	switch {
	case err == nil:
	case !errors.As(err, &refused):
		return nil, fmt.Errorf("locking job %s: %w", jid, err)
	case refused.Name == session.LockStep && refused.Exists():
		ok, ls, lerr := c.z.Exists(ctx, lockPath)
		if lerr != nil || !ok {
			return nil, errBusy
		}
		return nil, c.busy(ctx, state, e, status, loadErr, stat, nodes, read, ls)
	case refused.Name == guardData:
		return nil, errDataChanged
	case refused.Name == session.StatusStep:
		return nil, errStale
	default:
		return nil, fmt.Errorf("locking job %s: %w", jid, err)
	}
	cl := c.loadClaim(hold, e, state, status, loadErr, nodes, read)
	cl.history = history
	// Locks vanish with their session, which the claim's context follows
	// already. Only a step that runs long gets a watch on the lock node too,
	// for an operator removing it by hand: short steps save the read.
	time.AfterFunc(lockWatchAfter, func() {
		if hold.Context().Err() == nil {
			cl.watchLock()
		}
	})
	return cl, nil
}

// loadClaim is the claim of a job in state at entry e, held by hold, as
// read (its status first, then nodes).
func (c *Client) loadClaim(hold *session.Hold, e entry, state queue.JobState, status *v1.JobStatus, loadErr error, nodes []string, read []session.Node) *Claim {
	cl := &Claim{c: c, hold: hold, from: state, entry: e.Name}
	cl.Job, cl.LoadErr, cl.StatusErr = &v1.Job{Id: e.JID, Priority: e.Priority, Status: status}, loadErr, loadErr
	if status == nil {
		cl.Job.Status = &v1.JobStatus{Status: state}
	}
	cl.statusData, cl.raw = read[0].Data, map[string][]byte{}
	r := c.r.decodeJobData(cl.Job, nodes, session.Datas(read[1:]), cl.raw)
	cl.present = r.present
	cl.priorityBad = r.badPriority != nil
	cl.loaded = map[string]bool{}
	cl.absent = map[string]bool{}
	for _, n := range nodes {
		cl.loaded[n] = true
	}
	if i := slices.Index(nodes, queue.NodeManifest); i >= 0 {
		cl.keepManifest(read[i+1].Data)
	}
	if cl.LoadErr == nil {
		cl.LoadErr = r.err()
	}
	// The entry's priority is what orders the job; keep it authoritative.
	cl.Job.Priority = e.Priority
	if len(nodes) > 0 && !slices.Contains(nodes, queue.NodeBid) {
		if bid := cl.Job.GetConfiguration().GetBatchId(); queue.ValidBatchID(bid) {
			// Written with the job, as its bid node is.
			cl.Job.Bid = bid
		} else {
			// A peer's job: its commits read the bid node.
			cl.bidUnread = true
		}
	}
	cl.Job.Locked = true
	return cl
}

// busy is why a job found locked cannot be claimed: errBusy while a
// session holds the lock. A lock no session holds (a persistent node,
// which the contract never writes) would hold the job for ever, silently:
// the job is failed with a message saying so and the lock removed, in one
// operation fenced by the status version read (a job that cannot fail, as
// a held or failed one, keeps its state and gets the message); the entry
// is then errStale.
func (c *Client) busy(ctx context.Context, state queue.JobState, e entry, status *v1.JobStatus, loadErr error, stat *zk.Stat,
	nodes []string, read []session.Node, lockStat *zk.Stat) error {
	if lockStat == nil || lockStat.EphemeralOwner != 0 || loadErr != nil {
		return errBusy // an unreadable status is fsck's to report
	}
	var err error
	if queue.CanMoveJob(state, queue.Failed) {
		// The lock goes with the commit (its delete is the commit's lock
		// operation); the status version read fences it.
		live, lerr := c.s.Current()
		if lerr != nil {
			return lerr
		}
		hold := c.s.Locks().Fence("job "+e.JID, c.p.Job(e.JID).Status(), c.p.Job(e.JID).Lock(), live, stat.Version)
		cl := c.loadClaim(hold, e, state, status, nil, nodes, read)
		err = cl.commit(ctx, Change{To: queue.Failed, Message: queue.ForeignLockMessage + ": the lock was removed and the job failed"}, false)
		hold.End()
	} else {
		next := proto.Clone(status).(*v1.JobStatus)
		next.Message = queue.ForeignLockMessage + ": the lock was removed"
		next.LastModified = queue.NowStamp()
		err = c.z.Txn().Then(
			session.Set(session.StatusStep, c.p.Job(e.JID).Status(), queue.RewriteJobStatus(read[0].Data, next, nil), stat.Version),
			session.Delete(session.LockStep, c.p.Job(e.JID).Lock(), lockStat.Version)).Commit(ctx)
	}
	if err != nil {
		_, byStatus := session.RefusedBy(err, session.StatusStep)
		_, byLock := session.RefusedBy(err, session.LockStep)
		if errors.Is(err, queue.ErrFenced) || byStatus || byLock {
			return errStale // the job changed meanwhile: look again
		}
		c.log.ErrorContext(ctx, "a job's lock is not a session's, and failing the job did not work", "job_id", e.JID, "error", err)
		return errBusy
	}
	c.log.WarnContext(ctx, "job lock not held by any session: lock removed", "job_id", e.JID, "state", queue.JobStateName(state),
		"failed", queue.CanMoveJob(state, queue.Failed))
	return errStale
}

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
			cl.hold.Lost(fmt.Errorf("job %s: %w: lock node removed", cl.ID(), queue.ErrFenced))
			return
		}
		select {
		case <-cl.Context().Done():
			return
		case e := <-ev:
			if e.Type == zk.EventNodeDeleted {
				cl.hold.Lost(fmt.Errorf("job %s: %w: lock node removed", cl.ID(), queue.ErrFenced))
				return
			}
		}
	}
}
