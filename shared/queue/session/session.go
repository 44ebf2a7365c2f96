// Package session is one ZooKeeper session of the queue, as every role
// takes it (package jobs for the stages, batches for the batcher, admin for
// operators): the connection and its life (Session), every request to the
// server, retried, grouped and fenced as the queue needs (Nodes), and the
// lock nodes this session created until it knows them gone (LockBook, and
// Hold, the locking core of a job's and a batch's claim).
//
// # What a step costs the server
//
// ZooKeeper's cost is mostly per request, so a session sends few: a claim
// reads the job's status and the data nodes its consumer asks for in one
// multiRead (ZooKeeper 3.6+), then takes the lock in one multi; a commit
// is one multi. go-zookeeper has no multiRead, and encodes a multi slowly:
// both are framed on its connection by package zkwire, the one place that
// knows ZooKeeper's wire format. Concurrent calls of one session go together
// (group.go): the multiReads of the jobs a stage takes at the same moment
// are one request, their multis another, each caller keeping its own answer
// and atomicity. Against a server without multiRead the session reads node
// by node. Session.Requests counts what was sent, by operation and kind of
// node.
package session

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
)

// Options configure a Session.
type Options struct {
	// Servers are ZooKeeper "host:port" addresses.
	Servers []string
	// Root is the prefix every path hangs under ("" or "/some/prefix").
	Root string
	// SessionTimeout asks the server for this session timeout (default 10s).
	SessionTimeout time.Duration
	// Logger receives the session's own logs (default slog.Default()).
	Logger *slog.Logger
	// MaxResponseBytes bounds one response from the server (the client's
	// buffer grows to the largest it has received). Listing a state folder
	// of 100,000 jobs needs ~2 MB; a grouped multiRead may answer up to
	// MaxResponseBytes/1 MiB nodes of up to 1 MiB each. The default is 64 MiB.
	MaxResponseBytes int
	// Auth, when set, is added to the session as a "digest" credential
	// ("user:password") and every node this session creates gets an ACL
	// that lets that identity change it and everyone else only read it.
	Auth string
	// Ungrouped sends every multi as a request of its own instead of
	// grouping concurrent ones (see multiGroup); benchmarks compare both.
	Ungrouped bool
	// Worker names this session in the history of the jobs it moves
	// (default ProcessName(""): <host>-<pid>); a change's own worker
	// overrides it.
	Worker string
	// OnStateChange, if set, is called after each state change committed
	// in this session (metrics count them). It must not block.
	OnStateChange func(queue.StateChange)
}

// Session is one ZooKeeper session's view of the queue. It is safe for
// concurrent use.
type Session struct {
	conn           *countingConn
	p              queue.Paths
	log            *slog.Logger
	sessionTimeout time.Duration
	worker         string
	onChange       func(queue.StateChange)

	mu      sync.Mutex
	live    *Live // nil while there is no usable session
	subs    map[int]func(bool)
	nextSub int
	closed  chan struct{}
	loopEnd chan struct{}
	// established is closed, and replaced, whenever a session is
	// established (a new one, or one presumed lost that came back).
	established chan struct{}
	// life ends when the session is closed; background watches run under it.
	life context.Context
	stop context.CancelFunc

	nodes *Nodes
	locks *LockBook
}

