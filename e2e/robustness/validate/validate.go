// Package validate is the robustness suite's independent checker. Once a
// run is over it reads what each effect's own system recorded: the
// store's version folders (or what Merritt's storage service, the
// stand-in, made and kept), the inventory's rows, the batcher's outbox, the
// callbacks the depositor's server received, the mint counter and the
// local-id bindings in ZooKeeper, each job's nodes, and what the watcher
// saw of every job while the run went on. It holds them to the model
// (package model): porcupine where the question is linearizability (each
// job's state, moved only by fenced steps), plain counting elsewhere.
package validate

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/robustness/model"
	"github.com/ingestq/ingestq/e2e/robustness/traffic"
	"github.com/ingestq/ingestq/e2e/robustness/watch"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
	_ "modernc.org/sqlite"
)

// Violation is one broken promise.
type Violation struct {
	Check  string // which promise
	Item   string // the job or batch
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: %s: %s", v.Check, v.Item, v.Detail) }

// The promises, as the report names them.
const (
	CheckOneJobPerRow    = "each accepted row makes exactly one job"
	CheckPath            = "each job's states follow the state machine"
	CheckLinearizable    = "each job's state is linearizable (porcupine)"
	CheckCompleted       = "each job completes"
	CheckStoredOnce      = "each completed job has one stored version"
	CheckStoredWhole     = "each stored file is the deposited file, whole"
	CheckRecordedOnce    = "each completed job has one inventory row"
	CheckOneARK          = "one ARK per local id, each minted once"
	CheckCallback        = "each callback delivered at least once, under its job's key"
	CheckOneMail         = "each report sends one mail"
	CheckMutualExclusion = "no two workers inside the same job's step"
	CheckEffectFirst     = "each effect precedes the commit that records it"
)

// Input is what the checker reads.
type Input struct {
	Traffic   *traffic.Traffic
	Watch     *watch.Recorder
	Conn      *zk.Conn // its own session
	Root      string
	StoreRoot string
	// Merritt, when set, is the stand-in for Merritt's storage service
	// the run stored into, on node MerrittNode, in place of StoreRoot.
	Merritt     *merritttest.Service
	MerrittNode int
	Inventory   string // the SQLite file
	OutboxDir   string
	Callbacks   []depositor.Callback
	// Shoulder is the mint counter's name (INGESTQ_MINT_SHOULDER).
	Shoulder string
	// Replicas names the replica of each session, as its log says it
	// established it: only to say who held a lock, never for a verdict.
	Replicas map[int64]string
	// PorcupineDir, when set, receives a visualization of each job whose
	// history is not linearizable.
	PorcupineDir string
}

// Report is what the checker found.
type Report struct {
	Violations []Violation
	Figures    map[string]int
	// Notes are findings that break no promise but are worth a look.
	Notes []string
}

// job is a job as its nodes say at the end.
type job struct {
	id, bid, state string
	ark            string
	localIDs       []string
	invVersion     int
	invManifest    string
	batchEntry     int
}

// Check reads everything and holds it to the model.
func Check(ctx context.Context, in Input) (*Report, error) {
	r := &Report{Figures: map[string]int{}}
	jobs, err := readJobs(in)
	if err != nil {
		return nil, err
	}
	r.Figures["jobs"] = len(jobs)
	byBid := map[string][]*job{}
	for _, j := range jobs {
		byBid[j.bid] = append(byBid[j.bid], j)
	}
	completed := r.checkRows(in, byBid)
	r.checkHistories(in)
	if in.Merritt != nil {
		r.checkMerrittStore(in, completed)
	} else {
		r.checkStore(in, completed)
	}
	if err := r.checkInventory(ctx, in, completed); err != nil {
		return nil, err
	}
	if err := r.checkARKs(in, jobs, completed); err != nil {
		return nil, err
	}
	r.checkCallbacks(in, completed)
	r.checkEffectsFirst(in, completed)
	r.checkMail(in)
	sort.SliceStable(r.Violations, func(i, k int) bool { return r.Violations[i].Check < r.Violations[k].Check })
	return r, nil
}

func (r *Report) violate(check, item, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Check: check, Item: item, Detail: fmt.Sprintf(format, args...)})
}

