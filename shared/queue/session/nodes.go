package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
)

// Nodes are a session's requests to the server. Every call takes a
// context: calls that read are retried across connection loss, calls that
// write are not (their caller finds out whether a write whose answer was
// lost was applied; the claims fence theirs).
type Nodes struct {
	s     *Session
	conn  *countingConn
	acl   []zk.ACL
	group *multiGroup
	// reads groups concurrent reads into multiReads; nil when the server
	// does not support them (ZooKeeper before 3.6): nodes are read one by one.
	reads *readGroup
	// ensured are folders this session created or found, which the queue
	// never removes (counters, local-id owners): looked up once.
	ensured sync.Map
}

func newNodes(s *Session, acl []zk.ACL, maxResponse int, ungrouped bool, hook multihook.Hook) *Nodes {
	n := &Nodes{s: s, conn: s.conn, acl: acl}
	send := func(ops []any) ([]zk.MultiResponse, error) { return n.conn.Multi(ops...) }
	if hook != nil {
		own := send
		send = func(ops []any) ([]zk.MultiResponse, error) { return hook(ops, own) }
	}
	n.group = newMultiGroup(send)
	n.reads = newReadGroup(n.conn.MultiRead, maxResponse)
	if ungrouped {
		n.group.maxCalls = 1
		n.reads.maxCalls = 1
	}
	return n
}

// Node is a node read with its stat; a missing node has a nil Stat (and
// nil Data).
type Node struct {
	Data []byte
	Stat *zk.Stat
}

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

