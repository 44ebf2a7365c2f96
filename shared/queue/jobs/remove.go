package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// removeChunk is how many deletions go into one multi when removing jobs.
const removeChunk = 500

// RemoveJobs removes jobs entirely, their nodes and state entries, in
// multis of a bounded size; their batch references are left to the caller
// (the batch being removed, or fsck). It returns the jobs as they were, for
// their working directories. A job someone holds stops the removal
// (queue.ErrLocked); so does one that moves meanwhile: each status is
// deleted at the version read.
func (c *Client) RemoveJobs(ctx context.Context, jids []string) ([]*v1.Job, error) {
	var ops []session.Op
	var jobs []*v1.Job
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := c.z.Txn().Then(ops...).Commit(ctx)
		ops = ops[:0]
		if errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("a job changed while being deleted (%v): %w", err, queue.ErrLocked)
		}
		return err
	}
	for _, jid := range jids {
		children, _, err := c.z.Children(ctx, c.p.Job(jid).Dir())
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if slices.Contains(children, queue.NodeLock) {
			return nil, fmt.Errorf("job %s: %w", jid, queue.ErrLocked)
		}
		job := &v1.Job{Id: jid}
		// The status is deleted at the version read: a job that moves
		// meanwhile stops the deletion rather than leave its new entry
		// behind.
		statusVersion := int32(-1)
		if data, st, err := c.z.Get(ctx, c.p.Job(jid).Status()); err == nil {
			job.Status, _ = queue.DecodeJobStatus("", data)
			statusVersion = st.Version
		}
		c.r.readJobData(ctx, job, queue.JobDataNodes(), nil)
		jobs = append(jobs, job)
		if job.Status != nil {
			if e, err := c.r.findEntry(ctx, job.Status.GetStatus(), jid); err == nil {
				ops = append(ops, session.Delete(opEntry, c.p.StateDir(job.Status.GetStatus())+"/"+e.Name, -1))
			}
		} else {
			// An unreadable status cannot say where the entry is: a
			// scan finds it, or it would outlive its job.
			found, in, err := c.r.scanEntries(ctx, jid)
			if err != nil {
				return nil, err
			}
			for i, e := range found {
				ops = append(ops, session.Delete(opEntry, c.p.StateDir(in[i])+"/"+e.Name, -1))
			}
		}
		for _, n := range children {
			v := int32(-1)
			if n == queue.NodeStatus {
				v = statusVersion
			}
			ops = append(ops, session.Delete(opRemove, c.p.Job(jid).Node(n), v))
		}
		ops = append(ops, session.Delete(opRemove, c.p.Job(jid).Dir(), -1))
		if len(ops) >= removeChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	return jobs, flush()
}
