package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/internal/core"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
)

// Options configure a Client.
type Options struct {
	// Servers are ZooKeeper "host:port" addresses.
	Servers []string
	// Root is the prefix every path hangs under ("" or "/some/prefix").
	Root string
	// SessionTimeout asks the server for this session timeout (default 10s).
	SessionTimeout time.Duration
	// Logger receives the client's own logs (default slog.Default()).
	Logger *slog.Logger
	// MaxResponseBytes bounds one response from the server (the client's
	// buffer grows to the largest it has received). Listing a state folder
	// of 100,000 jobs needs ~2 MB; a grouped multiRead may answer up to
	// MaxResponseBytes/1 MiB nodes of up to 1 MiB each. The default is 64 MiB.
	MaxResponseBytes int
	// Auth, when set, is added to the session as a "digest" credential
	// ("user:password") and every node this client creates gets an ACL that
	// lets that identity change it and everyone else only read it.
	Auth string
	// Ungrouped sends every multi as a request of its own instead of
	// grouping concurrent ones (see multiGroup); benchmarks compare both.
	Ungrouped bool
	// Worker names this client in the history of the jobs it moves
	// (default ProcessName(""): <host>-<pid>); a Change's By overrides it.
	Worker string
	// OnStateChange, if set, is called after each state change this client
	// committed (metrics count them). It must not block.
	OnStateChange func(StateChange)
}

// StateChange is a job's state change this client committed.
type StateChange struct {
	JobID string
	// Change is the history entry written.
	Change *v1.JobStateChange
	// Created is when the job was created, zero when its history no longer
	// says (or never did: a peer created it).
	Created time.Time
}

// Client is one ZooKeeper session's view of the queue. It is safe for
// concurrent use. Every method takes a context; calls that read are retried
// across connection loss, calls that write are fenced so that a lost session
// can never commit.
type Client struct {
	// backend is what Backend lends the operators' tools, built once.
	backendOnce sync.Once
	backend     *core.Backend

	conn           *countingConn
	p              paths
	log            *slog.Logger
	acl            []zk.ACL
	sessionTimeout time.Duration
	worker         string
	onChange       func(StateChange)

	mu      sync.Mutex
	sess    *session // nil while there is no usable session
	subs    map[int]func(bool)
	nextSub int
	closed  chan struct{}
	loopEnd chan struct{}

	// established is closed, and replaced, whenever a session is
	// established (a new one, or one presumed lost that came back).
	established chan struct{}
	// life ends when the client is closed; background watches run under it.
	life context.Context
	stop context.CancelFunc

	pause pauseState
	holds holdState
	group *multiGroup
	// reads groups concurrent reads into multiReads; nil when the server
	// does not support them (ZooKeeper before 3.6): nodes are read one by one.
	reads *readGroup
	// ensured are folders this client created or found, which the queue
	// never removes (counters, local-id owners): looked up once.
	ensured sync.Map
	// counters are the blocks of counter numbers this client reserved
	// (counter path → *counterBlock).
	counters sync.Map
	// locks are the lock nodes this client created and has not seen gone.
	locks *lockBook
	// workerNonce and workerSeq make this client's worker ids (NewWorkerID).
	workerNonce uint32
	workerSeq   atomic.Int64
}

