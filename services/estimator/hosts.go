package main

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/ingestq/ingestq/shared/fetch"
)

// hostGate gives up, for the rest of one job, on a host that failed limit
// HEAD requests in a row (no answer or a 5xx), so that a dead host costs a
// few timeouts rather than one per file. Until a host has answered once in
// the job, fewer than limit requests go to it at once: a host dead from
// the start is asked at most limit times. A request enters the gate of
// every host it reaches, a redirect's target too, so these hold however a
// host is reached.
type hostGate struct {
	limit   int
	mu      sync.Mutex
	hosts   map[string]*hostState
	changed chan struct{} // closed and replaced on every change of a host's state
}

type hostState struct {
	streak   int  // failures in a row
	inFlight int  // requests sent and not yet ended
	answered bool // answered (any status but a 5xx) once in this job
	down     bool // given up on
}

// headResult is how a HEAD request to a host ended, for the gate.
type headResult int

const (
	headAnswered headResult = iota // the host answered
	headFailed                     // no answer, or a 5xx
	headNeutral                    // says nothing of the host (cut short, refused by policy)
)

func newHostGate(limit int) *hostGate {
	return &hostGate{limit: limit, hosts: map[string]*hostState{}, changed: make(chan struct{})}
}

// enter waits until a request may go to host and counts it in flight.
// false: the host is given up on, or ctx ended first.
func (g *hostGate) enter(ctx context.Context, host string) bool {
	for {
		g.mu.Lock()
		h := g.hosts[host]
		if h == nil {
			h = &hostState{}
			g.hosts[host] = h
		}
		switch {
		case h.down:
			g.mu.Unlock()
			return false
		case h.answered && h.streak == 0, h.streak+h.inFlight < g.limit:
			h.inFlight++
			g.mu.Unlock()
			return true
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// leave ends a request enter let through. It returns true when this
// failure made the gate give up on the host.
func (g *hostGate) leave(host string, r headResult) (givenUp bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hosts[host]
	h.inFlight--
	switch r {
	case headAnswered:
		h.answered, h.streak = true, 0
	case headFailed:
		h.streak++
		if h.streak >= g.limit && !h.down {
			h.down, givenUp = true, true
		}
	}
	close(g.changed)
	g.changed = make(chan struct{})
	return givenUp
}

// headResultOf sorts a HEAD request's error, of the host the request was
// at when it ended: a refused or dropped connection, a timeout or a 5xx is
// the host failing; any other status is an answer, and so is a redirect
// not followed (too many, or to a URL the policy refuses); a URL the
// policy refuses never reached the host.
func headResultOf(err error) headResult {
	var se *fetch.StatusError
	var re *fetch.RedirectError
	switch {
	case err == nil:
		return headAnswered
	case errors.As(err, &se):
		if se.Code >= 500 {
			return headFailed
		}
		return headAnswered
	case errors.As(err, &re):
		return headAnswered
	case errors.Is(err, fetch.ErrDenied), errors.Is(err, fetch.ErrScheme):
		return headNeutral
	}
	return headFailed
}

// hostOf is the host (and port) a file URL names, the gate's key.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return hostKey(u)
}

// hostKey is u's host (and port), the gate's key.
func hostKey(u *url.URL) string { return strings.ToLower(u.Host) }

// downHosts names the hosts given up on, sorted.
func (g *hostGate) downHosts() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var down []string
	for name, h := range g.hosts {
		if h.down {
			down = append(down, name)
		}
	}
	slices.Sort(down)
	return down
}