func get(in Input, rel string) ([]byte, error) {
	data, _, err := in.Conn.Get(in.Root + rel)
	return data, err
}

func readJobs(in Input) (map[string]*job, error) {
	names, _, err := in.Conn.Children(in.Root + "/jobs")
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	out := map[string]*job{}
	for _, n := range names {
		if !strings.HasPrefix(n, "jid") {
			continue
		}
		j := &job{id: n, batchEntry: -1}
		if b, err := get(in, "/jobs/"+n+"/bid"); err == nil {
			j.bid = string(b)
		}
		if b, err := get(in, "/jobs/"+n+"/status"); err == nil {
			var st struct {
				Status string `json:"status"`
			}
			json.Unmarshal(b, &st)
			j.state = st.Status
		}
		if b, err := get(in, "/jobs/"+n+"/identifiers"); err == nil {
			var ids struct {
				Primary string   `json:"primary_id"`
				Local   []string `json:"local_id"`
			}
			json.Unmarshal(b, &ids)
			j.ark, j.localIDs = ids.Primary, ids.Local
		}
		if b, err := get(in, "/jobs/"+n+"/inventory"); err == nil {
			var inv struct {
				URL     string `json:"manifest_url"`
				Version int    `json:"version"`
			}
			json.Unmarshal(b, &inv)
			j.invManifest, j.invVersion = inv.URL, inv.Version
		}
		if b, err := get(in, "/jobs/"+n+"/configuration"); err == nil {
			var c struct {
				Entry *int `json:"batch_entry"`
			}
			if json.Unmarshal(b, &c) == nil && c.Entry != nil {
				j.batchEntry = *c.Entry
			}
		}
		out[n] = j
	}
	return out, nil
}

// completedJob is a completed job and the object it was deposited as.
type completedJob struct {
	*job
	obj traffic.Object
}

// checkRows: every accepted row of every batch became one job, which
// completed; it returns the completed jobs.
func (r *Report) checkRows(in Input, byBid map[string][]*job) []completedJob {
	var out []completedJob
	for i, b := range in.Traffic.Batches() {
		bid, ok := in.Traffic.Bid(i)
		if !ok {
			r.violate(CheckOneJobPerRow, b.UUID, "never submitted")
			continue
		}
		js := byBid[bid]
		r.Figures["batches"]++
		if b.Doomed {
			if len(js) > 0 {
				r.violate(CheckOneJobPerRow, bid, "its payload is missing, yet it has %d jobs", len(js))
			}
			continue
		}
		if len(js) != len(b.Objects) {
			r.violate(CheckOneJobPerRow, bid, "%d jobs for %d rows (%s)", len(js), len(b.Objects), b.Type)
		}
		seen := map[string]string{}
		for _, j := range js {
			key := strconv.Itoa(j.batchEntry)
			obj := b.Objects[0]
			if len(b.Objects) > 1 || b.Objects[0].LocalID != "" {
				if len(j.localIDs) != 1 {
					r.violate(CheckOneJobPerRow, j.id, "local ids %v, want one", j.localIDs)
					continue
				}
				key = j.localIDs[0]
				k := slices.IndexFunc(b.Objects, func(o traffic.Object) bool { return o.LocalID == key })
				if k < 0 {
					r.violate(CheckOneJobPerRow, j.id, "local id %s is no row of batch %s", key, bid)
					continue
				}
				obj = b.Objects[k]
			}
			if other, dup := seen[key]; dup {
				r.violate(CheckOneJobPerRow, j.id, "row %s of batch %s became two jobs: %s and %s", key, bid, other, j.id)
			}
			seen[key] = j.id
			if j.state != model.Completed {
				r.violate(CheckCompleted, j.id, "ended %s", cmp.Or(j.state, "without a status"))
				continue
			}
			out = append(out, completedJob{job: j, obj: obj})
		}
	}
	r.Figures["completed"] = len(out)
	return out
}