// session is one ZooKeeper session. Its context ends when the session is lost:
// every lock taken in it is gone, so work done under it must stop.
type session struct {
	id     int64
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Connect opens a session and makes sure the queue's folders exist. It
// returns once the first session is established or ctx ends.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	p, err := newPaths(opts.Root)
	if err != nil {
		return nil, err
	}
	if len(opts.Servers) == 0 {
		return nil, fmt.Errorf("%w: no ZooKeeper servers given", ErrInvalid)
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
	c := &Client{
		p:              p,
		log:            opts.Logger,
		worker:         opts.Worker,
		onChange:       opts.OnStateChange,
		acl:            zk.WorldACL(zk.PermAll),
		sessionTimeout: opts.SessionTimeout,
		subs:           map[int]func(bool){},
		closed:         make(chan struct{}),
		loopEnd:        make(chan struct{}),
		established:    make(chan struct{}),
		locks:          newLockBook(),
	}
	c.life, c.stop = context.WithCancel(context.Background())
	c.workerNonce = rand.Uint32()
	if opts.Auth != "" {
		user, _, ok := strings.Cut(opts.Auth, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%w: ZooKeeper auth must be user:password", ErrInvalid)
		}
		c.acl = append(zk.DigestACL(zk.PermAll, user, opts.Auth[len(user)+1:]), zk.WorldACL(zk.PermRead)...)
	}
	w := newWire(opts.MaxResponseBytes)
	conn, events, err := zk.Connect(opts.Servers, opts.SessionTimeout,
		zk.WithLogger(zkLogger{opts.Logger}),
		zk.WithMaxBufferSize(opts.MaxResponseBytes),
		zk.WithDialer(w.dial),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to ZooKeeper %v: %w", opts.Servers, err)
	}
	c.conn = &countingConn{Conn: conn, wire: w, stats: &requestStats{root: p.root, n: map[requestKey]int64{}}}
	c.group = newMultiGroup(func(ops []any) ([]zk.MultiResponse, error) { return c.conn.Multi(ops...) })
	c.reads = newReadGroup(c.conn.MultiRead, opts.MaxResponseBytes)
	if opts.Ungrouped {
		c.group.maxCalls = 1
		c.reads.maxCalls = 1
	}
	if opts.Auth != "" {
		// Queued before the session exists, sent first on every (re)connect.
		if err := conn.AddAuth("digest", []byte(opts.Auth)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("adding ZooKeeper digest auth: %w", err)
		}
	}
	ready := make(chan struct{})
	go c.watchSession(events, ready)
	go c.tidyLocks()
	select {
	case <-ready:
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("waiting for a ZooKeeper session with %v: %w", opts.Servers, ctx.Err())
	}
	// Folders above the root are shared with whatever else lives in the
	// ensemble: they are created open; the queue's own nodes get its ACL.
	for _, path := range p.aboveRoot() {
		if err := c.ensureWith(ctx, path, zk.WorldACL(zk.PermAll)); err != nil {
			c.Close()
			return nil, fmt.Errorf("creating %s: %w", path, err)
		}
	}
	for _, path := range p.skeleton() {
		if err := c.ensure(ctx, path); err != nil {
			c.Close()
			return nil, fmt.Errorf("creating queue folders: %w", err)
		}
	}
	if err := c.probeMultiRead(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// aboveRoot lists the root prefix's ancestors, outermost first.
func (p paths) aboveRoot() []string {
	var out []string
	if p.root != "" {
		parts := strings.Split(p.root[1:], "/")
		for i := range parts[:len(parts)-1] {
			out = append(out, "/"+strings.Join(parts[:i+1], "/"))
		}
	}
	return out
}

// Close ends the session; its ephemeral locks disappear at once.
func (c *Client) Close() {
	select {
	case <-c.closed:
		return
	default:
	}
	close(c.closed)
	c.stop()
	c.conn.Close()
	<-c.loopEnd
	c.mu.Lock()
	if c.sess != nil {
		c.sess.cancel(ErrNoSession)
		c.sess = nil
	}
	c.mu.Unlock()
}

// Root is the prefix every path of this client hangs under.
func (c *Client) Root() string { return c.p.root }

// Connected reports whether the client has a usable session now.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess != nil
}

// SessionID is the current session's id (0 while there is none).
func (c *Client) SessionID() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return 0
	}
	return c.sess.id
}

// OnSession calls fn(true) whenever a session is established and fn(false)
// whenever it is lost, starting with the current state. The returned func
// unsubscribes.
func (c *Client) OnSession(fn func(connected bool)) (cancel func()) {
	c.mu.Lock()
	id := c.nextSub
	c.nextSub++
	c.subs[id] = fn
	connected := c.sess != nil
	c.mu.Unlock()
	fn(connected)
	return func() {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}
}

// sessionEstablished returns a channel closed when a session is next
// established.
func (c *Client) sessionEstablished() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.established
}

// currentSession returns the current session, whose context ends when the
// session is lost.
func (c *Client) currentSession() (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil {
		return nil, ErrNoSession
	}
	return c.sess, nil
}

