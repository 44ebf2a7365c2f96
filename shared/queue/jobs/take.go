package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	case refused.Name == session.StatusStep, refused.Name == session.LockStep && refused.Gone():
		// The job moved on, or is gone (and its node with it).
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
		hold.Abandon()
	} else {
		next := proto.Clone(status).(*v1.JobStatus)
		next.Message = queue.ForeignLockMessage + ": the lock was removed"
		next.LastModified = queue.NowStamp()
		err = c.z.Txn().Then(
			session.Set(session.StatusStep, c.p.Job(e.JID).Status(), queue.RewriteJobStatus(read[0].Data, next, nil), stat.Version),
			session.Delete(session.LockStep, c.p.Job(e.JID).Lock(), lockStat.Version)).Commit(ctx)
	}
	if err != nil {
		var refused *session.Refused
		if errors.Is(err, queue.ErrFenced) || errors.As(err, &refused) && (refused.Gone() || refused.Changed()) {
			return errStale // the job changed meanwhile: look again
		}
		c.log.ErrorContext(ctx, "a job's lock is not a session's, and failing the job did not work", "job_id", e.JID, "error", err)
		return errBusy
	}
	c.log.WarnContext(ctx, "job lock not held by any session: lock removed", "job_id", e.JID, "state", queue.JobStateName(state),
		"failed", queue.CanMoveJob(state, queue.Failed))
	return errStale
}

// ClaimJob takes the lock of one job by id, whatever its state. It fails
// with ErrLocked when a consumer is working on the job and
// ErrNotFound when there is no such job. Its claim is fenced exactly
// like a stage's.
func (c *Client) ClaimJob(ctx context.Context, jid string) (*Claim, error) {
	return c.claimJob(ctx, jid, false)
}

// ClaimForOperator is ClaimJob for an operator's move (package admin). A
// job whose status node cannot be decoded is claimed too, in the state its
// one entry names (the claim's StatusErr says why), so that it can be
// failed or deleted. Its commits are an operator's: recorded as such in the
// job's history, and refused (not turned into a failure) when the job's
// batch is gone. Its claim is fenced as any other: taking the lock rewrites
// the status as read, so a live session's lock refuses it and a status
// changed since the read does too.
func (c *Client) ClaimForOperator(ctx context.Context, jid string) (*Claim, error) {
	cl, err := c.claimJob(ctx, jid, true)
	if err != nil {
		return nil, err
	}
	cl.byOperator = true
	return cl, nil
}

// claimJob claims a job by id; with unreadable, one whose status cannot
// be decoded too.
func (c *Client) claimJob(ctx context.Context, jid string, unreadable bool) (*Claim, error) {
	if !queue.ValidJobID(jid) {
		return nil, fmt.Errorf("%w: %q is not a job id (jidNNNNNNNNNN)", queue.ErrInvalid, jid)
	}
	for attempt := 0; attempt < 5; attempt++ {
		st, err := c.r.JobStatus(ctx, jid)
		if unreadable && errors.Is(err, queue.ErrCorrupt) {
			cl, cerr := c.claimUnreadable(ctx, jid, err)
			if errors.Is(cerr, errStale) {
				continue
			}
			return cl, cerr
		}
		if err != nil {
			return nil, err
		}
		e, err := c.r.findEntry(ctx, st.GetStatus(), jid)
		if errors.Is(err, queue.ErrCorrupt) {
			// A job moving between the two reads looks the same as a
			// corrupt one: only a status that stayed put is corrupt.
			if now, rerr := c.r.JobStatus(ctx, jid); rerr == nil && !proto.Equal(now, st) {
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		cl, err := c.claimEntry(ctx, st.GetStatus(), entry{Entry: e}, queue.PartsAll, true)
		switch {
		case errors.Is(err, errBusy):
			return nil, fmt.Errorf("job %s (%s): %w", jid, queue.JobStateName(st.GetStatus()), queue.ErrLocked)
		case errors.Is(err, errStale):
			continue // it moved between the two reads
		}
		return cl, err
	}
	return nil, fmt.Errorf("job %s: %w: it keeps changing state", jid, queue.ErrLocked)
}

// claimUnreadable claims a job whose status could not be decoded (why),
// in the state of its one entry.
func (c *Client) claimUnreadable(ctx context.Context, jid string, why error) (*Claim, error) {
	found, in, err := c.r.scanEntries(ctx, jid)
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		names := make([]string, len(in))
		for i, s := range in {
			names[i] = queue.JobStateName(s)
		}
		return nil, fmt.Errorf("%w; it has %d state entries (%s), so its state is unknown: run fsck", why, len(found), strings.Join(names, ", "))
	}
	cl, err := c.claimEntry(ctx, in[0], entry{Entry: found[0]}, queue.PartsAll, true)
	switch {
	case errors.Is(err, errBusy):
		return nil, fmt.Errorf("job %s (%s, status unreadable): %w", jid, queue.JobStateName(in[0]), queue.ErrLocked)
	case err != nil:
		return nil, err
	}
	if cl.StatusErr == nil {
		// Mended since it was read: claimed as any job is.
		cl.Release(context.WithoutCancel(ctx))
		return nil, errStale
	}
	return cl, nil
}
