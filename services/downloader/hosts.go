package main

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/retry"
)

// How long a job whose host is at its limit waits before it is taken
// again. The jobs of one host wait in a line, in the order they were first
// turned away, served at the pace the host completes downloads: a job with
// k jobs before it waits about k+1 of the host's completion intervals, so
// that one fast host's backlog of thousands drains as fast as the host
// delivers, while a slow host's line is served at hostRetriesPerSecond (a
// queue of thousands of its jobs does not turn into thousands of claims a
// second). A job whose turn is due within turnWait waits for its slot in
// the downloader, holding its worker (at most half the host's limit of
// them, for holdWait at the most), and is handed the slot as it frees:
// served at a wait's end, it would come back a little early or late and
// be turned away again, or leave the slot idle. A slot freed is kept for
// a job that waits before the one asking, if it is due back soon (within
// turnWait, or a few intervals of a fast host). Otherwise a slot would go
// to whichever job happened to be taken when it freed, and a job could
// wait for ever behind a deep queue.
const (
	hostRetriesPerSecond = 4
	turnWait             = 200 * time.Millisecond
	holdWait             = 500 * time.Millisecond
	// The least wait: a job is not taken again sooner, whatever the pace.
	minHostWait = 10 * time.Millisecond
	maxHostWait = 2 * time.Minute
	// A waiting job not seen again turnLapse after its wait ended was
	// taken by another replica (their spare workers take the same oldest
	// jobs) or is delayed: the slot is not kept for it. A slot so waits
	// turnWait+turnLapse at the most.
	turnLapse = 300 * time.Millisecond
	// A waiting job not seen again this long after its wait ended was
	// taken by another replica or left Downloading: it no longer counts.
	hostWaitForgotten = 10 * time.Second
	// The waits are spread by up to this share, shorter, so that jobs
	// given the same wait do not come back at once.
	hostWaitJitter = 0.1
)

// hostSlots bounds the jobs of one host a replica downloads at once, so
// that a slow host cannot hold every worker of the stage: a job whose host
// is at its limit is given back to wait, holding no worker (or, its turn
// due at once, waits briefly for it). The zero value is ready for use.
type hostSlots struct {
	mu     sync.Mutex
	lines  map[string]*hostLine // host → its slots and line
	taken  map[string]time.Time // job → when it took its slots
	pruned time.Time            // when forgotten waits were last dropped
}

// hostLine is one host's busy slots, its line, and how fast it has been
// completing downloads.
type hostLine struct {
	busy    int
	limit   int                    // as last asked for
	waiting map[string]*hostWaiter // job → its wait
	holding int                    // waiting jobs held in take
	// perJob is a moving average of how long a job held the host's slot
	// (0: none completed yet); moved is when a download from the host
	// last completed, or when its first slot was taken.
	perJob time.Duration
	moved  time.Time
	// busySince is when the host's slots last went from none busy to
	// one: how long its pace has been watched.
	busySince time.Time
}

// hostWaiter is a job turned away by a host at its limit.
type hostWaiter struct {
	since time.Time // first turned away: its place in the line
	until time.Time // end of its present wait
	// While the job is held in take (holding), wake is closed when give
	// hands it the slot (handed) or an older job takes its place.
	holding, handed bool
	wake            chan struct{}
}

// interval is the time between the host's completions with all its limit
// slots busy, as last seen: the time a job takes, over the slots. Without
// a completion for longer, it is that long: a host that stops delivering
// has its line slowed at once, down to the least pace. Until a first
// download from the host completes, a job is taken to last turnWait at
// least.
func (l *hostLine) interval(limit int, now time.Time) time.Duration {
	perJob := l.perJob
	if perJob == 0 {
		perJob = turnWait
	}
	d := max(perJob, now.Sub(l.moved)) / time.Duration(limit)
	return min(d, time.Second/hostRetriesPerSecond)
}

// ahead counts the jobs of the line before job me (all of them if me is
// nil), and those of them a free slot is kept for: held in take, or due
// back within soon, or due since lapse at most.
func (l *hostLine) ahead(jid string, me *hostWaiter, now time.Time, soon, lapse time.Duration) (ahead, kept int) {
	for id, w := range l.waiting {
		if id == jid || (me != nil && !w.since.Before(me.since)) {
			continue
		}
		ahead++
		if w.holding || (w.until.After(now.Add(-lapse)) && w.until.Before(now.Add(soon))) {
			kept++
		}
	}
	return ahead, kept
}

// makeRoom reports whether job me may be held in take: while fewer than
// half the host's limit are held, or else in the place of the youngest
// held job if me waited longer; that job is woken to be turned away.
func (l *hostLine) makeRoom(me *hostWaiter, limit int) bool {
	if l.holding < max(1, limit/2) {
		return true
	}
	var youngest *hostWaiter
	for _, w := range l.waiting {
		if w.holding && (youngest == nil || w.since.After(youngest.since)) {
			youngest = w
		}
	}
	if youngest == nil || !youngest.since.After(me.since) {
		return false
	}
	youngest.holding = false
	close(youngest.wake)
	l.holding--
	return true
}