// watchSession follows the connection's state. A session counts as lost when
// the server says it expired, or when the client has been disconnected for a
// whole session timeout (the server will have expired it by then, so locks
// taken in it must be presumed gone).
func (c *Client) watchSession(events <-chan zk.Event, ready chan struct{}) {
	defer close(c.loopEnd)
	var suspect *time.Timer
	lost := make(chan int64, 1)
	readyOnce := sync.OnceFunc(func() { close(ready) })
	for {
		select {
		case <-c.closed:
			if suspect != nil {
				suspect.Stop()
			}
			return
		case id := <-lost:
			c.mu.Lock()
			if c.sess != nil && c.sess.id == id {
				c.endSessionLocked("disconnected for longer than the session timeout")
			}
			c.mu.Unlock()
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
				id := c.conn.SessionID()
				c.mu.Lock()
				if c.sess == nil || c.sess.id != id {
					if c.sess != nil {
						c.endSessionLocked("replaced by a new session")
					}
					ctx, cancel := context.WithCancelCause(context.Background())
					c.sess = &session{id: id, ctx: ctx, cancel: cancel}
					c.log.Info("zookeeper session established", "session", fmt.Sprintf("0x%x", id))
					close(c.established)
					c.established = make(chan struct{})
					c.notifyLocked(true)
				}
				c.mu.Unlock()
				if !c.conn.wire.ready() {
					// Our requests wait for go-zookeeper's first on the
					// connection (see wire.go): an idle session sends one.
					go c.conn.Exists(c.p.jobs())
				}
				// After any reconnect, the locks left behind meanwhile (a
				// release that failed while the connection was down; every
				// claim of a session presumed lost that came back after
				// all) are deleted if they are still this session's.
				c.locks.wake()
				readyOnce()
			case zk.StateExpired:
				c.conn.wire.expired()
				c.mu.Lock()
				if c.sess != nil {
					c.endSessionLocked("expired")
				}
				c.mu.Unlock()
			case zk.StateDisconnected:
				c.mu.Lock()
				if c.sess != nil && suspect == nil {
					id := c.sess.id
					suspect = time.AfterFunc(c.sessionTimeout, func() {
						select {
						case lost <- id:
						default:
						}
					})
				}
				c.mu.Unlock()
			}
		}
	}
}

func (c *Client) endSessionLocked(why string) {
	c.log.Warn("zookeeper session lost", "session", fmt.Sprintf("0x%x", c.sess.id), "reason", why)
	c.sess.cancel(fmt.Errorf("%w: session 0x%x %s", ErrNoSession, c.sess.id, why))
	c.sess = nil
	c.notifyLocked(false)
}

func (c *Client) notifyLocked(connected bool) {
	for _, fn := range c.subs {
		go fn(connected)
	}
}

// --- context-aware calls ---

// call runs a blocking go-zookeeper call so that the caller can stop waiting
// when ctx ends (go-zookeeper has no contexts; the request itself finishes or
// fails on its own).
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// retryable reports errors after which repeating an idempotent call is safe.
func retryable(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// retry repeats an idempotent go-zookeeper call across connection loss,
// with backoff, until it succeeds, fails for another reason, or ctx ends.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return retryAware(ctx, func() (T, error) { return call(ctx, f) })
}

// retryAware is retry for a call that stops waiting when ctx ends by
// itself (a request group's), so needs no goroutine of call's.
func retryAware[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var v T
	_, err := zkRetry().Do(ctx, retryable, func(int) error {
		var err error
		v, err = f()
		return err
	})
	return v, err
}

// zkRetry is how often and how patiently a call is repeated across
// connection loss: quickly at first, as a reconnect is often fast.
func zkRetry() retrypolicy.Policy {
	return retrypolicy.Policy{Attempts: 51, Backoff: 20 * time.Millisecond, Max: time.Second}
}

type dataStat struct {
	data []byte
	stat *zk.Stat
}

// get reads one node. With multiRead it goes with the reads other callers
// make meanwhile (readGroup).
func (c *Client) get(ctx context.Context, path string) ([]byte, *zk.Stat, error) {
	if c.reads != nil {
		r, err := retryAware(ctx, func() ([]readResult, error) { return c.reads.do(ctx, []string{path}) })
		if err != nil {
			return nil, nil, err
		}
		return r[0].data, r[0].stat, r[0].err
	}
	r, err := retry(ctx, func() (dataStat, error) {
		d, s, err := c.conn.Get(path)
		return dataStat{d, s}, err
	})
	return r.data, r.stat, err
}

