package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
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
	// A job whose bid names no batch that exists: its batch was deleted
	// under it, or its writer never made one. A live job is failed.
	DamageJobNoBatch = "job-without-batch"
	// A job lock no session holds (a persistent node): it would hold the
	// job for ever. A live job is failed, and the lock removed.
	DamageLockNotEphemeral = "lock-not-ephemeral"
	// A status whose state has no entry while another state has one: a
	// move left half-done, or a forged status. It is finished only when
	// the move is one the state machine allows and the job has what that
	// state needs (a store after processing, an inventory after storing); otherwise the
	// job is failed (held, if it is held) with a message, never taken to
	// a state it did not reach.
	DamageStatusMismatch = "status-disagrees-with-entry"
	// A priority node that is not a number in 0..2^31: the job is read
	// at its entry's priority; the repair writes that.
	DamagePriorityUnreadable = "priority-unreadable"
)

// Damage is one inconsistency fsck found.
type Damage struct {
	Kind     string
	Item     string // jid, bid or uuid
	Detail   string
	Repaired bool
	Error    string // why a repair failed or was skipped
	// Reclaimable: the damage is garbage no writer will finish, and its
	// repair removes only it (a job or batch node without status left
	// unchanged past the grace, an entry or reference whose job is gone,
	// a batch uuid pointing nowhere). The janitor repairs such damage
	// unattended (FsckOptions.Reclaim); the rest waits for an operator.
	Reclaimable bool
}

// FsckOptions configure Fsck.
type FsckOptions struct {
	Repair bool
	// Grace protects items being created right now: a job or batch node
	// without status is damage only once neither it nor any of its
	// children has changed for this long, and no live session holds its
	// lock (default 1 minute).
	Grace time.Duration
	// Now is the time ages are measured to (default: the clock's).
	Now time.Time
	// Reclaim, when set, limits the repairs to reclaimable damage
	// (Damage.Reclaimable) that it accepts, and the checks to what may be
	// garbage: jobs with a status are not read one by one (their damage
	// is for an operator), which keeps the janitor's rounds cheap. What
	// is found and not accepted is reported and left.
	Reclaim func(Damage) bool
}

// repairs says whether a run with these options repairs d.
func (o FsckOptions) repairs(d Damage) bool {
	if !o.Repair {
		return false
	}
	return o.Reclaim == nil || (d.Reclaimable && o.Reclaim(d))
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
	state    queue.JobState
	name     string
	priority int32 // what the entry's name orders the job at
}

