package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/e2e/leftovers"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	_ "modernc.org/sqlite"
)

// tally is a run's exactly-once figures: each job ended once, nothing
// duplicated, no lock left, fsck clean.
type tally struct {
	read bool // false: the run ended before they could be read
	// jobs by state, of the run's batches.
	jobs, completed, failed int
	byState                 map[string]int
	// duplicates: objects that became a second job, versions stored or
	// recorded a second time, batches reported twice.
	duplicates int
	// locks: job, batch, storage and inventory locks left once the work was
	// done (after the session timeout that frees a dead holder's); lockList
	// names them.
	locks    int
	lockList string
	damages  int            // fsck's findings
	kinds    map[string]int // of them, by kind
	fsckErr  error
}

// String is the figures in a line.
func (t tally) String() string {
	if !t.read {
		return "not read"
	}
	fsck := "clean"
	switch {
	case t.fsckErr != nil:
		fsck = "not run: " + t.fsckErr.Error()
	case t.damages > 0:
		fsck = fmt.Sprintf("%d damages %v", t.damages, t.kinds)
	}
	s := fmt.Sprintf("%d jobs: %d Completed, %d Failed", t.jobs, t.completed, t.failed)
	if other := t.jobs - t.completed - t.failed; other > 0 {
		s += fmt.Sprintf(", %d not ended %v", other, t.byState)
	}
	s += fmt.Sprintf("; %d duplicates; %d locks left; fsck %s", t.duplicates, t.locks, fsck)
	if t.lockList != "" {
		s += " (locks: " + t.lockList + ")"
	}
	return s
}

// readTally reads what a failed run left, without the checks' verdicts:
// its jobs by state, the locks held, fsck's findings (read-only).
func (r *run) readTally(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	t := tally{read: true, byState: map[string]int{}}
	r.mu.Lock()
	bids := slices.Collect(maps.Values(r.bids))
	r.mu.Unlock()
	for _, bid := range bids {
		page, _, err := jobs.NewReader(r.q).ListJobs(ctx, jobs.JobFilter{Batch: bid, PageSize: 1000})
		if err != nil {
			r.t.Logf("tally: jobs of %s: %v", bid, err)
			continue
		}
		for _, j := range page {
			t.count(j.GetStatus().GetStatus())
		}
	}
	t.countLocks(leftovers.Locks(ctx, r.q))
	if holders := r.lockHolders(ctx, bids); len(holders) > 0 {
		t.lockList = strings.Join(holders, "; ")
	}
	rep, err := admin.New(r.q).Queue.Fsck(ctx, admin.FsckOptions{})
	if t.fsckErr = err; err == nil {
		t.damages, t.kinds = len(rep.Damages), map[string]int{}
		for _, d := range rep.Damages {
			t.kinds[d.Kind]++
		}
	}
	r.tally = t
}

// lockHolders says who holds the locks left: the batches' locked jobs
// (docs/queue-contract.md: <root>/jobs/<jid>/lock) and the storage and inventory locks
// (<root>/locks/storage|inventory/<name>). For each, the session that owns
// the lock node, the replica whose log says it established that session,
// and that replica's last word on the job or object.
func (r *run) lockHolders(ctx context.Context, bids []string) []string {
	type heldLock struct {
		what, path string
		about      func(logLine) bool // the log lines on what it locks
	}
	var held []heldLock
	for _, bid := range bids {
		page, _, err := jobs.NewReader(r.q).ListJobs(ctx, jobs.JobFilter{Batch: bid, PageSize: 1000})
		if err != nil {
			continue
		}
		for _, j := range page {
			if j.GetLocked() {
				held = append(held, heldLock{what: fmt.Sprintf("job %s (%s)", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus())),
					path: r.stack.Root + "/jobs/" + j.GetId() + "/lock", about: func(l logLine) bool { return l.JobID == j.GetId() }})
			}
		}
	}
	storage, inventory, _ := admin.New(r.q).Queue.ObjectLocks(ctx)
	for kind, names := range map[string][]string{"storage": storage, "inventory": inventory} {
		for _, name := range names {
			held = append(held, heldLock{what: kind + " lock " + name, path: r.stack.Root + "/locks/" + kind + "/" + name,
				about: func(l logLine) bool { return l.Ark != "" && queue.LockName(l.Ark) == name }})
		}
	}
	if len(held) == 0 {
		return nil
	}
	conn, _, err := zk.Connect(r.ens.Addrs(), 20*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return []string{"lock holders unknown: " + err.Error()}
	}
	defer conn.Close()
	sessions := r.replicaSessions()
	var out []string
	for _, h := range held {
		stat, err := statWithin(ctx, conn, h.path)
		if err != nil {
			out = append(out, fmt.Sprintf("%s locked, holder unknown: %v", h.what, err))
			continue
		}
		owner := fmt.Sprintf("0x%x", stat.EphemeralOwner)
		holder, ok := sessions[owner]
		if !ok {
			out = append(out, fmt.Sprintf("%s locked by session %s, no replica's", h.what, owner))
			continue
		}
		out = append(out, fmt.Sprintf("%s locked by session %s of %s, whose last word on it was %q", h.what, owner, holder,
			lastWord(filepath.Join(r.stack.LogDir, holder+".log"), h.about)))
	}
	return out
}