// Live is one ZooKeeper session as the server knows it: every lock taken in
// it goes when it ends, and with it the right to change what the lock
// guards.
type Live struct {
	// ID is the session's id.
	ID     int64
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Context ends when the session is lost: work done under its locks must
// stop then.
func (l *Live) Context() context.Context { return l.ctx }

// Connect opens a session and makes sure the queue's folders exist. It
// returns once the first session is established or ctx ends.
func Connect(ctx context.Context, opts Options) (*Session, error) {
	p, err := queue.NewPaths(opts.Root)
	if err != nil {
		return nil, err
	}
	if len(opts.Servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper servers given", queue.ErrInvalid)
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 64 << 20
	}
	if opts.Worker == "" {
		opts.Worker = ProcessName("")
	}
	s := &Session{
		p:              p,
		log:            opts.Logger,
		worker:         opts.Worker,
		onChange:       opts.OnStateChange,
		sessionTimeout: opts.SessionTimeout,
		subs:           map[int]func(bool){},
		closed:         make(chan struct{}),
		loopEnd:        make(chan struct{}),
		established:    make(chan struct{}),
	}
	s.life, s.stop = context.WithCancel(context.Background())
	acl := zk.WorldACL(zk.PermAll)
	if opts.Auth != "" {
		user, _, ok := strings.Cut(opts.Auth, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%w: ZooKeeper auth must be user:password", queue.ErrInvalid)
		}
		acl = append(zk.DigestACL(zk.PermAll, user, opts.Auth[len(user)+1:]), zk.WorldACL(zk.PermRead)...)
	}
	conn, events, err := zkwire.Connect(zkwire.Options{Servers: opts.Servers, SessionTimeout: opts.SessionTimeout,
		MaxResponseBytes: opts.MaxResponseBytes, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("connecting to ZooKeeper %v: %w", opts.Servers, err)
	}
	s.conn = &countingConn{Conn: conn, stats: &requestStats{root: p.Root(), n: map[requestKey]int64{}}}
	// The queue's own tests may stand between the session and the server
	// for its multis (multihook).
	s.nodes = newNodes(s, acl, opts.MaxResponseBytes, opts.Ungrouped, multihook.From(ctx))
	s.locks = newLockBook(s)
	if opts.Auth != "" {
		// Queued before the session exists, sent first on every (re)connect.
		if err := conn.AddAuth("digest", []byte(opts.Auth)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("adding ZooKeeper digest auth: %w", err)
		}
	}
	ready := make(chan struct{})
	go s.watchSession(events, ready)
	go s.locks.tidy()
	select {
	case <-ready:
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("waiting for a ZooKeeper session with %v: %w", opts.Servers, ctx.Err())
	}
	// Folders above the root are shared with whatever else lives in the
	// ensemble: they are created open; the queue's own nodes get its ACL.
	for _, path := range aboveRoot(p.Root()) {
		if err := s.nodes.ensureWith(ctx, path, zk.WorldACL(zk.PermAll)); err != nil {
			s.Close()
			return nil, fmt.Errorf("creating %s: %w", path, err)
		}
	}
	for _, path := range p.Folders() {
		if err := s.nodes.Ensure(ctx, path); err != nil {
			s.Close()
			return nil, fmt.Errorf("creating queue folders: %w", err)
		}
	}
	if err := s.nodes.probeMultiRead(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// aboveRoot lists the root prefix's ancestors, outermost first.
func aboveRoot(root string) []string {
	var out []string
	if root != "" {
		parts := strings.Split(root[1:], "/")
		for i := range parts[:len(parts)-1] {
			out = append(out, "/"+strings.Join(parts[:i+1], "/"))
		}
	}
	return out
}

// Close ends the session; its ephemeral locks disappear at once.
func (s *Session) Close() {
	select {
	case <-s.closed:
		return
	default:
	}
	close(s.closed)
	s.stop()
	s.conn.Close()
	<-s.loopEnd
	s.mu.Lock()
	if s.live != nil {
		s.live.cancel(queue.ErrNoSession)
		s.live = nil
	}
	s.mu.Unlock()
}

// Paths are the queue's paths under this session's root.
func (s *Session) Paths() queue.Paths { return s.p }

// Logger is where the session and the roles over it log.
func (s *Session) Logger() *slog.Logger { return s.log }

// Worker names this session in the history of the jobs it moves.
func (s *Session) Worker() string { return s.worker }

// Life ends when the session is closed: the background watches of the
// roles over it run under it.
func (s *Session) Life() context.Context { return s.life }

// Nodes are the session's requests to the server.
func (s *Session) Nodes() *Nodes { return s.nodes }

// Locks are the lock nodes this session created.
func (s *Session) Locks() *LockBook { return s.locks }

// Changed tells the session's observer (Options.OnStateChange) of a job's
// state change committed in it.
func (s *Session) Changed(sc queue.StateChange) {
	if s.onChange != nil {
		s.onChange(sc)
	}
}

// Requests returns the requests this session has sent since it connected,
// in a stable order: the profile of what the queue costs the server.
func (s *Session) Requests() []RequestCount { return s.conn.stats.snapshot() }

// Connected reports whether the client has a usable session now.
func (s *Session) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live != nil
}

// ID is the current session's id (0 while there is none).
func (s *Session) ID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		return 0
	}
	return s.live.ID
}

// OnSession calls fn(true) whenever a session is established and fn(false)
// whenever it is lost, starting with the current state. The returned func
// unsubscribes.
func (s *Session) OnSession(fn func(connected bool)) (cancel func()) {
	s.mu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = fn
	connected := s.live != nil
	s.mu.Unlock()
	fn(connected)
	return func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

// Established returns a channel closed when a session is next established.
func (s *Session) Established() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.established
}

// Current returns the current session, whose context ends when the
// session is lost (ErrNoSession while there is none).
func (s *Session) Current() (*Live, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		return nil, queue.ErrNoSession
	}
	return s.live, nil
}

