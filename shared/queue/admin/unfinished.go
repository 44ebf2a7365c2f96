package admin

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// unfinished is what a node without status (a job's or a batch's) shows of
// the writer that made it: whether it is still at work, and when it last
// was.
type unfinished struct {
	children []string
	data     []byte    // the node's own data
	newest   time.Time // the latest creation or change of the node or of a child
	// liveLock: a "lock" child that a live session holds (ephemeral):
	// Merritt's Java library holds the job's lock while it creates the job.
	liveLock bool
	done     bool // it has a status: its writer finished it
}

// readUnfinished reads the node dir, listed with children and stat, and
// each of its children.
func (t *base) readUnfinished(ctx context.Context, dir string, children []string, stat *zk.Stat) (unfinished, error) {
	ev := unfinished{children: children, done: slices.Contains(children, queue.NodeStatus)}
	ps := []string{dir}
	for _, c := range children {
		ps = append(ps, dir+"/"+c)
	}
	read, err := t.z.Read(ctx, ps)
	if err != nil {
		return ev, err
	}
	if stat != nil {
		ev.newest = later(ev.newest, stat)
	}
	for i, r := range read {
		if r.Stat == nil {
			continue
		}
		ev.newest = later(ev.newest, r.Stat)
		if i == 0 {
			ev.data = r.Data
			continue
		}
		if path.Base(ps[i]) == queue.NodeLock && r.Stat.EphemeralOwner != 0 {
			ev.liveLock = true
		}
	}
	return ev, nil
}

// later is the later of at and the creation and last change of the node
// stat describes.
func later(at time.Time, stat *zk.Stat) time.Time {
	for _, ms := range []int64{stat.Ctime, stat.Mtime} {
		if t := time.UnixMilli(ms); t.After(at) {
			at = t
		}
	}
	return at
}

// jobWithoutStatus looks at a job node found without status: damage (ok)
// only when no writer is at it or will come back to it. A live session's
// lock under it (Merritt's Java library locks a job while it creates it),
// a batch whose spawning a batcher holds (the node is an id reserved for
// it), or a change to it or a child within the grace says a creation is
// under way. Its detail says what it is and what to do.
func (t *base) jobWithoutStatus(ctx context.Context, jid string, opts FsckOptions) (Damage, bool) {
	dir := t.p.Job(jid).Dir()
	children, stat, err := t.z.Children(ctx, dir)
	if err != nil {
		return Damage{}, false
	}
	ev, err := t.readUnfinished(ctx, dir, children, stat)
	if err != nil || ev.done || ev.liveLock {
		return Damage{}, false
	}
	age := opts.Now.Sub(ev.newest)
	if age < opts.Grace {
		return Damage{}, false
	}
	d := Damage{Kind: DamageJobNoStatus, Item: jid, Reclaimable: true}
	const remove = "the janitor removes it once unchanged for INGESTQ_RECLAIM_GRACE; to remove it at once, run Fsck with repair"
	if bid, ok := queue.JobReservationBatch(ev.data); ok && len(children) == 0 {
		read, err := t.z.Read(ctx, []string{t.p.Batch(bid).Node(queue.NodeSpawning), t.p.Batch(bid).Lock()})
		if err != nil {
			return Damage{}, false
		}
		spawning, locked := read[0].Stat != nil, read[1].Stat != nil
		if spawning && locked {
			return Damage{}, false // the batcher creating the batch's jobs ends with it
		}
		d.Detail = fmt.Sprintf("job id reserved for batch %s and never written, unchanged for %s: the batcher creating the batch's jobs stopped "+
			"between reserving ids and writing them, and nothing will write it. Nothing is lost (the batch's rows were made jobs under other ids)",
			bid, age.Round(time.Second))
		if spawning {
			d.Detail += "; the batcher that finishes the batch removes it, or " + remove
		} else {
			d.Detail += "; " + remove
		}
		return d, true
	}
	what := "none"
	if len(children) > 0 {
		what = strings.Join(children, ", ")
	}
	d.Detail = fmt.Sprintf("job node without status, unchanged for %s (children: %s): its creation was cut short (a writer such as "+
		"a Merritt producer's createJob stopped before the status), and nothing will finish it; %s. No consumer ever took it: if its batch "+
		"should have had it, submit that object again", age.Round(time.Second), what, remove)
	return d, true
}

// removeUnfinished removes a job node without status, its children and
// any state entry of it (ents), in one multi: a child made meanwhile (its
// writer came back) fails it, and a lock a live session took since refuses
// it.
func (t *base) removeUnfinished(ctx context.Context, jid string, ents []entryLoc) error {
	dir := t.p.Job(jid).Dir()
	children, _, err := t.z.Children(ctx, dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if slices.Contains(children, queue.NodeStatus) {
		return fmt.Errorf("job %s has a status: its writer finished it", jid)
	}
	if slices.Contains(children, queue.NodeLock) {
		if _, st, err := t.z.Get(ctx, dir+"/"+queue.NodeLock); err == nil && st.EphemeralOwner != 0 {
			return fmt.Errorf("job %s: a live session holds its lock: %w", jid, queue.ErrLocked)
		}
	}
	txn := t.z.Txn()
	for _, e := range ents {
		txn.Then(session.Delete("state entry", t.p.StateDir(e.state)+"/"+e.name, -1))
	}
	for _, c := range children {
		txn.Then(session.Delete(c, dir+"/"+c, -1))
	}
	txn.Then(session.Delete("job node", dir, -1))
	if err := txn.Commit(ctx); err != nil {
		if errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("job %s changed while being removed; run fsck again: %w", jid, err)
		}
		return err
	}
	return nil
}