// checkHistories holds every job the watcher saw to the state machine,
// to porcupine's model of its state, and to mutual exclusion.
func (r *Report) checkHistories(in Input) {
	workers := in.Watch.Workers()
	for id, j := range in.Watch.Jobs() {
		if len(j.Reads) == 0 {
			continue
		}
		moves, dropped := allMoves(j)
		if dropped {
			r.Figures["histories unchecked (entries dropped)"]++
			continue
		}
		// The path, as the moves chain.
		prev := ""
		var path []string
		for _, m := range moves {
			path = append(path, m.To)
			if m.From != prev || !model.Allowed(m.From, m.To) {
				r.violate(CheckPath, id, "move %s → %s by %s at %s, the job being %s (path %s)", show(m.From), m.To, m.Worker,
					m.At.Format("15:04:05.000"), show(prev), strings.Join(path, " → "))
			}
			prev = m.To
		}
		r.Figures["moves"] += len(moves)
		r.porcupine(in, id, j, moves)
		r.mutualExclusion(id, j, moves, workers, in.Replicas)
	}
}

// allMoves are the moves of a job's history, in order, with the first
// read each was seen in; dropped when the history lost entries.
func allMoves(j watch.Job) ([]seenMove, bool) {
	last := j.Reads[len(j.Reads)-1]
	if last.Dropped > 0 {
		return nil, true
	}
	var out []seenMove
	for _, m := range last.Moves {
		sm := seenMove{Move: m}
		for _, rd := range j.Reads {
			if slices.ContainsFunc(rd.Moves, func(o watch.Move) bool { return o.At.Equal(m.At) && o.To == m.To && o.Worker == m.Worker }) {
				sm.seen = rd.Return
				break
			}
		}
		out = append(out, sm)
	}
	return out, false
}

type seenMove struct {
	watch.Move
	seen time.Time // the return of the first read that listed it
}

func show(s string) string {
	if s == "" {
		return "(new)"
	}
	return s
}

// porcupine checks that the moves and the watcher's reads of a job's
// state are linearizable against model.JobState.
func (r *Report) porcupine(in Input, id string, j watch.Job, moves []seenMove) {
	var ops []porcupine.Operation
	for _, m := range moves {
		ret := m.seen
		if ret.Before(m.At) {
			ret = m.At
		}
		ops = append(ops, porcupine.Operation{ClientId: 0, Input: model.Input{From: m.From, To: m.To, Worker: m.Worker},
			Call: m.At.UnixNano(), Output: model.Output{}, Return: ret.UnixNano() + 1})
	}
	for _, rd := range j.Reads {
		if rd.State == "" {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: 1, Input: model.Input{Read: true}, Call: rd.Call.UnixNano(),
			Output: model.Output{State: rd.State}, Return: rd.Return.UnixNano()})
	}
	res, info := porcupine.CheckOperationsVerbose(model.JobState, ops, 10*time.Second)
	r.Figures["porcupine operations"] += len(ops)
	switch res {
	case porcupine.Ok:
		r.Figures["histories linearizable"]++
	case porcupine.Unknown:
		r.Figures["histories unchecked (porcupine timed out)"]++
	default:
		detail := fmt.Sprintf("%d moves and %d reads admit no order in which every move starts from the state the job is in", len(moves), len(j.Reads))
		if in.PorcupineDir != "" {
			p := filepath.Join(in.PorcupineDir, id+".html")
			if f, err := os.Create(p); err == nil {
				if porcupine.Visualize(model.JobState, info, f) == nil {
					detail += "; see " + p
				}
				f.Close()
			}
		}
		r.violate(CheckLinearizable, id, "%s", detail)
	}
}

