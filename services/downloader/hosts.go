package main

import (
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/retry"
)

// How long a job whose host is at its limit waits before it is taken
// again. The waits of one host's jobs are spread so that, however many
// wait, about hostRetriesPerSecond of them are taken again each second: a
// queue of thousands of one host's jobs does not turn into thousands of
// claims a second. They are served in the order they were first turned
// away: the job waiting longest comes back after turnWait, the others the
// later the more jobs wait before them, and a slot freed is kept for a job
// that waits before the one asking, if it is due back within turnWait.
// Otherwise a slot would go to whichever job happened to be
// taken when it freed, and a job could wait for ever behind a deep queue.
const (
	hostRetriesPerSecond = 4
	turnWait             = 200 * time.Millisecond
	minHostWait          = time.Second
	maxHostWait          = 2 * time.Minute
	// A waiting job not seen again turnLapse after its wait ended was
	// taken by another replica (their spare workers take the same oldest
	// jobs) or is delayed: the slot is not kept for it. A slot so waits
	// turnWait+turnLapse at the most.
	turnLapse = 300 * time.Millisecond
	// A waiting job not seen again this long after its wait ended was
	// taken by another replica or left Downloading: it no longer counts.
	hostWaitForgotten = 10 * time.Second
)

// hostSlots bounds the jobs of one host a replica downloads at once, so
// that a slow host cannot hold every worker of the stage: a job whose host
// is at its limit is given back to wait, holding no worker. The zero value
// is ready for use.
type hostSlots struct {
	mu      sync.Mutex
	busy    map[string]int                    // host → jobs downloading from it
	waiting map[string]map[string]*hostWaiter // host → job → its wait
	pruned  time.Time                         // when forgotten waits were last dropped
}

// hostWaiter is a job turned away by a host at its limit.
type hostWaiter struct {
	since time.Time // first turned away: its place in the host's line
	until time.Time // end of its present wait
}

// take reserves a slot at each of hosts for job jid, all or none, with at
// most limit jobs per host. When a host is at its limit, or its free slots
// are kept for jobs that have waited longer, it returns that host and how
// long the job should wait before it is tried again.
func (h *hostSlots) take(limit int, jid string, hosts []string) (full string, wait time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy == nil {
		h.busy, h.waiting = map[string]int{}, map[string]map[string]*hostWaiter{}
	}
	now := time.Now()
	if now.Sub(h.pruned) > hostWaitForgotten {
		h.forget(now)
	}
	for _, host := range hosts {
		waiting := h.waiting[host]
		me := waiting[jid]
		// Jobs that waited before this one and are due back soon: the
		// free slots are theirs first.
		ahead, kept := 0, 0
		for id, w := range waiting {
			if id == jid || (me != nil && !w.since.Before(me.since)) {
				continue
			}
			ahead++
			if w.until.After(now.Add(-turnLapse)) && w.until.Before(now.Add(turnWait)) {
				kept++
			}
		}
		if h.busy[host]+kept < limit {
			continue
		}
		if waiting == nil {
			waiting = map[string]*hostWaiter{}
			h.waiting[host] = waiting
		}
		if me == nil {
			me = &hostWaiter{since: now}
			waiting[jid] = me
		}
		if ahead == 0 {
			wait = turnWait
		} else {
			wait = time.Duration(ahead+1) * time.Second / hostRetriesPerSecond
			wait = min(max(wait, minHostWait), maxHostWait)
		}
		wait = retry.Jittered(wait, 0.5)
		me.until = now.Add(wait)
		return host, wait
	}
	for _, host := range hosts {
		h.busy[host]++
		if waiting := h.waiting[host]; waiting != nil {
			delete(waiting, jid)
			if len(waiting) == 0 {
				delete(h.waiting, host)
			}
		}
	}
	return "", 0
}

// forget drops the waits that ended more than hostWaitForgotten ago, of
// every host: a host whose jobs all went elsewhere leaves nothing behind.
func (h *hostSlots) forget(now time.Time) {
	for host, waiting := range h.waiting {
		for jid, w := range waiting {
			if now.Sub(w.until) > hostWaitForgotten {
				delete(waiting, jid)
			}
		}
		if len(waiting) == 0 {
			delete(h.waiting, host)
		}
	}
	h.pruned = now
}

// give frees the slots take reserved.
func (h *hostSlots) give(hosts []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, host := range hosts {
		if h.busy[host]--; h.busy[host] <= 0 {
			delete(h.busy, host)
		}
	}
}

// hostsOf lists the hosts a file list's URLs name, each once, in order. A
// URL that does not parse names none: fetching it fails the job anyway.
func hostsOf(m *v1.Manifest) []string {
	var hosts []string
	for _, f := range m.GetFiles() {
		u, err := url.Parse(f.GetUrl())
		if err != nil || u.Hostname() == "" {
			continue
		}
		host := strings.ToLower(u.Hostname())
		if !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	slices.Sort(hosts)
	return hosts
}