// Fsck checks the whole tree against the contract and, with Repair, mends
// what it finds. Each repair is done under the item's lock and re-checked
// there, so fsck can run beside live consumers.
//
// It runs in phases: list the jobs and read their status versions; read
// every state entry; check the batches (and read their references); check
// the batch uuids; check each job (status, entries, reference, batch, lock,
// priority, and its repairs); check the entries and references whose job is
// gone.
func (t *Queue) Fsck(ctx context.Context, opts FsckOptions) (*FsckReport, error) {
	if opts.Grace <= 0 {
		opts.Grace = time.Minute
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	f := &fsck{t: t.base, opts: opts, rep: &FsckReport{}}
	// Status versions first, entries and references next, status versions
	// again after: a job whose status did not change across the listing
	// (every transition writes the status) cannot be caught mid-move, so
	// what disagrees for it is real damage. Jobs that moved are skipped.
	if err := f.listJobs(ctx); err != nil {
		return nil, err
	}
	if err := f.readEntries(ctx); err != nil {
		return nil, err
	}
	if err := f.checkBatches(ctx); err != nil {
		return nil, err
	}
	if err := f.checkUUIDs(ctx); err != nil {
		return nil, err
	}
	f.checkJobs(ctx)
	f.checkEntriesWithoutJob(ctx)
	f.checkRefsWithoutJob(ctx)
	f.rep.sortDamages()
	return f.rep, nil
}

// fsck is one run of Fsck: what it read of the tree, and what it found.
type fsck struct {
	t    *base
	opts FsckOptions
	rep  *FsckReport

	jids        []string              // the jobs listed, sorted
	jobSet      map[string]bool       // jids, as a set
	before      map[string]int32      // status versions read before the entries and references
	entries     map[string][]entryLoc // every state entry, by jid
	refs        map[string][]refLoc   // every batch reference, by jid
	batchExists map[string]bool       // batches with a status
}

func (f *fsck) add(d Damage) { f.rep.Damages = append(f.rep.Damages, d) }

// repair runs fn on d when the run repairs it, and adds d to the report.
func (f *fsck) repair(d Damage, fn func() error) {
	if f.opts.repairs(d) {
		f.t.repair(&d, fn)
	}
	f.add(d)
}

// listJobs lists the jobs and reads their status versions.
func (f *fsck) listJobs(ctx context.Context) error {
	names, _, err := f.t.z.Children(ctx, f.t.p.Jobs())
	if err != nil {
		return err
	}
	f.jobSet = map[string]bool{}
	for _, n := range names {
		if queue.ValidJobID(n) {
			f.jids = append(f.jids, n)
			f.jobSet[n] = true
		}
	}
	slices.Sort(f.jids)
	f.before = f.t.statusVersions(ctx, f.jids)
	return nil
}

// readEntries reads every state entry, by jid.
func (f *fsck) readEntries(ctx context.Context) error {
	f.entries = map[string][]entryLoc{}
	for _, s := range queue.JobStates() {
		names, _, err := f.t.z.Children(ctx, f.t.p.StateDir(s))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fsck: listing %s: %w", queue.JobStateName(s), err)
		}
		for _, n := range names {
			if e, ok := queue.ParseEntry(n); ok {
				f.entries[e.JID] = append(f.entries[e.JID], entryLoc{s, n, e.Priority})
			}
		}
	}
	return nil
}

// checkBatches reads every batch's references, by jid, and finds batch
// remnants (a batch node without status older than the grace).
func (f *fsck) checkBatches(ctx context.Context) error {
	f.refs = map[string][]refLoc{}
	f.batchExists = map[string]bool{}
	bids, err := f.t.batches.ListBatchIDs(ctx)
	if err != nil {
		return err
	}
	for _, bid := range bids {
		f.rep.BatchesChecked++
		children, stat, err := f.t.z.Children(ctx, f.t.p.Batch(bid).Dir())
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if !slices.Contains(children, queue.NodeStatus) {
			// A batch being created (the library writes its node, its
			// uuid, its submission, then its status) or deleted changes;
			// one left half-done does not.
			ev, err := f.t.readUnfinished(ctx, f.t.p.Batch(bid).Dir(), children, stat)
			if err != nil {
				return err
			}
			age := f.opts.Now.Sub(ev.newest)
			if ev.done || ev.liveLock || age < f.opts.Grace {
				continue
			}
			f.repair(Damage{Kind: DamageBatchRemnant, Item: bid, Reclaimable: true, Detail: fmt.Sprintf(
				"batch node without status, unchanged for %s (children: %v): its creation or deletion was cut short and no writer finishes it. "+
					"Nothing in it is a batch any consumer takes: the janitor removes it after INGESTQ_RECLAIM_GRACE, Fsck with repair at once",
				age.Round(time.Second), children)},
				func() error { return f.t.batches.RemoveBatchTree(ctx, bid, "") })
			continue
		}
		f.batchExists[bid] = true
		got, err := f.t.reader.BatchJobIDs(ctx, bid)
		if err != nil {
			return err
		}
		for folder, jids := range got {
			for _, jid := range jids {
				f.refs[jid] = append(f.refs[jid], refLoc{bid, folder})
			}
		}
	}
	return nil
}

