package zkwire

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// A session outlives a server that hangs (a long GC pause, a hung disk, a
// frozen VM: the process still accepts connections and answers nothing)
// only if its client gives up on that server, and finds one that answers,
// before the session times out. go-zookeeper alone does not: it waits for
// the answer that opens a connection ten times its read timeout (over six
// session timeouts), and pauses a second after each round of servers. The
// connection's serverRing (go-zookeeper's HostProvider) and its dialer
// (wire.dial) set the pace instead:
//
//   - The answer that opens a connection is awaited for a handshake bound:
//     a 2n-th of the session timeout among n servers (at least
//     minHandshake), so that a round of every server takes half the
//     session timeout. A server silent for its bound is taken for hung, and
//     its bound doubles (up to go-zookeeper's own wait): a server slow
//     rather than hung is waited for long enough in the end. A session
//     opened with it resets its bound.
//   - A server taken for hung (silent for its handshake bound, or for
//     go-zookeeper's read timeout on an open connection: two thirds of the
//     session timeout, with a ping every third) is passed over for a
//     session timeout, unless every server is.
//   - While the session may still be kept (a session timeout from the
//     first failed attempt), attempts come every quickPace at most, and a
//     request made meanwhile waits for the connection. After that
//     go-zookeeper paces them, as it does alone: each round of every
//     server begins a second after the last, and answers the requests
//     waiting with zk.ErrNoServer.
//   - An idle connection is pinged every 20th of the session timeout
//     (wire.keepAlive; go-zookeeper pings every third): when its server
//     hangs, the last word from it is that recent, and the client, which
//     gives up on it two thirds of a session timeout after that word,
//     counts its session lost a session timeout later still (package
//     session does). That leaves a frozen leader's followers about 5/3
//     of a session timeout to notice and elect another, which gives every
//     session a whole timeout afresh.
//
// A client that was on the hung server, or whose server dropped it for an
// election, is thus on a server that answers within a handshake bound or
// two of one serving again. On a frozen follower it has a third of the
// session timeout for that, as the leader expires a session a session
// timeout after the follower last passed on word of it.
const (
	minHandshake = 100 * time.Millisecond
	quickPace    = 100 * time.Millisecond
)

// serverRing hands go-zookeeper the server to try next, and the dialer how
// long to wait for it. It is safe for concurrent use.
type serverRing struct {
	timeout   time.Duration // the session timeout asked for
	closed    chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	servers []*ringServer
	base    time.Duration // the handshake bound of a server not found hung
	cur     int           // the server handed out last (-1: none)
	// attempts is how many servers were handed out since the last session
	// was opened, the first at first; last is when the last connection
	// attempt began.
	attempts    int
	first, last time.Time
}

// ringServer is one server's address and how it answered.
type ringServer struct {
	addr  string
	bound time.Duration // for the answer that opens a connection
	// passUntil: taken for hung, it is passed over until then.
	passUntil time.Time
}

var _ zk.HostProvider = (*serverRing)(nil)

func newServerRing(sessionTimeout time.Duration) *serverRing {
	return &serverRing{timeout: sessionTimeout, closed: make(chan struct{}), cur: -1}
}

// Init takes the servers, their names resolved once (as go-zookeeper's own
// host provider does), in a random order so that clients spread over them.
func (r *serverRing) Init(servers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var addrs []string
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return err
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, port))
		}
	}
	if len(addrs) == 0 {
		return fmt.Errorf("no address found for ZooKeeper servers %q", servers)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.base = max(r.timeout/time.Duration(2*len(addrs)), minHandshake)
	r.servers = r.servers[:0]
	for _, a := range addrs {
		r.servers = append(r.servers, &ringServer{addr: a, bound: r.base})
	}
	return nil
}

// Len is the number of servers.
func (r *serverRing) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.servers)
}

// Next is the server after the last one handed out that is not passed
// over; when every one is, the one whose pass ends first. It says a round
// begins (go-zookeeper then answers the requests waiting with
// zk.ErrNoServer, pauses a second and looks whether it was closed) once
// the ring is closed, and at each round once the session could no longer
// be kept.
func (r *serverRing) Next() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.closed:
		return r.servers[max(r.cur, 0)].addr, true
	default:
	}
	now := time.Now()
	n := len(r.servers)
	if r.attempts == 0 {
		r.first = now
	}
	round := r.slowLocked(now) && r.attempts%n == 0
	r.attempts++
	pick := -1
	for k := 1; k <= n; k++ {
		if i := (r.cur + k) % n; !now.Before(r.servers[i].passUntil) {
			pick = i
			break
		}
	}
	if pick < 0 {
		pick = 0
		for i, s := range r.servers {
			if s.passUntil.Before(r.servers[pick].passUntil) {
				pick = i
			}
		}
	}
	r.cur = pick
	return r.servers[pick].addr, round
}

// slowLocked reports whether the attempts have gone on for a session
// timeout: the session could not be kept.
func (r *serverRing) slowLocked(now time.Time) bool {
	return r.attempts > 0 && now.Sub(r.first) >= r.timeout
}

// Connected is told that a session was opened with the server handed out
// last: its bound and the pace start afresh.
func (r *serverRing) Connected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur >= 0 {
		s := r.servers[r.cur]
		s.bound, s.passUntil = r.base, time.Time{}
	}
	r.attempts = 0
}

// begin waits for the pace of attempts, then returns how long to wait for
// addr's answer that opens the connection (zk.ErrClosing once the ring is
// closed).
func (r *serverRing) begin(addr string) (time.Duration, error) {
	r.mu.Lock()
	now := time.Now()
	var wait time.Duration
	if r.attempts > 1 && !r.slowLocked(now) {
		wait = r.last.Add(quickPace).Sub(now)
	}
	bound := r.base
	if s := r.server(addr); s != nil {
		bound = s.bound
	}
	r.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-r.closed:
			return 0, zk.ErrClosing
		case <-t.C:
		}
	}
	select {
	case <-r.closed:
		return 0, zk.ErrClosing
	default:
	}
	r.mu.Lock()
	r.last = time.Now()
	r.mu.Unlock()
	return bound, nil
}

// silent is told that addr did not answer in time: while opening a
// connection (within its handshake bound, which then doubles) or on an
// open one. It is passed over for a session timeout.
func (r *serverRing) silent(addr string, opening bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.server(addr)
	if s == nil {
		return
	}
	s.passUntil = time.Now().Add(r.timeout)
	if opening {
		// go-zookeeper's own wait: ten read timeouts of two thirds of the
		// session timeout.
		s.bound = min(2*s.bound, r.timeout*20/3)
	}
}

// answered is told that addr answered the opening of a connection, if
// only by closing it: it is not hung.
func (r *serverRing) answered(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.server(addr); s != nil {
		s.passUntil = time.Time{}
	}
}

func (r *serverRing) server(addr string) *ringServer {
	for _, s := range r.servers {
		if s.addr == addr {
			return s
		}
	}
	return nil
}

// close ends the attempts: a pace being waited for ends, and go-zookeeper
// is told to look whether its connection was closed.
func (r *serverRing) close() { r.closeOnce.Do(func() { close(r.closed) }) }