// watchSession follows the connection's state. A session counts as lost when
// the server says it expired, or when the client has been disconnected for a
// whole session timeout (the server will have expired it by then, so locks
// taken in it must be presumed gone).
func (s *Session) watchSession(events <-chan zk.Event, ready chan struct{}) {
	defer close(s.loopEnd)
	var suspect *time.Timer
	lost := make(chan int64, 1)
	readyOnce := sync.OnceFunc(func() { close(ready) })
	for {
		select {
		case <-s.closed:
			if suspect != nil {
				suspect.Stop()
			}
			return
		case id := <-lost:
			s.mu.Lock()
			if s.live != nil && s.live.ID == id {
				s.endLocked("disconnected for longer than the session timeout")
			}
			s.mu.Unlock()
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Type != zk.EventSession {
				continue
			}
			switch ev.State {
			case zk.StateHasSession:
				if suspect != nil {
					suspect.Stop()
					suspect = nil
				}
				id := s.conn.SessionID()
				s.mu.Lock()
				if s.live == nil || s.live.ID != id {
					if s.live != nil {
						s.endLocked("replaced by a new session")
					}
					ctx, cancel := context.WithCancelCause(context.Background())
					s.live = &Live{ID: id, ctx: ctx, cancel: cancel}
					s.log.Info("zookeeper session established", "session", fmt.Sprintf("0x%x", id))
					close(s.established)
					s.established = make(chan struct{})
					s.notifyLocked(true)
				}
				s.mu.Unlock()
				// After any reconnect, the locks left behind meanwhile (a
				// release that failed while the connection was down; every
				// claim of a session presumed lost that came back after
				// all) are deleted if they are still this session's.
				s.locks.wake()
				readyOnce()
			case zk.StateExpired:
				s.mu.Lock()
				if s.live != nil {
					s.endLocked("expired")
				}
				s.mu.Unlock()
			case zk.StateDisconnected:
				s.mu.Lock()
				if s.live != nil && suspect == nil {
					id := s.live.ID
					suspect = time.AfterFunc(s.sessionTimeout, func() {
						select {
						case lost <- id:
						default:
						}
					})
				}
				s.mu.Unlock()
			}
		}
	}
}

func (s *Session) endLocked(why string) {
	s.log.Warn("zookeeper session lost", "session", fmt.Sprintf("0x%x", s.live.ID), "reason", why)
	s.live.cancel(fmt.Errorf("%w: session 0x%x %s", queue.ErrNoSession, s.live.ID, why))
	s.live = nil
	s.notifyLocked(false)
}

func (s *Session) notifyLocked(connected bool) {
	for _, fn := range s.subs {
		go fn(connected)
	}
}