// checkUUIDs finds /batch-uuids entries pointing at no batch.
func (f *fsck) checkUUIDs(ctx context.Context) error {
	uuids, _, err := f.t.z.Children(ctx, f.t.p.BatchUUIDs())
	if err != nil {
		return err
	}
	for _, u := range uuids {
		data, _, err := f.t.z.Get(ctx, f.t.p.BatchUUID(u))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if !f.batchExists[string(data)] {
			// A batch node without status is one being created (the
			// library writes the uuid before the status) or a remnant,
			// which is reported on its own: the uuid waits for it.
			if queue.ValidBatchID(string(data)) {
				ok, _, err := f.t.z.Exists(ctx, f.t.p.Batch(string(data)).Dir())
				if err != nil {
					return err
				}
				if ok {
					continue
				}
			}
			f.repair(Damage{Kind: DamageUUIDDangling, Item: u, Reclaimable: true, Detail: fmt.Sprintf("points to %q, which does not exist", data)},
				func() error {
					return f.t.z.Txn().Then(session.Delete("batch id", f.t.p.BatchUUID(u), -1)).Commit(ctx)
				})
		}
	}
	return nil
}

// checkJobs checks (and repairs) each listed job, several at a time. A run
// that only reclaims garbage looks only at the jobs without a status: the
// damage of one with a status is never garbage.
func (f *fsck) checkJobs(ctx context.Context) {
	jids := f.jids
	if f.opts.Reclaim != nil {
		jids = slices.DeleteFunc(slices.Clone(jids), func(jid string) bool {
			_, ok := f.before[jid]
			return ok
		})
	}
	var mu sync.Mutex
	session.EachAtMost(len(jids), 32, func(i int) {
		jid := jids[i]
		v, ok := f.before[jid]
		ds := f.t.fsckJob(ctx, jid, v, ok, f.entries[jid], f.refs[jid], f.opts)
		mu.Lock()
		f.rep.JobsChecked++
		f.rep.Damages = append(f.rep.Damages, ds...)
		mu.Unlock()
	})
}

// gone reports whether a job not listed is still absent: one created
// after the listing is not in jobSet.
func (f *fsck) gone(ctx context.Context, jid string) bool {
	if f.jobSet[jid] {
		return false
	}
	ok, _, err := f.t.z.Exists(ctx, f.t.p.Job(jid).Dir())
	return err == nil && !ok
}

// checkEntriesWithoutJob finds state entries whose job is gone.
func (f *fsck) checkEntriesWithoutJob(ctx context.Context) {
	for jid, locs := range f.entries {
		if !f.gone(ctx, jid) {
			continue
		}
		for _, l := range locs {
			f.repair(Damage{Kind: DamageEntryNoJob, Item: jid, Reclaimable: true, Detail: "/jobs/states/" + queue.StateSegment(l.state) + "/" + l.name},
				func() error {
					return f.t.z.Txn().Then(session.Delete("state entry", f.t.p.StateDir(l.state)+"/"+l.name, -1)).Commit(ctx)
				})
		}
	}
}

// checkRefsWithoutJob finds batch references whose job is gone, but for
// the deleted folder's: a deleted job's reference outlives it by design.
func (f *fsck) checkRefsWithoutJob(ctx context.Context) {
	for jid, locs := range f.refs {
		if !f.gone(ctx, jid) {
			continue
		}
		for _, l := range locs {
			if l.folder == queue.FolderDeleted {
				continue
			}
			f.repair(Damage{Kind: DamageRefNoJob, Item: jid, Reclaimable: true, Detail: fmt.Sprintf("/batches/%s/states/%s/%s", l.bid, l.folder, jid)},
				func() error {
					return f.t.z.Txn().Then(session.Delete("batch reference", f.t.p.Batch(l.bid).Ref(l.folder, jid), -1)).Commit(ctx)
				})
		}
	}
}