// getNode reads the node at path and decodes it; a missing node is
// ErrNotFound, named as what ("job jid0000000001").
func getNode[T any](ctx context.Context, c *Client, path, what string, decode func(path string, data []byte) (T, error)) (T, error) {
	data, _, err := c.get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("reading %s: %w", path, err)
	}
	return decode(path, data)
}

// eachAtMost calls f(i) for every i in [0, n), at most limit at a time,
// and returns once all calls have: ZooKeeper requests are pipelined so, as
// one at a time is slow and all at once would flood the session.
func eachAtMost(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

type childrenStat struct {
	names []string
	stat  *zk.Stat
}

func (c *Client) children(ctx context.Context, path string) ([]string, *zk.Stat, error) {
	r, err := retry(ctx, func() (childrenStat, error) {
		n, s, err := c.conn.Children(path)
		return childrenStat{n, s}, err
	})
	return r.names, r.stat, err
}

type childrenWatch struct {
	names []string
	stat  *zk.Stat
	ev    <-chan zk.Event
}

func (c *Client) childrenW(ctx context.Context, path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	r, err := retry(ctx, func() (childrenWatch, error) {
		n, s, ev, err := c.conn.ChildrenW(path)
		return childrenWatch{n, s, ev}, err
	})
	return r.names, r.stat, r.ev, err
}

type existsWatch struct {
	ok   bool
	stat *zk.Stat
	ev   <-chan zk.Event
}

func (c *Client) exists(ctx context.Context, path string) (bool, *zk.Stat, error) {
	r, err := retry(ctx, func() (existsWatch, error) {
		ok, s, err := c.conn.Exists(path)
		return existsWatch{ok: ok, stat: s}, err
	})
	return r.ok, r.stat, err
}

func (c *Client) existsW(ctx context.Context, path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	r, err := retry(ctx, func() (existsWatch, error) {
		ok, s, ev, err := c.conn.ExistsW(path)
		return existsWatch{ok, s, ev}, err
	})
	return r.ok, r.stat, r.ev, err
}

// multi runs ops atomically. It is not retried: after a connection loss the
// caller must find out whether it was applied (see Claim.commit).
func (c *Client) multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	res, err := c.group.do(ctx, ops)
	if err != nil {
		return res, multiError(res, err)
	}
	return res, nil
}

// multiError names the operation of a multi that failed, which go-zookeeper
// reports only per operation.
func multiError(res []zk.MultiResponse, err error) error {
	for i, r := range res {
		// Operations that did not fail themselves report "runtime inconsistency" (-2).
		if r.Error != nil && !inconsistent(r.Error) {
			return &opError{index: i, err: r.Error}
		}
	}
	return err
}

// opError is the failing operation of a multi.
type opError struct {
	index int
	err   error
}

func (e *opError) Error() string { return fmt.Sprintf("operation %d: %v", e.index, e.err) }
func (e *opError) Unwrap() error { return e.err }

func failedOp(err error) int {
	var oe *opError
	if errors.As(err, &oe) {
		return oe.index
	}
	return -1
}

func (c *Client) create(ctx context.Context, path string, data []byte, flags int32) (string, error) {
	return call(ctx, func() (string, error) { return c.conn.Create(path, data, flags, c.acl) })
}

// createGrouped is create sent as a multi of one operation, so that it
// goes to the server in one request with the multis of other callers
// (multiGroup): a write request costs the server a proposal and a log
// append however many operations it holds.
func (c *Client) createGrouped(ctx context.Context, path string, data []byte, flags int32) (string, error) {
	res, err := c.multi(ctx, c.createOp(path, data, flags))
	if err != nil {
		return "", err
	}
	return res[0].String, nil
}

// ensure creates path if it is missing (idempotent, so retried). It looks
// first: creating an existing node still needs the right to create, which a
// read-only client does not have.
func (c *Client) ensure(ctx context.Context, path string) error {
	return c.ensureWith(ctx, path, c.acl)
}

// ensureOnce is ensure for a folder the queue never removes: after the
// first time it costs nothing. A caller that finds it gone after all calls
// ensure again.
func (c *Client) ensureOnce(ctx context.Context, path string) error {
	if _, ok := c.ensured.Load(path); ok {
		return nil
	}
	if err := c.ensure(ctx, path); err != nil {
		return err
	}
	c.ensured.Store(path, true)
	return nil
}

