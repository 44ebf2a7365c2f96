package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// holdState caches the set of held collections, kept current by a child watch.
type holdState struct {
	once  sync.Once
	mu    sync.RWMutex
	held  map[string]bool
	ready chan struct{}
}

// CollectionHeld reports whether a collection is on hold. After the first
// call it answers from a cache that a watch keeps current, so a consumer can
// ask for every job it takes.
func (c *Client) CollectionHeld(ctx context.Context, mnemonic string) (bool, error) {
	hs := &c.holds
	hs.once.Do(func() {
		hs.ready = make(chan struct{})
		go c.followHolds()
	})
	select {
	case <-hs.ready:
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	return hs.held[mnemonic], nil
}

func (c *Client) followHolds() {
	hs := &c.holds
	first := true
	for {
		names, _, ev, err := c.z.WatchChildren(c.s.Life(), c.p.Locks().Collections())
		if err != nil {
			if !c.pauseBeforeRewatch() {
				return
			}
			continue
		}
		held := make(map[string]bool, len(names))
		for _, n := range names {
			held[n] = true
		}
		hs.mu.Lock()
		hs.held = held
		hs.mu.Unlock()
		if first {
			close(hs.ready)
			first = false
		}
		select {
		case <-c.s.Life().Done():
			return
		case <-ev:
		}
	}
}

// ObjectLock is a lock on one object (an ARK) held by this session.
type ObjectLock struct {
	c        *Client
	path     string
	sess     int64            // the session that holds it
	released atomic.Bool      // by a commit (Change.Unlock)
	own      *session.OwnLock // in the session's lock book
}

// LockStorage takes /locks/storage/<ark> while the object is being stored.
// The node is ephemeral, so a processor that dies frees it.
func (c *Client) LockStorage(ctx context.Context, ark string) (*ObjectLock, error) {
	if ark == "" {
		return nil, fmt.Errorf("%w: empty ARK", queue.ErrInvalid)
	}
	return c.lockObject(ctx, c.p.Locks().StorageLock(ark), "object "+ark)
}

// LockInventory takes /locks/inventory/<ark> while the object is recorded.
func (c *Client) LockInventory(ctx context.Context, ark string) (*ObjectLock, error) {
	if ark == "" {
		return nil, fmt.Errorf("%w: empty ARK", queue.ErrInvalid)
	}
	return c.lockObject(ctx, c.p.Locks().InventoryLock(ark), "object "+ark)
}

// LockLocalID takes /locks/localid/<local id>_<owner> while the ARK of an
// owner's local id is looked up or minted (ingestq's processor holds it on
// until the job leaves Processing: Change.Unlock): Merritt's ingest service takes
// the same node (the peer library's lockObjectLocalID, named after the
// local id and the owner's ARK), so that neither mints a second ARK for a
// local id the other is minting one for. The node is ephemeral and empty.
// ErrLocked: another process holds it.
func (c *Client) LockLocalID(ctx context.Context, localID, owner string) (*ObjectLock, error) {
	if err := queue.ValidName("local id", localID); err != nil {
		return nil, err
	}
	if err := queue.ValidName("owner", owner); err != nil {
		return nil, err
	}
	if err := c.z.EnsureOnce(ctx, c.p.Locks().LocalIDs()); err != nil {
		return nil, err
	}
	return c.lockObject(ctx, c.p.Locks().LocalIDLock(localID+"_"+owner), "local id "+localID+" of "+owner)
}

// lockObject creates the ephemeral lock node p; what names the locked
// thing in errors.
func (c *Client) lockObject(ctx context.Context, p, what string) (*ObjectLock, error) {
	live, err := c.s.Current()
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", what, err)
	}
	// Held while its session lives: a session presumed lost takes it
	// along, and if that session comes back the lock goes (LockBook).
	book := c.s.Locks()
	own := book.Book(p, live.Context())
	_, err = c.z.Create(ctx, p, nil, zk.FlagEphemeral)
	if errors.Is(err, zk.ErrNodeExists) {
		book.Forget(own)
		return nil, fmt.Errorf("%s: %w", what, queue.ErrLocked)
	}
	if err != nil {
		book.Leave(own) // perhaps created, its answer lost
		return nil, fmt.Errorf("locking %s: %w", what, err)
	}
	return &ObjectLock{c: c, path: p, sess: live.ID, own: own}, nil
}

// Unlock releases the object lock if this session still holds it. A lock
// that went with its session (the process was frozen or cut off for longer
// than the session timeout) may be another process's by now: removing that
// one would let a third process at the object beside it. An unlock that
// fails (the connection stayed down) is left to the client, which removes
// the lock once it can if it is still this session's.
func (l *ObjectLock) Unlock(ctx context.Context) error {
	if l.released.Load() {
		return nil
	}
	if err := l.unlock(ctx); err != nil {
		l.c.s.Locks().Leave(l.own)
		return err
	}
	l.c.s.Locks().Forget(l.own)
	return nil
}

// gone records the lock released by a commit: deleted with it, or found
// gone already.
func (l *ObjectLock) gone() {
	l.released.Store(true)
	l.c.s.Locks().Forget(l.own)
}

// unlock deletes the lock node if it is still this session's, at the
// version read with its owner: a node gone, or made again since (another
// session's), is not this lock any more.
func (l *ObjectLock) unlock(ctx context.Context) error {
	ok, stat, err := l.c.z.Exists(ctx, l.path)
	if err != nil || !ok || stat.EphemeralOwner != l.sess {
		return err
	}
	err = l.c.z.Delete(ctx, l.path, stat.Version)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrBadVersion) {
		err = nil
	}
	return err
}