// sortDamages orders the findings by item, then kind.
func (r *FsckReport) sortDamages() {
	slices.SortFunc(r.Damages, func(a, b Damage) int {
		if c := strings.Compare(a.Item, b.Item); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
}

func (t *base) repair(d *Damage, fn func() error) {
	if err := fn(); err != nil {
		d.Error = err.Error()
		return
	}
	d.Repaired = true
}

// fsckJob checks one job's status against its state entries, batch
// reference, batch, lock and priority, and with Repair mends them: read
// the job; place its entries and reference against its status; find what
// is wrong; then repair its lock (alone: the other repairs need the lock),
// else its priority, its batch and its entries and reference.
func (t *base) fsckJob(ctx context.Context, jid string, before int32, hadStatus bool, ents []entryLoc, refs []refLoc, opts FsckOptions) []Damage {
	j := &jobCheck{t: t, jid: jid, ents: ents, refs: refs}
	if ds, done := j.read(ctx, before, hadStatus, opts); done {
		return ds
	}
	j.place(j.state)
	j.entryOK = len(j.right) == 1 && len(j.wrong) == 0
	j.refOK = j.refRight && len(j.refWrong) == 0
	j.noBatch = !queue.ValidBatchID(j.bid) || !t.batchPresent(ctx, j.bid)
	if j.noBatch {
		// Nothing can reference it where its status wants (reported
		// below); a reference from another batch is still wrong.
		j.refOK = len(j.refWrong) == 0
	}
	j.find()
	// What remains is damage to a job some writer may finish, or that an
	// operator decides: never reclaimed unattended.
	if !opts.Repair || opts.Reclaim != nil {
		return j.damages()
	}
	// A lock no session holds comes first: every other repair needs the
	// job's lock, and this one moves the job.
	if j.lockD != nil {
		j.repairLock(ctx)
		return j.damages()
	}
	j.repairPriority(ctx)
	j.repairBatch(ctx)
	j.repairPlacement(ctx)
	return j.damages()
}

// jobCheck is fsck's look at one job: what it read, and what it found.
type jobCheck struct {
	t    *base
	jid  string
	ents []entryLoc // the job's state entries
	refs []refLoc   // the batch references to it

	data         []byte // the status, as read
	stat         *zk.Stat
	st           *v1.JobStatus
	state        queue.JobState
	bid          string
	hasStore     bool
	hasInventory bool
	priority     []byte   // the priority node, as read (nil: none)
	lock         *zk.Stat // the job's lock node (nil: none)

	// Entries and references placed against a state (place): those a job
	// in it has (right, refRight) and the others.
	right, wrong []entryLoc
	refRight     bool
	refWrong     []refLoc
	entryOK      bool
	refOK        bool
	noBatch      bool // its bid names no batch that exists

	lockD, prioD, batchD *Damage
	// target is what entries and reference are mended toward (0: left
	// for an operator); why is what the entries show when none is in the
	// status's state.
	target queue.JobState
	why    string
	rest   []Damage // what is wrong with its entries and reference
}

// read reads the job's status and the nodes fsck checks. done is true
// when there is nothing more to check (ds is what was found): the job
// moved while fsck listed, or its status is missing or unreadable.
func (j *jobCheck) read(ctx context.Context, before int32, hadStatus bool, opts FsckOptions) (ds []Damage, done bool) {
	t, jid := j.t, j.jid
	data, stat, err := t.z.Get(ctx, t.p.Job(jid).Status())
	if err == nil && (!hadStatus || stat.Version != before) {
		return nil, true // it moved while fsck listed: not damage
	}
	if errors.Is(err, zk.ErrNoNode) {
		d, ok := t.jobWithoutStatus(ctx, jid, opts)
		if !ok {
			return nil, true
		}
		if opts.repairs(d) {
			t.repair(&d, func() error { return t.removeUnfinished(ctx, jid, j.ents) })
		}
		return []Damage{d}, true
	}
	if err != nil {
		return []Damage{{Kind: DamageStatusUnreadable, Item: jid, Error: err.Error()}}, true
	}
	st, err := queue.DecodeJobStatus(t.p.Job(jid).Status(), data)
	if err != nil {
		return []Damage{{Kind: DamageStatusUnreadable, Item: jid, Detail: err.Error()}}, true
	}
	read, err := t.z.Read(ctx, []string{t.p.Job(jid).Node(queue.NodeBid), t.p.Job(jid).Node(queue.NodePriority),
		t.p.Job(jid).Node(queue.NodeStore), t.p.Job(jid).Node(queue.NodeInventory), t.p.Job(jid).Lock()})
	if err != nil {
		return []Damage{{Kind: DamageStatusUnreadable, Item: jid, Error: err.Error()}}, true
	}
	j.data, j.stat, j.st, j.state = data, stat, st, st.GetStatus()
	j.bid, j.priority = string(read[0].Data), read[1].Data
	j.hasStore, j.hasInventory = read[2].Stat != nil, read[3].Stat != nil
	j.lock = read[4].Stat
	return nil, false
}

// place sorts the job's entries and references into those a job in state
// s has and the others.
func (j *jobCheck) place(s queue.JobState) {
	j.right, j.wrong = nil, nil
	for _, e := range j.ents {
		if e.state == s {
			j.right = append(j.right, e)
		} else {
			j.wrong = append(j.wrong, e)
		}
	}
	j.refRight, j.refWrong = false, nil
	for _, r := range j.refs {
		if r.bid == j.bid && r.folder == queue.BatchFolderOf(s) {
			j.refRight = true
		} else {
			j.refWrong = append(j.refWrong, r)
		}
	}
}

// find names everything wrong with the job, before any repair: its lock,
// its priority, its batch, its entries and reference (and what they are
// mended toward).
func (j *jobCheck) find() {
	jid, state := j.jid, j.state
	if j.lock != nil && j.lock.EphemeralOwner == 0 {
		j.lockD = &Damage{Kind: DamageLockNotEphemeral, Item: jid,
			Detail: fmt.Sprintf("status %s: %s", queue.JobStateName(state), queue.ForeignLockMessage)}
	}
	if d, ok := j.t.priorityDamage(jid, j.priority, j.right); ok {
		j.prioD = &d
	}
	if j.noBatch {
		j.batchD = &Damage{Kind: DamageJobNoBatch, Item: jid, Detail: fmt.Sprintf("status %s: %s", queue.JobStateName(state),
			(&queue.NoBatchError{Job: jid, Batch: j.bid}).Reason())}
	}
	// What entries and reference are mended toward: the status, unless it
	// names a state the entries say the job did not reach.
	j.target = state
	if len(j.right) == 0 && len(j.wrong) > 0 {
		j.target, j.why = j.t.mendMismatch(j.st, j.wrong, j.hasStore, j.hasInventory)
	}
	if !j.entryOK || !j.refOK {
		j.rest = j.t.fsckJobReport(jid, state, j.bid, j.ents, j.refs, j.right, j.wrong, j.refOK, j.why)
	}
}

// damages is what was found, with what became of the repairs.
func (j *jobCheck) damages() []Damage {
	var out []Damage
	for _, d := range []*Damage{j.lockD, j.prioD, j.batchD} {
		if d != nil {
			out = append(out, *d)
		}
	}
	return append(out, j.rest...)
}

// repairLock removes a lock no session holds: a claim fails a job so
// locked (or, held or ended, just removes the lock), with a message
// saying why. The job's other damage waits for the next run.
func (j *jobCheck) repairLock(ctx context.Context) {
	j.t.repair(j.lockD, func() error {
		cl, err := j.t.jobs.ClaimJob(ctx, j.jid)
		if err != nil {
			return err
		}
		return cl.Release(ctx)
	})
	for _, d := range []*Damage{j.prioD, j.batchD} {
		if d != nil {
			d.Error = "the job's lock came first; run fsck again"
		}
	}
	for i := range j.rest {
		j.rest[i].Error = "the job's lock came first; run fsck again"
	}
}

// repairPriority writes the priority the job's one entry orders it at.
func (j *jobCheck) repairPriority(ctx context.Context) {
	if j.prioD == nil || len(j.right) != 1 {
		return
	}
	t, jid := j.t, j.jid
	t.repair(j.prioD, func() error {
		return t.z.Txn().
			If(session.IfVersion(queue.NodeStatus, t.p.Job(jid).Status(), j.stat.Version)).
			Then(session.Set(queue.NodePriority, t.p.Job(jid).Node(queue.NodePriority), queue.EncodeInt(int64(j.right[0].priority)), -1)).
			Commit(ctx)
	})
}

// repairBatch fails a live job whose batch does not exist; others are
// left for an operator.
func (j *jobCheck) repairBatch(ctx context.Context) {
	if j.batchD == nil {
		return
	}
	if !queue.CanMoveJob(j.state, queue.Failed) || !j.entryOK {
		j.batchD.Error = fmt.Sprintf("left for an operator: the job is %s (DeleteJob removes it)", queue.JobStateName(j.state))
		return
	}
	j.t.repair(j.batchD, func() error {
		cl, err := j.t.jobs.ClaimJob(ctx, j.jid)
		if err != nil {
			return err
		}
		// The commit finds the batch gone and fails the job without
		// touching the batch.
		if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: "fsck: " + (&queue.NoBatchError{Job: j.jid, Batch: j.bid}).Reason()}); err != nil {
			cl.Release(ctx)
			return err
		}
		return nil
	})
}