// statWithin reads a node's stat, waiting no longer than ctx (the client
// library's calls take no context).
func statWithin(ctx context.Context, conn *zk.Conn, path string) (*zk.Stat, error) {
	type result struct {
		stat *zk.Stat
		err  error
	}
	done := make(chan result, 1)
	go func() {
		_, stat, err := conn.Get(path)
		done <- result{stat, err}
	}()
	select {
	case res := <-done:
		return res.stat, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// replicaSessions maps each ZooKeeper session a replica's log says it
// established to that replica ("processor-0").
func (r *run) replicaSessions() map[string]string {
	out := map[string]string{}
	logs, _ := filepath.Glob(filepath.Join(r.stack.LogDir, "*.log"))
	for _, path := range logs {
		replica := strings.TrimSuffix(filepath.Base(path), ".log")
		eachLogLine(path, func(line logLine) {
			if line.Msg == "zookeeper session established" {
				out[line.Session] = replica
			}
		})
	}
	return out
}

// lastWord is the last message a replica's log holds about something.
func lastWord(path string, about func(logLine) bool) string {
	last := "nothing"
	eachLogLine(path, func(line logLine) {
		if about(line) {
			last = line.Msg
			if line.Error != "" {
				last += ": " + line.Error
			}
		}
	})
	return last
}

// logLine is what the checks read of a service's JSON log line.
type logLine struct {
	Level   string `json:"level"`
	Msg     string `json:"msg"`
	Error   string `json:"error"`
	JobID   string `json:"job_id"`
	Ark     string `json:"ark"`
	Session string `json:"session"`
}

// eachLogLine calls each for every JSON line of a service's log.
func eachLogLine(path string, each func(logLine)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var line logLine
		if json.Unmarshal(sc.Bytes(), &line) == nil {
			each(line)
		}
	}
}

// count adds a job in state s.
func (t *tally) count(s queue.JobState) {
	t.jobs++
	switch s {
	case queue.Completed:
		t.completed++
	case queue.Failed:
		t.failed++
	default:
		t.byState[queue.JobStateName(s)]++
	}
}

// countLocks takes the locks leftovers.Locks names (nil: none).
func (t *tally) countLocks(err error) {
	t.locks, t.lockList = 0, ""
	if err == nil {
		return
	}
	t.lockList = strings.ReplaceAll(err.Error(), "\n", "; ")
	if many, ok := err.(interface{ Unwrap() []error }); ok {
		t.locks = len(many.Unwrap())
	} else {
		t.locks = 1
	}
}

// checkEnd checks the pipeline at rest after the faults, then stops the
// services and checks what they left; it reports failures on the test and
// returns what it verified, in a line.
func (r *run) checkEnd(ctx context.Context) string {
	t := r.t
	t.Helper()
	r.tally = tally{read: true, byState: map[string]int{}}
	jobs := r.checkJobs(ctx)
	stored := r.checkStore(jobs)
	recorded := r.checkInventory(ctx, jobs)
	reported := r.checkReports(ctx)
	// A lock outlives its holder by at most a session timeout; a lock left
	// longer than that is a leak.
	lockCtx, cancel := context.WithTimeout(ctx, 10*sessionTimeout+30*time.Second)
	err := until(lockCtx, 500*time.Millisecond, func() (bool, error) { return leftovers.Locks(lockCtx, r.q) == nil, nil })
	cancel()
	if err != nil {
		left := leftovers.Locks(ctx, r.q)
		r.tally.countLocks(left)
		if holders := r.lockHolders(ctx, slices.Collect(maps.Values(r.bids))); len(holders) > 0 {
			r.tally.lockList = strings.Join(holders, "; ")
		}
		t.Errorf("locks left once the work was done: %v", r.tally.lockList)
	}
	fsckCtx, cancel := context.WithTimeout(ctx, time.Minute)
	resp, err := r.admins[0].Fsck(adminCtx(fsckCtx), &v1.FsckRequest{})
	cancel()
	r.tally.fsckErr, r.tally.damages, r.tally.kinds = err, len(resp.GetDamages()), map[string]int{}
	for _, d := range resp.GetDamages() {
		r.tally.kinds[d.GetKind()]++
	}
	switch {
	case err != nil:
		t.Errorf("AdminService/Fsck: %v", err)
	case len(resp.GetDamages()) > 0:
		t.Errorf("fsck found damage after the faults: %v", resp.GetDamages())
	}
	if err := r.stopAndCheckLeftovers(ctx); err != nil {
		t.Errorf("after stopping the services: %v", err)
	}
	return fmt.Sprintf("%d jobs Completed, %s, %s, %s, fsck clean, no lock or worker entry left",
		len(jobs), stored, recorded, reported)
}

// checkJobs reads every job and checks that each deposited object became
// exactly one job, Completed, with an ARK and one stored version; it
// returns the jobs by local id.
func (r *run) checkJobs(ctx context.Context) map[string]*v1.Job {
	t := r.t
	t.Helper()
	byLocalID := map[string]*v1.Job{}
	for i, b := range r.batches {
		bid := r.bids[i]
		page, _, err := jobs.NewReader(r.q).ListJobs(ctx, jobs.JobFilter{Batch: bid, PageSize: 1000})
		if err != nil {
			t.Fatalf("jobs of %s: %v", bid, err)
		}
		if len(page) != len(b.objects) {
			t.Errorf("batch %s has %d jobs for %d objects", bid, len(page), len(b.objects))
		}
		for _, j := range page {
			full, err := jobs.NewReader(r.q).GetJob(ctx, j.GetId())
			if err != nil {
				t.Fatalf("job %s: %v", j.GetId(), err)
			}
			ids := full.GetIdentifiers()
			if len(ids.GetLocalId()) != 1 {
				r.tally.count(full.GetStatus().GetStatus())
				t.Errorf("job %s has local ids %v, want one", j.GetId(), ids.GetLocalId())
				continue
			}
			r.tally.count(full.GetStatus().GetStatus())
			lid := ids.GetLocalId()[0]
			if other, dup := byLocalID[lid]; dup {
				r.tally.duplicates++
				t.Errorf("object %s became two jobs: %s and %s", lid, other.GetId(), j.GetId())
			}
			byLocalID[lid] = full
			switch {
			case full.GetStatus().GetStatus() != queue.Completed:
				t.Errorf("job %s (%s) is %s: %s", j.GetId(), lid, queue.JobStateName(full.GetStatus().GetStatus()), full.GetStatus().GetMessage())
			case !strings.HasPrefix(ids.GetPrimaryId(), "ark:/"):
				t.Errorf("job %s (%s) has no ARK: %v", j.GetId(), lid, ids)
			case full.GetInventory().GetVersion() != 1:
				t.Errorf("job %s (%s) stored as version %d, want 1 (a second version means a replayed step stored again)",
					j.GetId(), lid, full.GetInventory().GetVersion())
			}
		}
	}
	for _, b := range r.batches {
		for _, o := range b.objects {
			if byLocalID[o.localID] == nil {
				t.Errorf("object %s of batch %d has no job: the deposit was lost", o.localID, b.index)
			}
		}
	}
	return byLocalID
}

// checkStore walks the processor's object store: one folder per ARK, each
// holding exactly one complete version (v1) stored by its job, whose
// producer files are the deposited ones; nothing else.
func (r *run) checkStore(jobs map[string]*v1.Job) string {
	t := r.t
	t.Helper()
	want := map[string]*v1.Job{} // folder name → job
	for _, j := range jobs {
		want[queue.LockName(j.GetIdentifiers().GetPrimaryId())] = j
	}
	des, err := os.ReadDir(r.stack.StoreRoot)
	if err != nil {
		t.Fatalf("reading the object store: %v", err)
	}
	versions := 0
	for _, de := range des {
		j, ok := want[de.Name()]
		if !ok {
			t.Errorf("object store holds %s, which is no job's object", de.Name())
			continue
		}
		objDir := filepath.Join(r.stack.StoreRoot, de.Name())
		vs, err := os.ReadDir(objDir)
		if err != nil {
			t.Errorf("reading %s: %v", objDir, err)
			continue
		}
		var names []string
		for _, v := range vs {
			names = append(names, v.Name())
		}
		versions += len(names)
		r.tally.duplicates += max(0, len(names)-1)
		if !slices.Equal(names, []string{"v1"}) {
			t.Errorf("object %s (job %s) has %v in the store, want only v1", j.GetIdentifiers().GetPrimaryId(), j.GetId(), names)
			continue
		}
		r.checkVersion(j, filepath.Join(objDir, "v1"))
	}
	if len(des) != len(jobs) {
		t.Errorf("object store holds %d objects for %d jobs", len(des), len(jobs))
	}
	return fmt.Sprintf("%d objects stored once (%d version folders)", len(des), versions)
}

// checkVersion checks one stored version: stored by its job, its manifest
// the job's, every deposited file present with its digest, no temporary
// file left.
func (r *run) checkVersion(j *v1.Job, vdir string) {
	t := r.t
	t.Helper()
	var rec struct {
		JobID string `json:"jid"`
	}
	if data, err := os.ReadFile(filepath.Join(vdir, "version.json")); err != nil || json.Unmarshal(data, &rec) != nil || rec.JobID != j.GetId() {
		t.Errorf("%s: version.json names job %q, want %s (%v)", vdir, rec.JobID, j.GetId(), err)
	}
	manifest := filepath.Join(vdir, "manifest.checkm")
	if got, err := checkm.FilePath(j.GetInventory().GetManifestUrl()); err != nil || got != manifest {
		t.Errorf("job %s's inventory node names %s, want %s (%v)", j.GetId(), got, manifest, err)
	}
	f, err := os.Open(manifest)
	if err != nil {
		t.Errorf("job %s: version manifest: %v", j.GetId(), err)
		return
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		t.Errorf("job %s: version manifest %s: %v", j.GetId(), manifest, err)
		return
	}
	got := map[string]string{}
	for _, e := range m.Entries {
		if name, ok := strings.CutPrefix(e.FileName, "producer/"); ok {
			got[name] = e.HashValue
		}
	}
	if want := r.object(j.GetIdentifiers().GetLocalId()[0]).files; !maps.Equal(got, want) {
		t.Errorf("job %s stored producer files %v, deposited %v", j.GetId(), got, want)
	}
	filepath.WalkDir(vdir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp") {
			t.Errorf("temporary file left in the store: %s", p)
		}
		return nil
	})
}

