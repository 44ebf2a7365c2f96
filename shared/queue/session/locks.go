package session

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

// OwnLock is a lock node this session created (a job's, a batch's or an
// object's), kept in its LockBook until the session knows it gone.
type OwnLock struct {
	path string
	// holder ends when nothing works under the lock any more: its claim
	// ended, or the session it was taken in was presumed lost.
	holder context.Context
	// abandoned: its holder gave it up without removing it (an unlock that
	// failed).
	abandoned atomic.Bool
}

func (l *OwnLock) leftBehind() bool { return l.abandoned.Load() || l.holder.Err() != nil }

// LockBook keeps the lock nodes this session created until it knows them
// gone. A lock whose holder ended without removing it stays in ZooKeeper
// for as long as its session lives: its claim was lost with a session the
// client presumed dead that then came back (servers without quorum expire
// no session), its release failed while the connection was down, its
// commit was refused because a writer that ignores locks changed the
// job. tidy deletes such a lock if the node is still this session's and
// no live holder of this session works under that path: after every
// (re)connect and whenever a holder leaves one behind.
type LockBook struct {
	s      *Session
	mu     sync.Mutex
	byPath map[string][]*OwnLock
	kick   chan struct{} // holds one signal: tidy has work
}

func newLockBook(s *Session) *LockBook {
	return &LockBook{s: s, byPath: map[string][]*OwnLock{}, kick: make(chan struct{}, 1)}
}

// Book books a lock about to be created, before the request that creates
// it is sent: an answer lost on the way leaves it booked all the same.
// holder ends when nothing works under the lock any more.
func (b *LockBook) Book(path string, holder context.Context) *OwnLock {
	l := &OwnLock{path: path, holder: holder}
	b.mu.Lock()
	b.byPath[path] = append(b.byPath[path], l)
	b.mu.Unlock()
	return l
}

// Forget drops a lock known gone (deleted, never created, or another
// session's). A lock of the same path left behind meanwhile may now be
// deleted: tidy is woken for it.
func (b *LockBook) Forget(l *OwnLock) {
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

func (b *LockBook) booked(l *OwnLock) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.byPath[l.path], l)
}

func (b *LockBook) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// leftBehind lists the locks whose holders ended without removing them.
func (b *LockBook) leftBehind() []*OwnLock {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*OwnLock
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
func (b *LockBook) heldElsewhere(l *OwnLock) bool {
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

// drop deletes l's node if it is still this session's (its
// ephemeralOwner) and no live holder of this session works under the path;
// a node that is gone, or another session's, is forgotten. The delete is
// guarded by the version read with the owner.
func (b *LockBook) drop(ctx context.Context, l *OwnLock) error {
	live, err := b.s.Current()
	if err != nil {
		return err
	}
	r, err := call(ctx, func() (existsWatch, error) {
		ok, s, err := b.s.conn.Exists(l.path)
		return existsWatch{ok: ok, stat: s}, err
	})
	if err != nil {
		return err
	}
	if !r.ok || r.stat.EphemeralOwner != live.ID {
		b.Forget(l)
		return nil
	}
	if b.heldElsewhere(l) {
		return errLockBusy
	}
	_, err = call(ctx, func() (struct{}, error) { return struct{}{}, b.s.conn.Delete(l.path, r.stat.Version) })
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		b.s.log.Info("removed a lock left behind", "lock", l.path)
		b.Forget(l)
		return nil
	}
	return err
}

// LetGo is called when l's holder ends without having removed it: l is
// deleted now if it is still this session's, or left to be tidied (tried
// again once the connection is back).
func (b *LockBook) LetGo(ctx context.Context, l *OwnLock) {
	if l == nil || !b.booked(l) {
		return
	}
	l.abandoned.Store(true)
	if ctx.Err() != nil || b.drop(ctx, l) != nil {
		b.wake()
	}
}

// Leave is LetGo without waiting: l is deleted in the background.
func (b *LockBook) Leave(l *OwnLock) {
	if l == nil || !b.booked(l) {
		return
	}
	l.abandoned.Store(true)
	b.wake()
}

// Owns reports whether path is an ephemeral node of session sess (false
// when it cannot tell).
func (b *LockBook) Owns(ctx context.Context, path string, sess int64) bool {
	ok, stat, err := b.s.nodes.Exists(ctx, path)
	return err == nil && ok && stat.EphemeralOwner == sess
}

// tidy deletes the locks their holders left behind (see LockBook),
// whenever it is woken: after every (re)connect, and by a holder that
// ended without removing its lock. What it cannot look at now (no
// connection) it tries again, with backoff, until the session closes.
func (b *LockBook) tidy() {
	backoff := retrypolicy.Policy{Backoff: 100 * time.Millisecond, Max: 5 * time.Second}
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-b.s.life.Done():
			return
		case <-b.kick:
		case <-retry:
		}
		retry = nil
		if _, err := b.s.Current(); err != nil {
			continue // the next session's wake brings tidy back
		}
		again := false
		for _, l := range b.leftBehind() {
			ctx, cancel := context.WithTimeout(b.s.life, b.s.sessionTimeout)
			err := b.drop(ctx, l)
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