// repairPlacement mends the job's entries and reference toward target,
// writing a new status first when target is not the status's state.
func (j *jobCheck) repairPlacement(ctx context.Context) {
	if len(j.rest) == 0 {
		return
	}
	if j.target == 0 {
		for i := range j.rest {
			j.rest[i].Error = "left for an operator: " + j.why
		}
		return
	}
	state, target := j.state, j.target
	var status []byte
	if target != state {
		st := j.st
		next := &v1.JobStatus{Status: target, LastModified: queue.NowStamp(), RetryCount: st.GetRetryCount(),
			LastSuccessfulStatus: lastSuccessfulBefore(st, j.wrong), Traceparent: st.GetTraceparent(),
			Message: fmt.Sprintf("fsck: status said %s, but %s; the job is %s for an operator", queue.JobStateName(state), j.why,
				strings.ToLower(queue.JobStateName(target)))}
		queue.RecordChange(st, next, queue.WorkerFsck, time.Now())
		status = queue.RewriteJobStatus(j.data, next, nil)
		// Entries and reference are mended toward the new state.
		j.place(target)
		j.entryOK, j.refOK = false, j.noBatch && len(j.refWrong) == 0
	}
	if j.noBatch {
		// Which batch the job belongs to is not clear (its bid names none
		// that exists, another batch references it): references are left
		// alone.
		j.refOK = true
	}
	err := j.t.repairJob(ctx, j.jid, j.stat.Version, status, target, j.bid, j.right, j.wrong, j.refRight, j.refWrong, j.entryOK, j.refOK)
	for i := range j.rest {
		switch {
		case j.noBatch && (j.rest[i].Kind == DamageRefMismatch || j.rest[i].Kind == DamageRefMissing):
			j.rest[i].Error = "left for an operator: the job's bid names no batch that exists, and another batch references it"
		case err != nil:
			j.rest[i].Error = err.Error()
		default:
			j.rest[i].Repaired = true
		}
	}
}

