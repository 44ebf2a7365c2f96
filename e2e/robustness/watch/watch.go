// Package watch records, from outside, what happens to every job of a
// queue while a run goes on: each state its status node is seen in (a
// ZooKeeper data watch on it, its version and the moves its history
// lists), each holder of its lock (an exists watch: the session that
// created the ephemeral node, and when), and the session of every worker
// entry. It uses its own ZooKeeper session and reads the nodes as the
// contract spells them, not through the code under test.
package watch

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// Read is one read of a job's status node.
type Read struct {
	Call, Return time.Time
	Version      int32
	Mtime        time.Time
	State        string // "" when the node was missing or unreadable
	Moves        []Move
	Dropped      int // history entries the status says it dropped
}

// Move is one entry of a status's history: a change of state and who made it.
type Move struct {
	At      time.Time `json:"at"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Worker  string    `json:"worker"`
	Message string    `json:"message"`
}

// Lock is one holding of a job's lock node.
type Lock struct {
	Session int64
	Created time.Time // the node's ctime
	// Gone is when its deletion was seen (zero while held, or when the
	// watch lost sight of it): the next holding's ctime, or the time the
	// watcher found the node missing, which can be well after the deletion.
	Gone time.Time
	// Tight: no other holding began between its deletion and Gone. A
	// watch is set again only after it fired, so a holding begun and
	// ended in between goes unseen; the job node's child version, which
	// counts every lock created and deleted, shows whether one did.
	Tight bool
}

// Job is what was seen of one job.
type Job struct {
	ID    string
	Reads []Read
	Locks []Lock
}

// Recorder watches a queue.
type Recorder struct {
	conn   *zk.Conn
	root   string
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	jobs    map[string]*Job
	workers map[string][]int64 // worker id → its sessions, in order
}

// Start connects to servers and watches the queue under root until Stop.
func Start(ctx context.Context, servers []string, root string, log *slog.Logger) (*Recorder, error) {
	conn, events, err := zk.Connect(servers, 20*time.Second, zk.WithLogger(Quiet{}))
	if err != nil {
		return nil, err
	}
	go func() {
		for range events {
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	r := &Recorder{conn: conn, root: root, log: log, cancel: cancel, jobs: map[string]*Job{}, workers: map[string][]int64{}}
	r.wg.Add(2)
	go r.children(ctx, root+"/jobs", r.job)
	go r.children(ctx, root+"/workers", r.worker)
	return r, nil
}

// Quiet is a ZooKeeper client logger that says nothing: the client's
// reconnections under faults are what the run is about, not news.
type Quiet struct{}

// Printf says nothing.
func (Quiet) Printf(string, ...any) {}

// Stop ends the watches and the session.
func (r *Recorder) Stop() {
	r.cancel()
	r.conn.Close()
	r.wg.Wait()
}

// Jobs returns what was seen of each job, by id.
func (r *Recorder) Jobs() map[string]Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Job, len(r.jobs))
	for id, j := range r.jobs {
		out[id] = Job{ID: id, Reads: append([]Read(nil), j.Reads...), Locks: append([]Lock(nil), j.Locks...)}
	}
	return out
}

// Workers returns the sessions each worker entry was seen under (a
// replica whose session expired registers again under its next).
func (r *Recorder) Workers() map[string][]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]int64, len(r.workers))
	for k, v := range r.workers {
		out[k] = append([]int64(nil), v...)
	}
	return out
}

// pause is how long a watch loop waits after an error (the ensemble
// electing a leader, say) before it looks again.
const pause = 200 * time.Millisecond

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// children calls each for every new child of path, for as long as ctx lasts.
func (r *Recorder) children(ctx context.Context, path string, each func(context.Context, string)) {
	defer r.wg.Done()
	// A child that goes and comes back (a worker entry re-created under a
	// new session) is new again.
	seen := map[string]bool{}
	for ctx.Err() == nil {
		names, _, ch, err := r.conn.ChildrenW(path)
		if errors.Is(err, zk.ErrNoNode) {
			_, _, ch, err = r.conn.ExistsW(path)
		}
		if err != nil {
			sleep(ctx, pause)
			continue
		}
		now := map[string]bool{}
		for _, n := range names {
			now[n] = true
			if !seen[n] {
				each(ctx, n)
			}
		}
		seen = now
		select {
		case <-ctx.Done():
		case <-ch:
		}
	}
}

// worker watches one worker entry for as long as ctx lasts, recording
// every session it is seen under: a replica whose session expired creates
// it again under its next, perhaps before the folder's listing shows it
// gone.
func (r *Recorder) worker(ctx context.Context, id string) {
	r.mu.Lock()
	_, known := r.workers[id]
	if !known {
		r.workers[id] = nil
	}
	r.mu.Unlock()
	if known {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		path := r.root + "/workers/" + id
		for ctx.Err() == nil {
			ok, stat, ch, err := r.conn.ExistsW(path)
			if err != nil {
				if !sleep(ctx, pause) {
					return
				}
				continue
			}
			if ok {
				r.mu.Lock()
				if !slices.Contains(r.workers[id], stat.EphemeralOwner) {
					r.workers[id] = append(r.workers[id], stat.EphemeralOwner)
				}
				r.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
		}
	}()
}

// job starts the watches of one job (jid…; the states folder and others
// are not jobs).
func (r *Recorder) job(ctx context.Context, name string) {
	if !strings.HasPrefix(name, "jid") {
		return
	}
	r.mu.Lock()
	_, known := r.jobs[name]
	if !known {
		r.jobs[name] = &Job{ID: name}
	}
	r.mu.Unlock()
	if known {
		return
	}
	r.wg.Add(2)
	go r.status(ctx, name)
	go r.lock(ctx, name)
}

// statusJSON is what the watcher reads of a status node.
type statusJSON struct {
	Status  string `json:"status"`
	History []Move `json:"history"`
	Dropped int    `json:"history_dropped"`
}

func (r *Recorder) status(ctx context.Context, jid string) {
	defer r.wg.Done()
	path := r.root + "/jobs/" + jid + "/status"
	for ctx.Err() == nil {
		call := time.Now()
		data, stat, ch, err := r.conn.GetW(path)
		ret := time.Now()
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, ch, err = r.conn.ExistsW(path)
			if err == nil && ok {
				continue
			}
		}
		if err != nil {
			if !sleep(ctx, pause) {
				return
			}
			continue
		}
		if stat != nil {
			rd := Read{Call: call, Return: ret, Version: stat.Version, Mtime: time.UnixMilli(stat.Mtime)}
			var st statusJSON
			if json.Unmarshal(data, &st) == nil {
				rd.State, rd.Moves, rd.Dropped = st.Status, st.History, st.Dropped
			}
			r.mu.Lock()
			j := r.jobs[jid]
			j.Reads = append(j.Reads, rd)
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// children is a reading of a job node's children: its child version
// (each child created or deleted adds one) and the names but the lock's.
// A job's children other than its lock are created once and never
// deleted while it lives.
type children struct {
	cversion int32
	others   map[string]bool
	lock     bool // the lock is among them
}

func (r *Recorder) readChildren(path string) (children, *zk.Stat, error) {
	names, stat, err := r.conn.Children(path)
	if err != nil {
		return children{}, nil, err
	}
	c := children{cversion: stat.Cversion, others: map[string]bool{}}
	for _, n := range names {
		if n == "lock" {
			c.lock = true
		} else {
			c.others[n] = true
		}
	}
	return c, stat, nil
}

// lockChanges is how many times the lock was created or deleted between
// readings a and b: the child version's change less the other children
// created.
func lockChanges(a, b children) int {
	n := int(b.cversion - a.cversion)
	for name := range b.others {
		if !a.others[name] {
			n--
		}
	}
	for name := range a.others {
		if !b.others[name] {
			n-- // not expected; counted so that the reckoning never lowers
		}
	}
	return n
}

func (r *Recorder) lock(ctx context.Context, jid string) {
	defer r.wg.Done()
	job := r.root + "/jobs/" + jid
	path := job + "/lock"
	var held *Lock // the holding seen last, while it may still be there
	// since: the job's children read just after held began; sinceExact:
	// nothing under the job changed between held's creation and that
	// reading.
	var since children
	var sinceExact bool
	for ctx.Err() == nil {
		ok, stat, ch, err := r.conn.ExistsW(path)
		if err != nil {
			if !sleep(ctx, pause) {
				return
			}
			continue
		}
		now := time.Now()
		// Read after the lookup: what changed in between counts against
		// a holding's tightness, never for it.
		kids, jobStat, kerr := r.readChildren(job)
		r.mu.Lock()
		j := r.jobs[jid]
		switch {
		case ok && (held == nil || held.Session != stat.EphemeralOwner || !held.Created.Equal(time.UnixMilli(stat.Ctime))):
			created := time.UnixMilli(stat.Ctime)
			if held != nil {
				// The new holding proves the last one gone by its creation;
				// tight when the lock changed twice since: that deletion and
				// this creation.
				gone := now
				if created.Before(now) {
					gone = created
				}
				last := &j.Locks[len(j.Locks)-1]
				last.Gone, last.Tight = gone, sinceExact && kerr == nil && lockChanges(since, kids) == 2
			}
			j.Locks = append(j.Locks, Lock{Session: stat.EphemeralOwner, Created: created})
			held = &Lock{Session: stat.EphemeralOwner, Created: created}
			since, sinceExact = kids, kerr == nil && jobStat.Pzxid == stat.Czxid
		case !ok && held != nil:
			if kerr == nil && kids.lock {
				// A next holding began after the lookup: look again, and
				// end this one by that holding's creation.
				r.mu.Unlock()
				continue
			}
			last := &j.Locks[len(j.Locks)-1]
			last.Gone, last.Tight = now, sinceExact && kerr == nil && lockChanges(since, kids) == 1
			held = nil
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
