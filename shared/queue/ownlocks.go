package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
)

// ownLock is a lock node this client created (a job's, a batch's or an
// object's), kept in the client's lockBook until the client knows it gone.
type ownLock struct {
	path string
	// holder ends when nothing works under the lock any more: its claim
	// ended, or the session it was taken in was presumed lost.
	holder context.Context
	// abandoned: its holder gave it up without removing it (an unlock that
	// failed).
	abandoned atomic.Bool
}

func (l *ownLock) leftBehind() bool { return l.abandoned.Load() || l.holder.Err() != nil }

// lockBook keeps the lock nodes this client created until it knows them
// gone. A lock whose holder ended without removing it stays in ZooKeeper
// for as long as its session lives: its claim was lost with a session the
// client presumed dead that then came back (servers without quorum expire
// no session), its release failed while the connection was down, its
// commit was refused because a writer that ignores locks changed the
// job. tidyLocks deletes such a lock if the node is still this session's
// and no live holder of this client works under that path: after every
// (re)connect and whenever a holder leaves one behind.
type lockBook struct {
	mu     sync.Mutex
	byPath map[string][]*ownLock
	kick   chan struct{} // holds one signal: tidyLocks has work
}

func newLockBook() *lockBook {
	return &lockBook{byPath: map[string][]*ownLock{}, kick: make(chan struct{}, 1)}
}

// add books a lock about to be created, before the request that creates
// it is sent: an answer lost on the way leaves it booked all the same.
func (b *lockBook) add(path string, holder context.Context) *ownLock {
	l := &ownLock{path: path, holder: holder}
	b.mu.Lock()
	b.byPath[path] = append(b.byPath[path], l)
	b.mu.Unlock()
	return l
}

// forget drops a lock known gone (deleted, never created, or another
// session's). A lock of the same path left behind meanwhile may now be
// deleted: tidyLocks is woken for it.
func (b *lockBook) forget(l *ownLock) {
	if l == nil {
		return
	}
	b.mu.Lock()
	ls := b.byPath[l.path]
	if i := slices.Index(ls, l); i >= 0 {
		ls = slices.Delete(ls, i, i+1)
	}
	if len(ls) == 0 {
		delete(b.byPath, l.path)
	} else {
		b.byPath[l.path] = ls
	}
	b.mu.Unlock()
	if len(ls) > 0 {
		b.wake()
	}
}

func (b *lockBook) booked(l *ownLock) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.byPath[l.path], l)
}

func (b *lockBook) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// leftBehind lists the locks whose holders ended without removing them.
func (b *lockBook) leftBehind() []*ownLock {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*ownLock
	for _, ls := range b.byPath {
		for _, l := range ls {
			if l.leftBehind() {
				out = append(out, l)
			}
		}
	}
	return out
}

// heldElsewhere reports whether a live holder other than l works under
// l's path: the node there is then its, or its claim is about to fail on
// l's node and l may go once it has.
func (b *lockBook) heldElsewhere(l *ownLock) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, o := range b.byPath[l.path] {
		if o != l && !o.leftBehind() {
			return true
		}
	}
	return false
}

// errLockBusy: a live holder of this client works under the path; the
// lock left behind there is looked at again when that one ends.
var errLockBusy = errors.New("a live holder works under the path")

// dropLock deletes l's node if it is still this session's (its
// ephemeralOwner) and no live holder of this client works under the path;
// a node that is gone, or another session's, is forgotten. The delete is
// guarded by the version read with the owner.
func (c *Client) dropLock(ctx context.Context, l *ownLock) error {
	sess, err := c.currentSession()
	if err != nil {
		return err
	}
	r, err := call(ctx, func() (existsWatch, error) {
		ok, s, err := c.conn.Exists(l.path)
		return existsWatch{ok: ok, stat: s}, err
	})
	if err != nil {
		return err
	}
	if !r.ok || r.stat.EphemeralOwner != sess.id {
		c.locks.forget(l)
		return nil
	}
	if c.locks.heldElsewhere(l) {
		return errLockBusy
	}
	_, err = call(ctx, func() (struct{}, error) { return struct{}{}, c.conn.Delete(l.path, r.stat.Version) })
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		c.log.Info("removed a lock left behind", "lock", l.path)
		c.locks.forget(l)
		return nil
	}
	return err
}

// letGo is called when l's holder ends without having removed it: l is
// deleted now if it is still this session's, or left to tidyLocks (which
// tries again once the connection is back).
func (c *Client) letGo(ctx context.Context, l *ownLock) {
	if l == nil || !c.locks.booked(l) {
		return
	}
	l.abandoned.Store(true)
	if ctx.Err() != nil || c.dropLock(ctx, l) != nil {
		c.locks.wake()
	}
}

// leave is letGo without waiting: tidyLocks deletes l.
func (c *Client) leave(l *ownLock) {
	if l == nil || !c.locks.booked(l) {
		return
	}
	l.abandoned.Store(true)
	c.locks.wake()
}

// tidyLocks deletes the locks their holders left behind (see lockBook),
// whenever it is woken: after every (re)connect, and by a holder that
// ended without removing its lock. What it cannot look at now (no
// connection) it tries again, with backoff, until the client closes.
func (c *Client) tidyLocks() {
	backoff := retrypolicy.Policy{Backoff: 100 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-c.life.Done():
			return
		case <-c.locks.kick:
		case <-retry:
		}
		retry = nil
		if _, err := c.currentSession(); err != nil {
			continue // the next session's wake brings tidyLocks back
		}
		again := false
		for _, l := range c.locks.leftBehind() {
			ctx, cancel := context.WithTimeout(c.life, c.sessionTimeout)
			err := c.dropLock(ctx, l)
			cancel()
			if err != nil && !errors.Is(err, errLockBusy) {
				again = true
			}
		}
		if again {
			failures++
			retry = time.After(backoff.Wait(failures))
		} else {
			failures = 0
		}
	}
}