// fsckJobReport names what is wrong with a job's entries and batch
// reference; why is what the entries show, when none is in the status's
// state.
func (t *base) fsckJobReport(jid string, state queue.JobState, bid string, ents []entryLoc, refs []refLoc, right, wrong []entryLoc, refOK bool, why string) []Damage {
	var ds []Damage
	switch {
	case len(right) == 1 && len(wrong) == 0:
	case len(ents) == 0:
		ds = append(ds, Damage{Kind: DamageJobInNoState, Item: jid, Detail: fmt.Sprintf("status %s, no entry", queue.JobStateName(state))})
	case len(right) == 0:
		ds = append(ds, Damage{Kind: DamageStatusMismatch, Item: jid,
			Detail: fmt.Sprintf("status %s, entries %v: %s", queue.JobStateName(state), t.describeEntries(ents), why)})
	default:
		ds = append(ds, Damage{Kind: DamageJobInTwoStates, Item: jid, Detail: fmt.Sprintf("status %s, entries %v", queue.JobStateName(state), t.describeEntries(ents))})
	}
	if !refOK {
		kind := DamageRefMismatch
		if len(refs) == 0 {
			kind = DamageRefMissing
		}
		ds = append(ds, Damage{Kind: kind, Item: jid, Detail: fmt.Sprintf("status %s wants %s/%s, found %v", queue.JobStateName(state), bid, queue.BatchFolderOf(state), refs)})
	}
	return ds
}

