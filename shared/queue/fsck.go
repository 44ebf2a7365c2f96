package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Kinds of damage fsck finds. A non-atomic writer (the Merritt library
// writes a transition as several calls) that crashes half-way leaves these.
const (
	DamageJobInTwoStates   = "job-in-two-states"   // entries in more than one state folder, or in the wrong one
	DamageJobInNoState     = "job-in-no-state"     // no entry in any state folder
	DamageJobNoStatus      = "job-without-status"  // a job node with no status (creation cut short)
	DamageStatusUnreadable = "status-unreadable"   // status JSON another writer broke
	DamageEntryNoJob       = "entry-without-job"   // a state entry whose job is gone
	DamageRefMismatch      = "batch-ref-mismatch"  // batch reference disagrees with the job's status
	DamageRefMissing       = "batch-ref-missing"   // a job its batch does not reference
	DamageRefNoJob         = "ref-without-job"     // a batch reference to a missing job
	DamageUUIDDangling     = "batch-uuid-dangling" // /batch-uuids entry pointing nowhere
	DamageBatchRemnant     = "batch-remnant"       // a batch node without status (deleted or cut short)
)

// Damage is one inconsistency fsck found.
type Damage struct {
	Kind     string
	Item     string // jid, bid or uuid
	Detail   string
	Repaired bool
	Error    string // why a repair failed or was skipped
}

// FsckOptions configure Fsck.
type FsckOptions struct {
	Repair bool
	// Grace protects items being created right now: a node without status
	// younger than this is not damage yet (default 1 minute).
	Grace time.Duration
}

// FsckReport is what Fsck found (and repaired).
type FsckReport struct {
	JobsChecked    int
	BatchesChecked int
	Damages        []Damage
}

// Clean reports whether nothing was found.
func (r *FsckReport) Clean() bool { return len(r.Damages) == 0 }

type refLoc struct{ bid, folder string }

type entryLoc struct {
	state JobState
	name  string
}

// Fsck checks the whole tree against the contract and, with Repair, mends
// what it finds. Each repair is done under the item's lock and re-checked
// there, so fsck can run beside live consumers.
func (c *Client) Fsck(ctx context.Context, opts FsckOptions) (*FsckReport, error) {
	if opts.Grace <= 0 {
		opts.Grace = time.Minute
	}
	rep := &FsckReport{}
	add := func(d Damage) { rep.Damages = append(rep.Damages, d) }

	// Status versions first, entries and references next, status versions
	// again after: a job whose status did not change across the listing
	// (every transition writes the status) cannot be caught mid-move, so
	// what disagrees for it is real damage. Jobs that moved are skipped.
	names, _, err := c.children(ctx, c.p.jobs())
	if err != nil {
		return nil, err
	}
	var jids []string
	for _, n := range names {
		if ValidJobID(n) {
			jids = append(jids, n)
		}
	}
	slices.Sort(jids)
	before := c.statusVersions(ctx, jids)

	// Every state entry, by jid.
	entries := map[string][]entryLoc{}
	for _, s := range jobStates {
		names, _, err := c.children(ctx, c.p.jobStateDir(s))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("fsck: listing %s: %w", JobStateName(s), err)
		}
		for _, n := range names {
			if _, jid, ok := parseEntry(n); ok {
				entries[jid] = append(entries[jid], entryLoc{s, n})
			}
		}
	}
	// Every batch reference, by jid; batch remnants on the way.
	refs := map[string][]refLoc{}
	bids, err := c.ListBatchIDs(ctx)
	if err != nil {
		return nil, err
	}
	batchExists := map[string]bool{}
	for _, bid := range bids {
		rep.BatchesChecked++
		children, stat, err := c.children(ctx, c.p.batch(bid))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !slices.Contains(children, nodeStatus) {
			if time.Since(time.UnixMilli(stat.Ctime)) < opts.Grace && len(children) == 0 {
				continue
			}
			d := Damage{Kind: DamageBatchRemnant, Item: bid, Detail: fmt.Sprintf("batch node without status (children: %v)", children)}
			if opts.Repair {
				c.repair(&d, func() error { return c.deleteBatchTree(ctx, bid, "") })
			}
			add(d)
			continue
		}
		batchExists[bid] = true
		got, err := c.BatchJobIDs(ctx, bid)
		if err != nil {
			return nil, err
		}
		for f, jids := range got {
			for _, jid := range jids {
				refs[jid] = append(refs[jid], refLoc{bid, f})
			}
		}
	}
	// Dangling uuids.
	uuids, _, err := c.children(ctx, c.p.batchUUIDs())
	if err != nil {
		return nil, err
	}
	for _, u := range uuids {
		data, _, err := c.get(ctx, c.p.batchUUID(u))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if !batchExists[string(data)] {
			d := Damage{Kind: DamageUUIDDangling, Item: u, Detail: fmt.Sprintf("points to %q, which does not exist", data)}
			if opts.Repair {
				c.repair(&d, func() error {
					_, err := c.multi(ctx, deleteOp(c.p.batchUUID(u), -1))
					return err
				})
			}
			add(d)
		}
	}
	// Jobs.
	jobSet := map[string]bool{}
	for _, jid := range jids {
		jobSet[jid] = true
	}
	var mu sync.Mutex
	eachAtMost(len(jids), 32, func(i int) {
		jid := jids[i]
		v, ok := before[jid]
		ds := c.fsckJob(ctx, jid, v, ok, entries[jid], refs[jid], opts)
		mu.Lock()
		rep.JobsChecked++
		rep.Damages = append(rep.Damages, ds...)
		mu.Unlock()
	})
	// Entries and references whose job is gone.
	// A job created after the listing is not in jobSet: ask again.
	gone := func(jid string) bool {
		ok, _, err := c.exists(ctx, c.p.job(jid))
		return err == nil && !ok
	}
	for jid, locs := range entries {
		if jobSet[jid] || !gone(jid) {
			continue
		}
		for _, l := range locs {
			d := Damage{Kind: DamageEntryNoJob, Item: jid, Detail: "/jobs/states/" + jobStateSegment(l.state) + "/" + l.name}
			if opts.Repair {
				c.repair(&d, func() error {
					_, err := c.multi(ctx, deleteOp(c.p.jobStateDir(l.state)+"/"+l.name, -1))
					return err
				})
			}
			add(d)
		}
	}
	for jid, locs := range refs {
		if jobSet[jid] || !gone(jid) {
			continue
		}
		for _, l := range locs {
			if l.folder == folderDeleted {
				continue // a deleted job's reference outlives it by design
			}
			d := Damage{Kind: DamageRefNoJob, Item: jid, Detail: fmt.Sprintf("/batches/%s/states/%s/%s", l.bid, l.folder, jid)}
			if opts.Repair {
				c.repair(&d, func() error {
					_, err := c.multi(ctx, deleteOp(c.p.batchRef(l.bid, l.folder, jid), -1))
					return err
				})
			}
			add(d)
		}
	}
	slices.SortFunc(rep.Damages, func(a, b Damage) int {
		if a.Item != b.Item {
			if a.Item < b.Item {
				return -1
			}
			return 1
		}
		if a.Kind < b.Kind {
			return -1
		}
		if a.Kind > b.Kind {
			return 1
		}
		return 0
	})
	return rep, nil
}