// slack absorbs the difference between a lock's ctime (the server's
// milliseconds) and a move's time (its writer's clock, before its request).
const slack = 5 * time.Millisecond

// mutualExclusion: every move a worker made fell where no other session
// held the job's lock.
func (r *Report) mutualExclusion(id string, j watch.Job, moves []seenMove, workers map[string][]int64, replicas map[int64]string) {
	for _, m := range moves {
		if m.From == "" || m.Worker == "" || m.Worker == "operator" || m.Worker == "fsck" {
			continue
		}
		own := map[int64]bool{}
		for _, s := range sessionsOf(m.Worker, workers) {
			own[s] = true
		}
		if len(own) == 0 {
			r.Figures["moves unchecked for mutual exclusion (worker's session unseen)"]++
			continue
		}
		r.Figures["moves checked for mutual exclusion"]++
		for _, l := range j.Locks {
			if own[l.Session] {
				continue
			}
			// A holding ends by the first move its own session made (a
			// commit deletes its lock), when the watcher saw that sooner.
			end, byOwnMove := l.Gone, false
			for _, m2 := range moves {
				if m2.At.After(l.Created) && (end.IsZero() || m2.At.Before(end)) && slices.Contains(sessionsOf(m2.Worker, workers), l.Session) {
					end, byOwnMove = m2.At, true
				}
			}
			inside := l.Created.Add(slack).Before(m.At) && (end.IsZero() || m.At.Before(end))
			if !inside {
				continue
			}
			gone := "still held at the end"
			if !end.IsZero() {
				gone = "until " + end.Format("15:04:05.000")
			}
			if !end.IsZero() && !byOwnMove && !l.Tight {
				// The watcher saw the lock go only after other holdings it
				// did not see (the mover's own, if its commit was fenced):
				// the lock may have been gone before the move.
				r.Figures["moves inside a lock whose end the watcher saw late (unproven)"]++
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %s moved it %s → %s at %s, before the watcher saw the lock of session 0x%x (from %s) gone at %s, after holdings it did not see: not proof of two workers in the step",
					id, m.Worker, show(m.From), m.To, m.At.Format("15:04:05.000"), l.Session, l.Created.Format("15:04:05.000"), end.Format("15:04:05.000")))
				continue
			}
			holder := workerOf(l.Session, workers)
			if holder == "" {
				// A session without a worker entry (an operator's claim, say):
				// not a second worker in the step, but shown.
				r.Figures["moves inside a lock of a session without a worker entry"]++
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %s moved it %s → %s at %s while session 0x%x (%s), of no worker entry seen, held its lock (from %s, %s)",
					id, m.Worker, show(m.From), m.To, m.At.Format("15:04:05.000"), l.Session, cmp.Or(replicas[l.Session], "no replica's log names it"),
					l.Created.Format("15:04:05.000"), gone))
				continue
			}
			r.violate(CheckMutualExclusion, id, "%s moved it %s → %s at %s while %s (session 0x%x) held its lock (from %s, %s)",
				m.Worker, show(m.From), m.To, m.At.Format("15:04:05.000"), holder, l.Session, l.Created.Format("15:04:05.000"), gone)
		}
	}
}