// take reserves a slot at each of hosts for job jid, all or none, with at
// most limit jobs per host. When a host is at its limit, or its free slots
// are kept for jobs that have waited longer, it returns that host and how
// long the job should wait before it is tried again; a job of one host
// whose turn is due soon waits here for its slot first, until ctx ends at
// the latest.
func (h *hostSlots) take(ctx context.Context, limit int, jid string, hosts []string) (full string, wait time.Duration) {
	h.mu.Lock()
	full, wait, held := h.admit(limit, jid, hosts, true)
	h.mu.Unlock()
	if held == nil {
		return full, wait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-held.wake:
	case <-timer.C:
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if held.handed {
		return "", 0
	}
	if held.holding {
		held.holding = false
		h.lines[full].holding--
	}
	full, wait, _ = h.admit(limit, jid, hosts, false)
	return full, wait
}

// admit is take's decision, under h.mu. A job to hold is returned with
// how long it may be held.
func (h *hostSlots) admit(limit int, jid string, hosts []string, mayHold bool) (full string, wait time.Duration, held *hostWaiter) {
	if h.lines == nil {
		h.lines, h.taken = map[string]*hostLine{}, map[string]time.Time{}
	}
	now := time.Now()
	if now.Sub(h.pruned) > hostWaitForgotten {
		h.forget(now)
	}
	for _, host := range hosts {
		line := h.lines[host]
		if line == nil {
			line = &hostLine{waiting: map[string]*hostWaiter{}}
			h.lines[host] = line
		}
		line.limit = limit
		interval := line.interval(limit, now)
		me := line.waiting[jid]
		// Soon, and the lapse, are within a few of the host's completion
		// intervals: a fast host's slots are not held idle for jobs that
		// slots freeing meanwhile will serve, or that are slow to come
		// back (those are held before the others once back: makeRoom).
		ahead, kept := line.ahead(jid, me, now, min(turnWait, 4*interval), min(turnLapse, 4*interval))
		if line.busy+kept < limit {
			continue
		}
		if me == nil {
			me = &hostWaiter{since: now}
			line.waiting[jid] = me
		}
		if mayHold && len(hosts) == 1 && time.Duration(ahead+1)*interval <= turnWait && line.makeRoom(me, limit) {
			me.holding, me.handed, me.wake, me.until = true, false, make(chan struct{}), now.Add(holdWait)
			line.holding++
			return host, holdWait, me
		}
		// The first in line comes back after one interval; the others
		// after as many as wait before them, and at least four, so that
		// the jobs near the head do not come back over and over.
		if ahead == 0 {
			wait = min(interval, turnWait)
		} else {
			wait = time.Duration(max(ahead+1, 4)) * interval
		}
		// A pace watched for a short time only is not trusted far ahead:
		// the first downloads from a host are often slower than the rest
		// (connections opened, files created). The job comes back, and
		// is told again, after eight times as long as the host has been
		// watched at the most.
		wait = min(wait, max(turnWait, 8*now.Sub(line.busySince)))
		wait = retry.Jittered(min(max(wait, minHostWait), maxHostWait), hostWaitJitter)
		me.until = now.Add(wait)
		return host, wait, nil
	}
	for _, host := range hosts {
		line := h.lines[host]
		if line.busy == 0 {
			line.moved, line.busySince = now, now
		}
		line.busy++
		delete(line.waiting, jid)
	}
	h.taken[jid] = now
	return "", 0, nil
}

// forget drops the waits that ended more than hostWaitForgotten ago, of
// every host, and the hosts left with nothing busy and no one waiting: a
// host whose jobs all went elsewhere leaves nothing behind.
func (h *hostSlots) forget(now time.Time) {
	for host, line := range h.lines {
		for jid, w := range line.waiting {
			if !w.holding && now.Sub(w.until) > hostWaitForgotten {
				delete(line.waiting, jid)
			}
		}
		if len(line.waiting) == 0 && line.busy == 0 && now.Sub(line.moved) > hostWaitForgotten {
			delete(h.lines, host)
		}
	}
	h.pruned = now
}

// give frees the slots take reserved for job jid, counting the time they
// were held towards the hosts' pace. A slot is handed to the job held in
// take first in line: a job before it that is due back but not here yet
// would leave the slot idle meanwhile, and once back, it is held before
// the others (makeRoom) and so served next.
func (h *hostSlots) give(jid string, hosts []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	held := now.Sub(h.taken[jid])
	delete(h.taken, jid)
	for _, host := range hosts {
		line := h.lines[host]
		if line == nil {
			continue
		}
		if line.perJob == 0 {
			line.perJob = held
		} else {
			line.perJob += (held - line.perJob) / 8
		}
		line.moved = now
		line.busy--
		if line.holding == 0 {
			continue
		}
		var first string
		for id, w := range line.waiting {
			if w.holding && (first == "" || w.since.Before(line.waiting[first].since)) {
				first = id
			}
		}
		w := line.waiting[first]
		w.holding, w.handed = false, true
		close(w.wake)
		line.holding--
		line.busy++
		delete(line.waiting, first)
		h.taken[first] = now
	}
}

// hostsOf lists the hosts a file list's URLs name, each once, in order. A
// URL that does not parse names none: fetching it fails the job anyway.
func hostsOf(m *v1.Manifest) []string {
	seen := map[string]bool{} // an object's files may come from as many hosts
	var hosts []string
	for _, f := range m.GetFiles() {
		u, err := url.Parse(f.GetUrl())
		if err != nil || u.Hostname() == "" {
			continue
		}
		host := strings.ToLower(u.Hostname())
		if !seen[host] {
			seen[host] = true
			hosts = append(hosts, host)
		}
	}
	slices.Sort(hosts)
	return hosts
}