// checkInventory checks the recorder's inventory: one version row per ARK,
// recorded by its job, with the stored version's files. Both recorder
// replicas record into the one inventory database (INGESTQ_INVENTORY_DB,
// SQLite in WAL mode, shared as an inventory is), which must be the only
// one.
func (r *run) checkInventory(ctx context.Context, jobs map[string]*v1.Job) string {
	t := r.t
	t.Helper()
	if dbs, _ := filepath.Glob(filepath.Join(r.dir, "*.db")); len(dbs) != 1 || dbs[0] != r.stack.InventoryDB {
		t.Errorf("inventory databases %v, want only %s", dbs, r.stack.InventoryDB)
	}
	db, err := sql.Open("sqlite", r.stack.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, arks int
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT ark) FROM versions`).Scan(&rows, &arks); err != nil {
		t.Fatalf("reading the inventory: %v", err)
	}
	r.tally.duplicates += rows - arks
	if rows != len(jobs) || arks != len(jobs) {
		t.Errorf("inventory has %d version rows for %d ARKs; %d jobs completed", rows, arks, len(jobs))
	}
	for lid, j := range jobs {
		ark := j.GetIdentifiers().GetPrimaryId()
		var number int
		var jid string
		if err := db.QueryRowContext(ctx, `SELECT number, jid FROM versions WHERE ark = ?`, ark).Scan(&number, &jid); err != nil {
			t.Errorf("job %s (%s): its version of %s in the inventory: %v", j.GetId(), lid, ark, err)
			continue
		}
		if number != 1 || jid != j.GetId() {
			t.Errorf("inventory records %s version %d by %s, want version 1 by %s", ark, number, jid, j.GetId())
		}
		var files int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM files WHERE ark = ? AND version = 1`, ark).Scan(&files); err != nil {
			t.Fatalf("reading the inventory: %v", err)
		}
		if stored := manifestEntries(j); files != stored {
			t.Errorf("inventory has %d files for %s, its version manifest %d", files, ark, stored)
		}
	}
	return fmt.Sprintf("%d version rows, one per ARK", rows)
}