func (c *Client) ensureWith(ctx context.Context, path string, acl []zk.ACL) error {
	_, err := retry(ctx, func() (string, error) {
		if ok, _, err := c.conn.Exists(path); err != nil || ok {
			return path, err
		}
		s, err := c.conn.Create(path, nil, 0, acl)
		if errors.Is(err, zk.ErrNodeExists) {
			return path, nil
		}
		return s, err
	})
	return err
}

func (c *Client) createOp(path string, data []byte, flags int32) *zk.CreateRequest {
	return &zk.CreateRequest{Path: path, Data: data, Acl: c.acl, Flags: flags}
}

func setOp(path string, data []byte, version int32) *zk.SetDataRequest {
	return &zk.SetDataRequest{Path: path, Data: data, Version: version}
}

func deleteOp(path string, version int32) *zk.DeleteRequest {
	return &zk.DeleteRequest{Path: path, Version: version}
}

func checkOp(path string, version int32) *zk.CheckVersionRequest {
	return &zk.CheckVersionRequest{Path: path, Version: version}
}

// probeMultiRead finds out whether the server answers multiRead: a server
// before ZooKeeper 3.6 does not, and the client then reads node by node.
func (c *Client) probeMultiRead(ctx context.Context) error {
	_, err := retry(ctx, func() ([]readResult, error) { return c.conn.MultiRead([]string{c.p.root + "/jobs"}) })
	switch {
	case err == nil:
		return nil
	case retryable(err) || ctx.Err() != nil:
		return fmt.Errorf("reading the queue folders: %w", err)
	}
	c.log.Warn("ZooKeeper does not answer multiRead (it needs 3.6 or later): reading nodes one by one", "error", err)
	c.reads = nil
	return nil
}

// getManyStat reads several nodes at once, with their stats. A missing node
// comes back with a nil stat. They go in one multiRead, together with the
// reads of other callers made meanwhile (readGroup); without multiRead,
// as pipelined reads of one node each (go-zookeeper pipelines requests on
// one connection, so n reads cost about one round trip).
func (c *Client) getManyStat(ctx context.Context, paths []string) ([]dataStat, error) {
	// A multiRead's answer must fit the client's buffer: more nodes than
	// that are read one by one (and grouped as they fit).
	if c.reads == nil || !c.reads.fits(paths) {
		return c.getEach(ctx, paths)
	}
	read, err := retryAware(ctx, func() ([]readResult, error) { return c.reads.do(ctx, paths) })
	if err != nil {
		return nil, fmt.Errorf("reading %s and %d more nodes: %w", paths[0], len(paths)-1, err)
	}
	out := make([]dataStat, len(paths))
	for i, r := range read {
		switch {
		case errors.Is(r.err, zk.ErrNoNode):
		case r.err != nil:
			return nil, fmt.Errorf("reading %s: %w", paths[i], r.err)
		default:
			out[i] = dataStat{r.data, r.stat}
		}
	}
	return out, nil
}

// getEach reads several nodes with a request each, all at once.
func (c *Client) getEach(ctx context.Context, paths []string) ([]dataStat, error) {
	out := make([]dataStat, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, st, err := c.get(ctx, p)
			if errors.Is(err, zk.ErrNoNode) {
				return
			}
			out[i], errs[i] = dataStat{d, st}, err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", paths[i], err)
		}
	}
	return out, nil
}

// getMany reads several nodes at once (see getManyStat). Missing nodes
// come back nil.
func (c *Client) getMany(ctx context.Context, paths []string) ([][]byte, error) {
	read, err := c.getManyStat(ctx, paths)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(read))
	for i, r := range read {
		out[i] = r.data
	}
	return out, nil
}

// sortedEntries parses and sorts a state folder's children; names that are
// not "PP-jid…" are skipped.
func sortedEntries(names []string) []entry {
	out := make([]entry, 0, len(names))
	for _, n := range names {
		if pr, jid, ok := parseEntry(n); ok {
			out = append(out, entry{name: n, priority: pr, jid: jid})
		}
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// zkLogger routes go-zookeeper's printf logs into slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug(fmt.Sprintf(format, args...), "component", "zookeeper-client")
}