func (c *Client) repair(d *Damage, fn func() error) {
	if err := fn(); err != nil {
		d.Error = err.Error()
		return
	}
	d.Repaired = true
}

// fsckJob checks one job's status against its state entries and batch reference.
func (c *Client) fsckJob(ctx context.Context, jid string, before int32, hadStatus bool, ents []entryLoc, refs []refLoc, opts FsckOptions) []Damage {
	var out []Damage
	data, stat, err := c.get(ctx, c.p.jobStatus(jid))
	if err == nil && (!hadStatus || stat.Version != before) {
		return nil // it moved while fsck listed: not damage
	}
	if errors.Is(err, zk.ErrNoNode) {
		_, jstat, err := c.exists(ctx, c.p.job(jid))
		if err != nil || jstat == nil || time.Since(time.UnixMilli(jstat.Ctime)) < opts.Grace {
			return nil
		}
		d := Damage{Kind: DamageJobNoStatus, Item: jid, Detail: "job node without status (its creation was cut short)"}
		if opts.Repair {
			c.repair(&d, func() error {
				_, err := c.deleteJobTrees(ctx, []string{jid})
				return err
			})
		}
		return append(out, d)
	}
	if err != nil {
		return []Damage{{Kind: DamageStatusUnreadable, Item: jid, Error: err.Error()}}
	}
	st, err := decodeJobStatus(c.p.jobStatus(jid), data)
	if err != nil {
		return []Damage{{Kind: DamageStatusUnreadable, Item: jid, Detail: err.Error()}}
	}
	state := st.GetStatus()
	bidData, _, _ := c.get(ctx, c.p.jobNode(jid, nodeBid))
	bid := string(bidData)

	var right, wrong []entryLoc
	for _, e := range ents {
		if e.state == state {
			right = append(right, e)
		} else {
			wrong = append(wrong, e)
		}
	}
	wantFolder := batchFolder(state)
	var refRight bool
	var refWrong []refLoc
	for _, r := range refs {
		if r.bid == bid && r.folder == wantFolder {
			refRight = true
		} else {
			refWrong = append(refWrong, r)
		}
	}
	entryOK := len(right) == 1 && len(wrong) == 0
	refOK := refRight && len(refWrong) == 0
	if bid != "" && !c.batchPresent(ctx, bid) {
		refOK = true // its batch is gone: nothing to reference it from
	}
	if entryOK && refOK {
		return nil
	}
	var ds []*Damage
	if !entryOK {
		kind := DamageJobInTwoStates
		if len(ents) == 0 {
			kind = DamageJobInNoState
		}
		ds = append(ds, &Damage{Kind: kind, Item: jid, Detail: fmt.Sprintf("status %s, entries %v", JobStateName(state), describeEntries(ents))})
	}
	if !refOK {
		kind := DamageRefMismatch
		if len(refs) == 0 {
			kind = DamageRefMissing
		}
		ds = append(ds, &Damage{Kind: kind, Item: jid, Detail: fmt.Sprintf("status %s wants %s/%s, found %v", JobStateName(state), bid, wantFolder, refs)})
	}
	if opts.Repair {
		err := c.repairJob(ctx, jid, stat.Version, state, bid, right, wrong, refRight, refWrong, entryOK, refOK)
		for _, d := range ds {
			if err != nil {
				d.Error = err.Error()
			} else {
				d.Repaired = true
			}
		}
	}
	for _, d := range ds {
		out = append(out, *d)
	}
	return out
}