// manifestEntries counts the files of a job's stored version (-1 when the
// manifest cannot be read; checkVersion reports why).
func manifestEntries(j *v1.Job) int {
	path, err := checkm.FilePath(j.GetInventory().GetManifestUrl())
	if err != nil {
		return -1
	}
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		return -1
	}
	return len(m.Entries)
}

// checkReports checks the batcher's outbox: each batch reported once, as
// Completed with all its objects. A report is mailed before the batch's
// final state is committed, so a batcher killed in between mails it again
// under the same key (Message-ID and file name): one file per batch, never
// an update report, nothing half-written.
func (r *run) checkReports(ctx context.Context) string {
	t := r.t
	t.Helper()
	des, err := os.ReadDir(r.stack.OutboxDir)
	if err != nil {
		t.Fatalf("reading the outbox: %v", err)
	}
	var files []string
	for _, de := range des {
		files = append(files, de.Name())
	}
	var want []string
	for i, b := range r.batches {
		bid := r.bids[i]
		want = append(want, bid+"-report.eml")
		batch, err := batches.New(r.q).GetBatch(ctx, bid)
		if err != nil {
			t.Errorf("batch %s: %v", bid, err)
			continue
		}
		rep := batch.GetStatusReport()
		if batch.GetStatus().GetStatus() != queue.BatchCompleted || len(rep.GetSuccessfulJobs()) != len(b.objects) || len(rep.GetFailedJobs()) != 0 {
			t.Errorf("batch %s is %s with report %v; want Completed with %d successful jobs",
				bid, queue.BatchStateName(batch.GetStatus().GetStatus()), rep, len(b.objects))
		}
		data, err := os.ReadFile(filepath.Join(r.stack.OutboxDir, bid+"-report.eml"))
		if err != nil {
			continue // named below
		}
		for _, s := range []string{fmt.Sprintf("Subject: ingestq batch %s: completed: all %d object(s) completed", bid, len(b.objects)),
			"Message-ID: <" + bid + "-report@"} {
			if !strings.Contains(string(data), s) {
				t.Errorf("report of %s does not say %q", bid, s)
			}
		}
	}
	slices.Sort(want)
	for _, bid := range r.bids {
		// Reports under another name for the same batch are second reports.
		n := 0
		for _, f := range files {
			if strings.HasPrefix(f, bid+"-") {
				n++
			}
		}
		r.tally.duplicates += max(0, n-1)
	}
	if !slices.Equal(files, want) {
		t.Errorf("outbox holds %v, want one report per batch: %v", files, want)
	}
	return fmt.Sprintf("%d batches reported once each", len(files))
}