// workerOf names the worker entries seen under session ("" when none).
func workerOf(session int64, workers map[string][]int64) string {
	var names []string
	for w, sessions := range workers {
		if slices.Contains(sessions, session) {
			names = append(names, w)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// sessionsOf are the sessions a worker's entries were seen under: a
// history names a stage runner's worker id, or its process's name (a
// lease's commit), which begins every worker id of the process.
func sessionsOf(worker string, workers map[string][]int64) []int64 {
	var out []int64
	for w, sessions := range workers {
		if w == worker || strings.HasPrefix(w, worker+"-") {
			out = append(out, sessions...)
		}
	}
	return out
}

// versionJSON is what a version folder says of who stored it.
type versionJSON struct {
	JobID string `json:"jid"`
}

// checkStore: each completed job's object has exactly one version stored
// by it, complete, with the deposited files.
func (r *Report) checkStore(in Input, completed []completedJob) {
	for _, j := range completed {
		objDir := filepath.Join(in.StoreRoot, lockName(j.ark))
		des, err := os.ReadDir(objDir)
		if err != nil {
			r.violate(CheckStoredOnce, j.id, "object %s: %v", j.ark, err)
			continue
		}
		var mine []string
		for _, de := range des {
			var rec versionJSON
			data, err := os.ReadFile(filepath.Join(objDir, de.Name(), "version.json"))
			if err == nil && json.Unmarshal(data, &rec) == nil && rec.JobID == j.id {
				mine = append(mine, de.Name())
			}
		}
		if len(mine) != 1 || len(des) != 1 {
			r.violate(CheckStoredOnce, j.id, "object %s holds %d version folders, %d of them stored by the job (%v)", j.ark, len(des), len(mine), mine)
			continue
		}
		vdir := filepath.Join(objDir, mine[0])
		stored, err := producerFiles(vdir)
		if err != nil {
			r.violate(CheckStoredOnce, j.id, "version %s: %v", vdir, err)
			continue
		}
		r.Figures["versions stored"]++
		r.checkWhole(j, "version "+vdir, stored)
	}
}

// checkWhole holds the files of a job's stored version (where says which)
// to the deposit's: every deposited file stored with its size and digest,
// none else. A file stored shorter than deposited is a partial one.
func (r *Report) checkWhole(j completedJob, where string, stored map[string]storedFile) {
	want := map[string]string{} // name → sha256
	for sum, name := range j.obj.Files {
		want[name] = sum
	}
	for _, name := range slices.Sorted(mapKeys(want)) {
		f, ok := stored[name]
		switch size := j.obj.Sizes[name]; {
		case !ok:
			r.violate(CheckStoredWhole, j.id, "%s does not store %s", where, name)
		case f.size < size:
			r.violate(CheckStoredWhole, j.id, "%s stores %s partial: %d bytes of %d", where, name, f.size, size)
		case f.size != size || f.sha256 != want[name]:
			r.violate(CheckStoredWhole, j.id, "%s stores %s of %d bytes, sha256 %s; the deposit's is %d bytes, sha256 %s",
				where, name, f.size, f.sha256, size, want[name])
		default:
			r.Figures["files stored whole"]++
		}
	}
	for _, name := range slices.Sorted(mapKeys(stored)) {
		if _, ok := want[name]; !ok {
			r.violate(CheckStoredWhole, j.id, "%s stores %s, which the deposit has not", where, name)
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkMerrittStore: each completed job's object has exactly one version
// in Merritt's storage service, made by exactly one call that dropped no
// other's version, whose ingest record names the job, with the deposited
// files. (The service writes back an object's versions as a call read
// them when it began: an overlapping call shows as a call more, not
// always as a version more.)
func (r *Report) checkMerrittStore(in Input, completed []completedJob) {
	made := map[string]int{}
	for _, c := range in.Merritt.Calls() {
		if c.Node != in.MerrittNode {
			continue
		}
		r.Figures["storage calls"]++
		if c.CallerGone {
			r.Figures["storage calls whose caller gave up"]++
		}
		if c.Version > 0 {
			made[c.Object]++
		}
		if c.Overwrote > 0 {
			r.violate(CheckStoredOnce, c.Object, "a call's version %d dropped %d versions made while it ran", c.Version, c.Overwrote)
		}
	}
	for _, j := range completed {
		n := in.Merritt.Versions(in.MerrittNode, j.ark)
		if n != 1 || made[j.ark] != 1 {
			r.violate(CheckStoredOnce, j.id, "object %s: %d versions in the storage service, made by %d calls", j.ark, n, made[j.ark])
			continue
		}
		files := in.Merritt.Files(in.MerrittNode, j.ark, 1)
		if got := merrittstore.JobOfIngestRecord(files[merrittstore.IngestRecordFile]); got != j.id {
			r.violate(CheckStoredOnce, j.id, "object %s's version 1 names job %q", j.ark, got)
		}
		stored := map[string]storedFile{}
		for name, data := range files {
			if name, ok := strings.CutPrefix(name, "producer/"); ok {
				sum := sha256.Sum256(data)
				stored[name] = storedFile{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}
			}
		}
		r.Figures["versions stored"]++
		r.checkWhole(j, fmt.Sprintf("object %s's version 1 in the storage service", j.ark), stored)
	}
}

// storedFile is a file of a stored version as read back.
type storedFile struct {
	size   int64
	sha256 string
}

// producerFiles are the files a version folder's manifest lists under
// producer/, by their names there, each read and digested again.
func producerFiles(vdir string) (map[string]storedFile, error) {
	f, err := os.Open(filepath.Join(vdir, "manifest.checkm"))
	if err != nil {
		return nil, err
	}
	m, err := checkm.Parse(f, checkm.Limits{})
	f.Close()
	if err != nil {
		return nil, err
	}
	out := map[string]storedFile{}
	for _, e := range m.Entries {
		name, ok := strings.CutPrefix(e.FileName, "producer/")
		if !ok {
			continue
		}
		data, err := os.Open(filepath.Join(vdir, filepath.FromSlash(e.FileName)))
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(h, data)
		data.Close()
		if err != nil {
			return nil, err
		}
		out[name] = storedFile{size: n, sha256: hex.EncodeToString(h.Sum(nil))}
	}
	return out, nil
}

func lockName(id string) string {
	return strings.NewReplacer(":/", "_", ":", "_", "/", "_").Replace(id)
}

// checkInventory: each completed job has one version row, of its ARK and
// its stored version, with the version's files.
func (r *Report) checkInventory(ctx context.Context, in Input, completed []completedJob) error {
	db, err := sql.Open("sqlite", "file:"+in.Inventory+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, j := range completed {
		rows, err := db.QueryContext(ctx, `SELECT ark, number FROM versions WHERE jid = ?`, j.id)
		if err != nil {
			return fmt.Errorf("reading the inventory: %w", err)
		}
		var found []string
		for rows.Next() {
			var ark string
			var n int
			if err := rows.Scan(&ark, &n); err != nil {
				rows.Close()
				return err
			}
			found = append(found, fmt.Sprintf("%s v%d", ark, n))
			if ark != j.ark || n != j.invVersion {
				r.violate(CheckRecordedOnce, j.id, "inventory row %s v%d, the job says %s v%d", ark, n, j.ark, j.invVersion)
			}
			var files int
			db.QueryRowContext(ctx, `SELECT count(*) FROM files WHERE ark = ? AND version = ?`, ark, n).Scan(&files)
			if want := len(j.obj.Files); files < want {
				r.violate(CheckRecordedOnce, j.id, "inventory lists %d files of %s v%d, the deposit has %d (and its system files)", files, ark, n, want)
			}
		}
		rows.Close()
		if len(found) != 1 {
			r.violate(CheckRecordedOnce, j.id, "%d inventory rows: %v", len(found), found)
			continue
		}
		r.Figures["inventory rows"]++
	}
	var orphans int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM versions`).Scan(&orphans); err == nil {
		r.Figures["inventory rows in all"] = orphans
	}
	return nil
}

// checkARKs: every completed job has an ARK of its own, its local ids are
// bound to it, and the mint counter reserved exactly the ARKs the jobs
// hold (none minted twice, none lost).
func (r *Report) checkARKs(in Input, jobs map[string]*job, completed []completedJob) error {
	owner := map[string]string{}
	for _, j := range jobs {
		if j.ark == "" {
			continue
		}
		if other, dup := owner[j.ark]; dup {
			r.violate(CheckOneARK, j.id, "ARK %s is also job %s's", j.ark, other)
		}
		owner[j.ark] = j.id
	}
	for _, j := range completed {
		for _, lid := range j.localIDs {
			data, err := get(in, "/local-ids/"+lockName("ark:/99999/fk4owner")+"/"+lockName(lid))
			if err != nil {
				r.violate(CheckOneARK, j.id, "local id %s bound to nothing: %v", lid, err)
				continue
			}
			if string(data) != j.ark {
				r.violate(CheckOneARK, j.id, "local id %s bound to %s, the job has %s", lid, data, j.ark)
			}
		}
	}
	data, err := get(in, "/counters/"+lockName(in.Shoulder))
	if errors.Is(err, zk.ErrNoNode) {
		data = []byte("0")
	} else if err != nil {
		return fmt.Errorf("reading the mint counter: %w", err)
	}
	minted, err := strconv.Atoi(string(data))
	if err != nil {
		return fmt.Errorf("mint counter %q: %w", data, err)
	}
	r.Figures["ARK numbers reserved"] = minted
	r.Figures["ARKs held"] = len(owner)
	// Numbers are reserved in blocks (a process that stops leaves the rest
	// of its block unused); each ARK held must be a reserved number, and
	// one job's alone (above).
	for ark, jid := range owner {
		n, ok := noidNumber(in.Shoulder, ark)
		if !ok || n < 1 || n > int64(minted) {
			r.violate(CheckOneARK, jid, "ARK %s is not one of the %d numbers the mint counter reserved", ark, minted)
		}
	}
	return nil
}

// betanumeric is NOID's digits: what an ARK minted on a shoulder spells its
// number in, before a check character.
const betanumeric = "0123456789bcdfghjkmnpqrstvwxz"

// noidNumber reads the number an ARK minted on shoulder spells, checking
// its check character (NOID's: each character's ordinal times its
// position, modulo 29, over the id after "ark:/").
func noidNumber(shoulder, ark string) (int64, bool) {
	blade, ok := strings.CutPrefix(ark, shoulder)
	if !ok || len(blade) < 2 {
		return 0, false
	}
	id := strings.TrimPrefix(ark, "ark:/")
	sum := 0
	for i := 0; i < len(id)-1; i++ {
		if ord := strings.IndexByte(betanumeric, id[i]); ord > 0 {
			sum += ord * (i + 1)
		}
	}
	if betanumeric[sum%len(betanumeric)] != id[len(id)-1] {
		return 0, false
	}
	var n int64
	for _, c := range blade[:len(blade)-1] {
		d := strings.IndexRune(betanumeric, c)
		if d < 0 {
			return 0, false
		}
		n = n*29 + int64(d)
	}
	return n, true
}

// checkCallbacks: every completed job's callback came at least once,
// naming the job and its ARK; a callback came again only for the same job,
// which the receiver deduplicates on its key: the job's id, in the body
// (jid) and in the Idempotency-Key header, which must agree where sent (a
// notifier older than the header sends the body alone).
func (r *Report) checkCallbacks(in Input, completed []completedJob) {
	byJob := map[string][]callbackBody{}
	for _, c := range in.Callbacks {
		var body callbackBody
		if err := json.Unmarshal(c.Body, &body); err != nil || body.JobID == "" {
			r.violate(CheckCallback, "callbacks", "a callback whose body names no job: %q", c.Body)
			continue
		}
		switch c.Key {
		case "":
			r.Figures["callbacks without an Idempotency-Key header (a notifier older than it)"]++
		case body.JobID:
		default:
			r.violate(CheckCallback, body.JobID, "callback under Idempotency-Key %s names job %s", c.Key, body.JobID)
		}
		byJob[body.JobID] = append(byJob[body.JobID], body)
	}
	for _, j := range completed {
		calls := byJob[j.id]
		if len(calls) == 0 {
			r.violate(CheckCallback, j.id, "no callback")
			continue
		}
		for _, c := range calls {
			if c.ARK != j.ark {
				r.violate(CheckCallback, j.id, "callback names ARK %s, the job has %s", c.ARK, j.ark)
			}
		}
		r.Figures["callbacks delivered"]++
		r.Figures["callbacks delivered again (same key)"] += len(calls) - 1
	}
}

// callbackBody is what the checker reads of a callback.
type callbackBody struct {
	JobID string `json:"jid"`
	ARK   string `json:"ark"`
}

// checkMail: each batch's report is one mail (one outbox file under its
// key, which a resend overwrites); no batch has two reports.
func (r *Report) checkMail(in Input) {
	des, err := os.ReadDir(in.OutboxDir)
	if err != nil {
		r.violate(CheckOneMail, "outbox", "%v", err)
		return
	}
	for i := range in.Traffic.Batches() {
		bid, ok := in.Traffic.Bid(i)
		if !ok {
			continue
		}
		var mails []string
		for _, de := range des {
			if strings.HasPrefix(de.Name(), bid+"-report") {
				mails = append(mails, de.Name())
			}
		}
		first := slices.Contains(mails, bid+"-report.eml")
		if !first || len(mails)-1 > in.Traffic.UpdateReports(bid) {
			r.violate(CheckOneMail, bid, "report mails %v for one report and %d update reports asked for", mails, in.Traffic.UpdateReports(bid))
			continue
		}
		r.Figures["reports mailed"] += len(mails)
	}
}

// checkEffectsFirst: a job moved on from Storing only once its version was
// complete in the store (the version manifest's modification time, the
// file system's own record), and from Notify only once its callback had
// been received (the depositor's own record).
func (r *Report) checkEffectsFirst(in Input, completed []completedJob) {
	seen := in.Watch.Jobs()
	firstCall := map[string]time.Time{}
	for _, c := range in.Callbacks {
		var body callbackBody
		if json.Unmarshal(c.Body, &body) != nil {
			continue
		}
		if t, ok := firstCall[body.JobID]; !ok || c.At.Before(t) {
			firstCall[body.JobID] = c.At
		}
	}
	for _, j := range completed {
		w, ok := seen[j.id]
		if !ok || len(w.Reads) == 0 {
			continue
		}
		moves := w.Reads[len(w.Reads)-1].Moves
		for _, m := range moves {
			switch {
			case m.From == model.Storing && m.To == model.Recording:
				var done time.Time
				if in.Merritt != nil {
					var ok bool
					if done, ok = in.Merritt.Created(in.MerrittNode, j.ark, j.invVersion); !ok {
						continue // checkMerrittStore names it
					}
				} else {
					fi, err := os.Stat(filepath.Join(in.StoreRoot, lockName(j.ark), "v"+strconv.Itoa(j.invVersion), "manifest.checkm"))
					if err != nil {
						continue // checkStore names it
					}
					done = fi.ModTime()
				}
				if done.After(m.At.Add(slack)) {
					r.violate(CheckEffectFirst, j.id, "moved to Recording by %s at %s, its version completed in the store at %s",
						m.Worker, m.At.Format("15:04:05.000"), done.Format("15:04:05.000"))
				}
				r.Figures["effects checked before their commit"]++
			case m.From == model.Notify && m.To == model.Completed:
				t, ok := firstCall[j.id]
				if !ok {
					continue // checkCallbacks names it
				}
				if t.After(m.At.Add(slack)) {
					r.violate(CheckEffectFirst, j.id, "Completed by %s at %s, its callback received at %s", m.Worker,
						m.At.Format("15:04:05.000"), t.Format("15:04:05.000"))
				}
				r.Figures["effects checked before their commit"]++
			}
		}
	}
}