// Retryable reports errors after which repeating an idempotent call is
// safe: the connection or session was lost, and with it the answer.
func Retryable(err error) bool {
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
	_, err := zkRetry().Do(ctx, Retryable, func(int) error {
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

// Get reads one node (zk.ErrNoNode when it is missing). With multiRead it
// goes with the reads other callers make meanwhile (readGroup).
func (n *Nodes) Get(ctx context.Context, path string) ([]byte, *zk.Stat, error) {
	if n.reads != nil {
		r, err := retryAware(ctx, func() ([]zkwire.ReadResult, error) { return n.reads.do(ctx, []string{path}) })
		if err != nil {
			return nil, nil, err
		}
		return r[0].Data, r[0].Stat, r[0].Err
	}
	r, err := retry(ctx, func() (Node, error) {
		d, s, err := n.conn.Get(path)
		return Node{d, s}, err
	})
	return r.Data, r.Stat, err
}

// ReadNode reads the node at path and decodes it; a missing node is
// ErrNotFound, named as what ("job jid0000000001").
func ReadNode[T any](ctx context.Context, n *Nodes, path, what string, decode func(path string, data []byte) (T, error)) (T, error) {
	data, _, err := n.Get(ctx, path)
	if errors.Is(err, zk.ErrNoNode) {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, queue.ErrNotFound)
	}
	if err != nil {
		var zero T
		return zero, fmt.Errorf("reading %s: %w", path, err)
	}
	return decode(path, data)
}

// Read reads several nodes at once, with their stats; a missing node
// comes back with a nil stat. They go in one multiRead, together with the
// reads of other callers made meanwhile (readGroup); without multiRead, as
// pipelined reads of one node each (go-zookeeper pipelines requests on one
// connection, so n reads cost about one round trip).
func (n *Nodes) Read(ctx context.Context, paths []string) ([]Node, error) {
	// A multiRead's answer must fit the client's buffer: more nodes than
	// that are read one by one (and grouped as they fit).
	if n.reads == nil || !n.reads.fits(paths) {
		return n.readEach(ctx, paths)
	}
	read, err := retryAware(ctx, func() ([]zkwire.ReadResult, error) { return n.reads.do(ctx, paths) })
	if err != nil {
		return nil, fmt.Errorf("reading %s and %d more nodes: %w", paths[0], len(paths)-1, err)
	}
	out := make([]Node, len(paths))
	for i, r := range read {
		switch {
		case errors.Is(r.Err, zk.ErrNoNode):
		case r.Err != nil:
			return nil, fmt.Errorf("reading %s: %w", paths[i], r.Err)
		default:
			out[i] = Node{r.Data, r.Stat}
		}
	}
	return out, nil
}

// readEach reads several nodes with a request each, all at once.
func (n *Nodes) readEach(ctx context.Context, paths []string) ([]Node, error) {
	out := make([]Node, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, st, err := n.Get(ctx, p)
			if errors.Is(err, zk.ErrNoNode) {
				return
			}
			out[i], errs[i] = Node{d, st}, err
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

// ReadData reads several nodes at once, as Read does, and returns their
// data (nil where a node is missing).
func (n *Nodes) ReadData(ctx context.Context, paths []string) ([][]byte, error) {
	read, err := n.Read(ctx, paths)
	if err != nil {
		return nil, err
	}
	return Datas(read), nil
}

// Datas are the data of read (nil where a node is missing).
func Datas(read []Node) [][]byte {
	out := make([][]byte, len(read))
	for i, r := range read {
		out[i] = r.Data
	}
	return out
}

// EachAtMost calls f(i) for every i in [0, n), at most limit at a time,
// and returns once all calls have: ZooKeeper requests are pipelined so, as
// one at a time is slow and all at once would flood the session.
func EachAtMost(n, limit int, f func(i int)) {
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

type childrenWatch struct {
	names []string
	stat  *zk.Stat
	ev    <-chan zk.Event
}

// Children lists a node's children.
func (n *Nodes) Children(ctx context.Context, path string) ([]string, *zk.Stat, error) {
	r, err := retry(ctx, func() (childrenWatch, error) {
		names, s, err := n.conn.Children(path)
		return childrenWatch{names: names, stat: s}, err
	})
	return r.names, r.stat, err
}

// WatchChildren lists a node's children and arms a watch on them.
func (n *Nodes) WatchChildren(ctx context.Context, path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	r, err := retry(ctx, func() (childrenWatch, error) {
		names, s, ev, err := n.conn.ChildrenW(path)
		return childrenWatch{names, s, ev}, err
	})
	return r.names, r.stat, r.ev, err
}

type existsWatch struct {
	ok   bool
	stat *zk.Stat
	ev   <-chan zk.Event
}

// Exists reads whether a node exists, and its stat.
func (n *Nodes) Exists(ctx context.Context, path string) (bool, *zk.Stat, error) {
	r, err := retry(ctx, func() (existsWatch, error) {
		ok, s, err := n.conn.Exists(path)
		return existsWatch{ok: ok, stat: s}, err
	})
	return r.ok, r.stat, err
}

// WatchExists is Exists, arming a watch on the node.
func (n *Nodes) WatchExists(ctx context.Context, path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	r, err := retry(ctx, func() (existsWatch, error) {
		ok, s, ev, err := n.conn.ExistsW(path)
		return existsWatch{ok, s, ev}, err
	})
	return r.ok, r.stat, r.ev, err
}

// Sync makes the server this session talks to catch up with the leader on
// path: a read after it sees every write committed before.
func (n *Nodes) Sync(ctx context.Context, path string) error {
	_, err := call(ctx, func() (string, error) { return n.conn.Sync(path) })
	return err
}

// Create creates a node with the session's ACL, as a Txn of one
// operation: it goes to the server in one request with the multis of other
// callers (a write request costs the server a proposal and a log append
// however many operations it holds). It returns the node's path (a
// sequential node's, numbered); refused, a *Refused named by path.
func (n *Nodes) Create(ctx context.Context, path string, data []byte, flags int32) (string, error) {
	t := n.Txn().Then(Create(path, path, data, flags))
	if err := t.Commit(ctx); err != nil {
		return "", err
	}
	return t.Created(path)[0], nil
}

// Set writes a node's data at version (-1: any); not retried.
func (n *Nodes) Set(ctx context.Context, path string, data []byte, version int32) (*zk.Stat, error) {
	st, err := call(ctx, func() (*zk.Stat, error) { return n.conn.Set(path, data, version) })
	return st, denied(err)
}

// Delete deletes a node at version (-1: any), retried across connection
// loss: a delete whose answer was lost answers zk.ErrNoNode when tried
// again.
func (n *Nodes) Delete(ctx context.Context, path string, version int32) error {
	_, err := retry(ctx, func() (struct{}, error) { return struct{}{}, n.conn.Delete(path, version) })
	return denied(err)
}

// Ensure creates path if it is missing (idempotent, so retried). It looks
// first: creating an existing node still needs the right to create, which a
// read-only client does not have.
func (n *Nodes) Ensure(ctx context.Context, path string) error {
	return n.ensureWith(ctx, path, n.acl)
}

// EnsureOnce is Ensure for a folder the queue never removes: after the
// first time it costs nothing. A caller that finds it gone after all calls
// Ensure again.
func (n *Nodes) EnsureOnce(ctx context.Context, path string) error {
	if _, ok := n.ensured.Load(path); ok {
		return nil
	}
	if err := n.Ensure(ctx, path); err != nil {
		return err
	}
	n.ensured.Store(path, true)
	return nil
}

func (n *Nodes) ensureWith(ctx context.Context, path string, acl []zk.ACL) error {
	_, err := retry(ctx, func() (string, error) {
		if ok, _, err := n.conn.Exists(path); err != nil || ok {
			return path, err
		}
		s, err := n.conn.Create(path, nil, 0, acl)
		if errors.Is(err, zk.ErrNodeExists) {
			return path, nil
		}
		return s, err
	})
	return denied(err)
}

// probeMultiRead finds out whether the server answers multiRead: a server
// before ZooKeeper 3.6 does not, and the session then reads node by node.
func (n *Nodes) probeMultiRead(ctx context.Context) error {
	_, err := retry(ctx, func() ([]zkwire.ReadResult, error) { return n.conn.MultiRead([]string{n.s.p.Jobs()}) })
	switch {
	case err == nil:
		return nil
	case Retryable(err) || ctx.Err() != nil:
		return fmt.Errorf("reading the queue folders: %w", err)
	}
	n.s.log.Warn("ZooKeeper does not answer multiRead (it needs 3.6 or later): reading nodes one by one", "error", err)
	n.reads = nil
	return nil
}