// lastSuccessfulBefore is the last successful state of a job that fsck
// takes back to the earliest state an entry of it is in
// (queue.ReachedBefore), so that a requeue resumes where the job really
// was. An entry in an ended state keeps what the status says.
func lastSuccessfulBefore(st *v1.JobStatus, wrong []entryLoc) queue.JobState {
	earliest := wrong[0].state
	for _, e := range wrong[1:] {
		if queue.StateIndex(e.state) < queue.StateIndex(earliest) {
			earliest = e.state
		}
	}
	if last, ok := queue.ReachedBefore(earliest); ok {
		return last
	}
	return st.GetLastSuccessfulStatus()
}

// mendMismatch decides what a job whose status names a state none of its
// entries (wrong) is in becomes: the status's state when the job got
// there by a move the state machine allows, from the one state its entry
// is in, and has what that state needs (a store after processing, an inventory
// after storing: a half-done move, to be finished); else Held when its entry
// holds it, else Failed when its entry's state may fail (or is Failed);
// else 0, for an operator. why says what the evidence shows.
func (t *base) mendMismatch(st *v1.JobStatus, wrong []entryLoc, hasStore, hasInventory bool) (queue.JobState, string) {
	state := st.GetStatus()
	if len(wrong) == 1 {
		w := wrong[0].state
		switch {
		case !queue.CanMoveJob(w, state):
			return mendFrom(wrong, fmt.Sprintf("its entry is in %s, and %s → %s is not a move a job makes",
				queue.StateSegment(w), queue.JobStateName(w), queue.JobStateName(state)))
		case !queue.HasWhatItNeeds(state, hasStore, hasInventory):
			return mendFrom(wrong, fmt.Sprintf("its entry is in %s, and it has no %s, which %s needs",
				queue.StateSegment(w), queue.NeededNodes(state), queue.JobStateName(state)))
		}
		return state, fmt.Sprintf("a move %s → %s left half-done", queue.JobStateName(w), queue.JobStateName(state))
	}
	return mendFrom(wrong, fmt.Sprintf("its entries are in %v", t.describeEntries(wrong)))
}

func mendFrom(wrong []entryLoc, why string) (queue.JobState, string) {
	if len(wrong) == 1 && wrong[0].state == queue.Held {
		return queue.Held, why
	}
	for _, e := range wrong {
		if e.state != queue.Failed && !queue.CanMoveJob(e.state, queue.Failed) {
			return 0, why
		}
	}
	return queue.Failed, why
}

// priorityDamage reports a priority node that does not read as a
// priority (a missing one reads as the default).
func (t *base) priorityDamage(jid string, data []byte, right []entryLoc) (Damage, bool) {
	if data == nil {
		return Damage{}, false
	}
	n, err := queue.DecodeInt("", data)
	if err == nil && n >= 0 && n <= math.MaxInt32 {
		return Damage{}, false
	}
	d := Damage{Kind: DamagePriorityUnreadable, Item: jid, Detail: fmt.Sprintf("priority %q is not a priority", queue.Truncate(string(data), 40))}
	if len(right) == 1 {
		d.Detail += fmt.Sprintf("; its entry %s orders it at %d", right[0].name, right[0].priority)
	}
	return d, true
}