// object finds a deposited object by local id.
func (r *run) object(localID string) depositObject {
	for _, b := range r.batches {
		for _, o := range b.objects {
			if o.localID == localID {
				return o
			}
		}
	}
	return depositObject{}
}

// logFigures logs what the run did and saw, and its exactly-once figures.
func (r *run) logFigures(m *monkey, mon *monitor) {
	t := r.t
	t.Helper()
	total := 0
	var kills []string
	for _, s := range sortedKeys(m.kills) {
		total += m.kills[s]
		kills = append(kills, fmt.Sprintf("%s %d", s, m.kills[s]))
	}
	mon.mu.Lock()
	defer mon.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "chaos figures (seed %d):\n", r.set.seed)
	fmt.Fprintf(&b, "  jobs:              %d in %d batches, %s apart; %s\n", r.set.jobs, r.set.batches, r.set.spacing, r.layout())
	if r.sc.kills {
		fmt.Fprintf(&b, "  replica kills:     %d kill -9 and restart (%s); %d caught jobs in flight (%d jobs)\n",
			total, strings.Join(kills, ", "), m.killsInFlight, m.jobsCaught)
		fmt.Fprintf(&b, "  failed starts:     %d exited before serving and were started again (%s)\n",
			len(m.failedStarts), strings.Join(m.failedStarts, "; "))
	}
	if l := m.leader; l != nil {
		fmt.Fprintf(&b, "  ZooKeeper leader:  server %d killed at %s; server %d elected after %s\n",
			l.server+1, l.at.Round(time.Second), l.next+1, l.election.Round(time.Millisecond))
	}
	if q := m.quorum; q != nil {
		fmt.Fprintf(&b, "  quorum loss:       servers %d (leader) and %d stopped at %s for %s; quorum back after %s, server %d leads\n",
			q.stopped[0]+1, q.stopped[1]+1, q.at.Round(time.Second), cutFor, q.outage.Round(time.Millisecond), q.leader+1)
	}
	for _, h := range m.hangs {
		fmt.Fprintf(&b, "  ZooKeeper hang:    %s\n", h.figures())
	}
	if m.serving != nil {
		fmt.Fprintf(&b, "  serving:           %d statuses other than SERVING seen; %d services lost or replaced their ZooKeeper session\n",
			len(m.serving.failures()), len(sessionsLost(r.stack)))
	}
	var changes []string
	for _, c := range mon.leaderChanges {
		changes = append(changes, fmt.Sprintf("%d→%d at %s", c.from+1, c.to+1, c.at.Round(time.Second)))
	}
	fmt.Fprintf(&b, "  leader changes:    %d seen (%s)\n", len(mon.leaderChanges), strings.Join(changes, ", "))
	for _, c := range []struct {
		label string
		co    *cutOff
	}{{"frozen replica:    ", m.freeze}, {"partitioned:       ", m.partition}} {
		f := c.co
		if f == nil {
			continue
		}
		took := fmt.Sprintf("jobs moved on by another replica after %s", f.takeover.Round(time.Millisecond))
		if f.lone {
			took = fmt.Sprintf("no other replica; it took its jobs again after %s", f.takeover.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "  %s%s (%s, stage %s) at %s for %s holding %d jobs; session gone after %s, %s\n",
			c.label, f.proc, f.how, f.state, f.at.Round(time.Second), f.cut.Round(time.Millisecond), len(f.held),
			f.expired.Round(time.Millisecond), took)
		var how []string
		for _, jid := range sortedKeys(f.ends) {
			how = append(how, fmt.Sprintf("%s %q", jid, f.ends[jid]))
		}
		fmt.Fprintf(&b, "  late commits:      %d refused (%s); fenced count %d → %d\n",
			len(f.ends), strings.Join(how, "; "), f.fencedBefore, f.fencedAfter)
	}
	if r.sc.freeze || r.sc.partition != nil {
		fmt.Fprintf(&b, "  missed cuts:       %d (the jobs were done before the freeze or partition landed)\n", m.missed)
	}
	fmt.Fprintf(&b, "  longest stall:     %s with no job changing state (from %s); %s with no job completing (from %s)\n",
		mon.stall.Round(100*time.Millisecond), mon.stallAt.Round(time.Second),
		mon.completionGap.Round(100*time.Millisecond), mon.completionGapAt.Round(time.Second))
	fmt.Fprintf(&b, "  exactly once:      %s", r.tally)
	t.Log(b.String())
}