// statusVersions reads the status version of each job (missing ones are absent).
func (c *Client) statusVersions(ctx context.Context, jids []string) map[string]int32 {
	out := make(map[string]int32, len(jids))
	var mu sync.Mutex
	eachAtMost(len(jids), 64, func(i int) {
		if ok, st, err := c.exists(ctx, c.p.jobStatus(jids[i])); err == nil && ok {
			mu.Lock()
			out[jids[i]] = st.Version
			mu.Unlock()
		}
	})
	return out
}

func (c *Client) batchPresent(ctx context.Context, bid string) bool {
	ok, _, err := c.exists(ctx, c.p.batchStatus(bid))
	return err != nil || ok
}

func describeEntries(ents []entryLoc) []string {
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = jobStateSegment(e.state) + "/" + e.name
	}
	return out
}

// repairJob mends one job under its lock: the entry and reference its status
// calls for are made to exist, every other one is removed, in one multi
// fenced by the status version read before.
func (c *Client) repairJob(ctx context.Context, jid string, version int32, state JobState, bid string,
	right, wrong []entryLoc, refRight bool, refWrong []refLoc, entryOK, refOK bool) error {
	ops := []any{checkOp(c.p.jobStatus(jid), version), c.createOp(c.p.jobLock(jid), nil, zk.FlagEphemeral)}
	if !entryOK {
		for _, e := range wrong {
			ops = append(ops, deleteOp(c.p.jobStateDir(e.state)+"/"+e.name, -1))
		}
		for _, e := range right[min(1, len(right)):] {
			ops = append(ops, deleteOp(c.p.jobStateDir(e.state)+"/"+e.name, -1))
		}
		if len(right) == 0 {
			prio := int32(DefaultPriority)
			if d, _, err := c.get(ctx, c.p.jobNode(jid, nodePriority)); err == nil {
				if n, err := decodeInt("", d); err == nil {
					prio = int32(n)
				}
			}
			ops = append(ops, c.createOp(c.p.jobEntry(state, prio, jid), nil, 0))
		}
	}
	if !refOK {
		for _, r := range refWrong {
			ops = append(ops, deleteOp(c.p.batchRef(r.bid, r.folder, jid), -1))
		}
		if !refRight && bid != "" {
			if _, err := c.locateRef(ctx, bid, jid); err != nil { // makes the folders exist
				return err
			}
			ops = append(ops, c.createOp(c.p.batchRef(bid, batchFolder(state), jid), nil, 0))
		}
		ops = append(ops, setOp(c.p.batchFolder(bid, folderProcessing), nil, -1))
	}
	ops = append(ops, deleteOp(c.p.jobLock(jid), -1))
	_, err := c.multi(ctx, ops...)
	switch idx := failedOp(err); {
	case err == nil:
		return nil
	case idx == 0:
		return fmt.Errorf("job changed during fsck; run it again: %w", err)
	case idx == 1:
		return fmt.Errorf("job is being worked on; %w", ErrLocked)
	}
	return err
}