// statusVersions reads the status version of each job (missing ones are absent).
func (t *base) statusVersions(ctx context.Context, jids []string) map[string]int32 {
	out := make(map[string]int32, len(jids))
	var mu sync.Mutex
	session.EachAtMost(len(jids), 64, func(i int) {
		if ok, st, err := t.z.Exists(ctx, t.p.Job(jids[i]).Status()); err == nil && ok {
			mu.Lock()
			out[jids[i]] = st.Version
			mu.Unlock()
		}
	})
	return out
}

func (t *base) batchPresent(ctx context.Context, bid string) bool {
	ok, _, err := t.z.Exists(ctx, t.p.Batch(bid).Status())
	return err != nil || ok
}

func (t *base) describeEntries(ents []entryLoc) []string {
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = queue.StateSegment(e.state) + "/" + e.name
	}
	return out
}

// repairJob mends one job under its lock: the entry and reference its status
// (state; status, when not nil, is written as the new status) calls for are
// made to exist, every other one is removed, in one multi fenced by the
// status version read before.
func (t *base) repairJob(ctx context.Context, jid string, version int32, status []byte, state queue.JobState, bid string,
	right, wrong []entryLoc, refRight bool, refWrong []refLoc, entryOK, refOK bool) error {
	txn := t.z.Txn()
	if status != nil {
		txn.Then(session.Set(queue.NodeStatus, t.p.Job(jid).Status(), status, version))
	} else {
		txn.If(session.IfVersion(queue.NodeStatus, t.p.Job(jid).Status(), version))
	}
	// Nobody works on the job meanwhile: its lock is absent, and taken by
	// this very change.
	txn.If(session.IfAbsent(queue.NodeLock, t.p.Job(jid).Lock()))
	if !entryOK {
		for _, e := range wrong {
			txn.Then(session.Delete("state entry", t.p.StateDir(e.state)+"/"+e.name, -1))
		}
		for _, e := range right[min(1, len(right)):] {
			txn.Then(session.Delete("state entry", t.p.StateDir(e.state)+"/"+e.name, -1))
		}
		if len(right) == 0 {
			// An entry's priority is what ordered the job; the priority
			// node only when it has none.
			prio := int32(queue.DefaultPriority)
			if len(wrong) > 0 {
				prio = wrong[0].priority
			} else if d, _, err := t.z.Get(ctx, t.p.Job(jid).Node(queue.NodePriority)); err == nil {
				if n, err := queue.DecodeInt("", d); err == nil && n >= 0 && n <= math.MaxInt32 {
					prio = int32(n)
				}
			}
			txn.Then(session.Create("state entry", t.p.Entry(state, prio, jid), nil, 0))
		}
	}
	if !refOK {
		for _, r := range refWrong {
			txn.Then(session.Delete("batch reference", t.p.Batch(r.bid).Ref(r.folder, jid), -1))
		}
		if !refRight && bid != "" {
			// A peer may create a batch without its folders of references.
			for _, p := range append([]string{t.p.Batch(bid).States()}, t.p.Batch(bid).RefFolders()...) {
				if err := t.z.Ensure(ctx, p); err != nil {
					return err
				}
			}
			txn.Then(session.Create("batch reference", t.p.Batch(bid).Ref(queue.BatchFolderOf(state), jid), nil, 0))
		}
		txn.Then(session.Set("batch reference", t.p.Batch(bid).Folder(queue.FolderProcessing), nil, -1))
	}
	err := txn.Commit(ctx)
	if _, ok := session.RefusedBy(err, queue.NodeStatus); ok {
		return fmt.Errorf("job changed during fsck; run it again: %w", err)
	}
	if _, ok := session.RefusedBy(err, queue.NodeLock); ok {
		return fmt.Errorf("job is being worked on; %w", queue.ErrLocked)
	}
	return err
}
