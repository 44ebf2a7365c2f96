package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
)

// Hold is the locking core of a claim, a job's or a batch's: the item's
// lock node, taken in this session, and the version of the item's status
// node the claim owns. Taking the lock rewrites the status unchanged, so
// its version becomes the claim's fencing token: every change made under
// the hold checks it (and the lock) in the same multi, and a claim that
// lost its lock or session can never commit.
type Hold struct {
	b                    *LockBook
	what                 string // names the item in errors ("job jid…")
	statusPath, lockPath string
	live                 *Live
	lock                 *OwnLock // nil: the lock node is not this session's (Fence)
	ctx                  context.Context
	cancel               context.CancelCauseFunc

	mu      sync.Mutex
	version int32
	done    bool
	// settled: the hold ended with its item committed or given back, not
	// lost (whoever handed it out need not look for the item again).
	settled bool
	// lost is why the hold lost its item (a change refused by its fence,
	// its lock node removed): what a change tried after it is told.
	lost error
}

// errFinished ends a hold's context when it ends.
var errFinished = errors.New("claim finished")

// Take takes an item in the current session: in one Txn, its lock node
// (ephemeral, LockStep) is created and its status rewritten as read
// (StatusStep: status, at version), under guards (the data nodes read
// must be as read). what names the item in errors. The error is the Txn's
// *Refused (by LockStep: another holds the item; by StatusStep: it moved
// on; by a guard: as the guard says), or ErrNoSession.
//
// The lock is booked before the request goes: an answer lost on the way
// is looked into (the lock node this session's is a claim taken), and a
// lock that may have been created is deleted later, not left to hold the
// item while nobody works on it.
func (b *LockBook) Take(ctx context.Context, what, lockPath, statusPath string, status []byte, version int32, guards ...Guard) (*Hold, error) {
	live, err := b.s.Current()
	if err != nil {
		return nil, err
	}
	h := b.newHold(what, statusPath, lockPath, live, version+1)
	h.lock = b.Book(lockPath, h.ctx)
	err = b.s.nodes.Txn().
		Then(Create(LockStep, lockPath, nil, zk.FlagEphemeral), Set(StatusStep, statusPath, status, version)).
		If(guards...).
		Commit(ctx)
	if Retryable(err) && b.Owns(ctx, lockPath, live.ID) {
		// Applied, its answer lost with the connection: the item is ours.
		// Dropped, its lock would hold the item for as long as this
		// session lives, with nobody working on it.
		err = nil
	}
	var refused *Refused
	switch {
	case err == nil:
		return h, nil
	case errors.As(err, &refused):
		b.Forget(h.lock) // refused: nothing was created
	default:
		// Perhaps applied, its answer lost: a lock of this session
		// would hold the item with nobody working on it.
		b.Leave(h.lock)
	}
	h.cancel(err)
	return nil, err
}

// Fence is a hold on an item whose status this session read at version
// and whose lock node is not this session's: its changes are fenced by the
// version alone, and the lock found goes with the first (a lock no session
// holds, removed with the change that fails its job).
func (b *LockBook) Fence(what, statusPath, lockPath string, live *Live, version int32) *Hold {
	return b.newHold(what, statusPath, lockPath, live, version)
}

func (b *LockBook) newHold(what, statusPath, lockPath string, live *Live, version int32) *Hold {
	h := &Hold{b: b, what: what, statusPath: statusPath, lockPath: lockPath, live: live, version: version}
	h.ctx, h.cancel = context.WithCancelCause(live.ctx)
	return h
}

// Context ends when the hold's lock or session is lost, or the hold ends.
// Work done for it should stop then.
func (h *Hold) Context() context.Context { return h.ctx }

// Live is the session the hold was taken in.
func (h *Hold) Live() *Live { return h.live }

// Version is the status version the hold owns.
func (h *Hold) Version() int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.version
}

// moved records a change committed under the hold that kept its lock: the
// status's version it owns is the next.
func (h *Hold) moved() {
	h.mu.Lock()
	h.version++
	h.mu.Unlock()
}

// Check refuses a change under a hold that is lost (ErrFenced: its lock
// or session gone, or a change refused by its fence), or that is over: a
// change tried then would be refused, and need not be sent.
func (h *Hold) Check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost != nil {
		return h.lost
	}
	if h.done {
		return fmt.Errorf("%s: claim already finished", h.what)
	}
	if err := h.live.ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w: %v", h.what, queue.ErrFenced, context.Cause(h.live.ctx))
	}
	return nil
}

// Over reports whether the hold has ended.
func (h *Hold) Over() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// Settled reports whether the hold ended with its item committed or given
// back (not lost).
func (h *Hold) Settled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.settled
}

// Abandon ends the hold without its lock known gone (a release that
// failed, a session presumed lost, work given up on): the lock is deleted
// later if it is still this session's.
func (h *Hold) Abandon() {
	h.mu.Lock()
	h.done = true
	h.mu.Unlock()
	h.cancel(errFinished)
	h.b.Leave(h.lock)
}

// settle ends a hold whose lock went with the change that ended it.
func (h *Hold) settle() {
	h.b.Forget(h.lock)
	h.mu.Lock()
	h.settled = true
	h.mu.Unlock()
	h.Abandon()
}

// fenced ends a hold whose change was refused: the item's status moved on
// under it, or its lock is gone. A lock still there is this hold's own (the
// status was written by someone who ignores locks, as a peer's admin
// failing a job does): it is removed now, or the item would stay locked for
// as long as this session lives.
func (h *Hold) fenced(ctx context.Context) {
	h.b.LetGo(ctx, h.lock)
	h.mu.Lock()
	if h.lost == nil {
		h.lost = fmt.Errorf("%s: %w: its status moved on", h.what, queue.ErrFenced)
	}
	h.mu.Unlock()
	h.Abandon()
}

// LockRemoved ends the hold's context with why: its lock node is gone (an
// operator or fsck removed it), and with it the item. The hold is over
// once the change that found it so, or its claim, ends it.
func (h *Hold) LockRemoved(why error) {
	h.b.Forget(h.lock)
	h.mu.Lock()
	if h.lost == nil && errors.Is(why, queue.ErrFenced) {
		h.lost = why
	}
	h.mu.Unlock()
	h.cancel(why)
}

// errSessionEnded stops a release's wait when the hold's session ends.
var errSessionEnded = errors.New("session ended")

// releaseRetry repeats a release across connection loss for as long as
// the session may come back.
func releaseRetry() retrypolicy.Policy {
	return retrypolicy.Policy{Backoff: 50 * time.Millisecond, Max: time.Second}
}

// Release gives the item back untouched: its lock is removed, in one multi
// with a check that the status is still at the hold's version. It is worth
// calling even after the hold's context ended: a session presumed lost may
// come back, and its lock with it.
func (h *Hold) Release(ctx context.Context) error {
	if h.Over() {
		return fmt.Errorf("%s: claim already finished", h.what)
	}
	// The wait between attempts also ends with the session: its lock is
	// gone with it.
	wait, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(h.live.ctx, func() { stop(errSessionEnded) })()
	var last error
	_, err := releaseRetry().Do(wait, Retryable, func(attempt int) error {
		err := h.Txn(nil).ReleaseLock().send(ctx)
		// After a lost answer the lock may be gone already: with the status
		// unchanged, the item is free all the same.
		if r, ok := RefusedBy(err, LockStep); ok && r.Gone() && attempt > 1 {
			return nil
		}
		last = err
		return err
	})
	switch {
	case err == nil:
	case !Retryable(last):
		// Do gives up early only on such an error (it has no limit on
		// attempts): the status moved on (the lock, if still there, is
		// removed all the same) or the lock is gone.
		h.fenced(ctx)
		return fmt.Errorf("releasing %s: %w (%v)", h.what, queue.ErrFenced, last)
	case h.live.ctx.Err() != nil:
		// The connection dropped, but the lock lives as long as the
		// session: left there it would hold the item, with nobody working
		// on it, until this process ends. Past the session, the lock book
		// removes it if the session comes back.
		h.Abandon()
		return fmt.Errorf("releasing %s: %w: %v", h.what, queue.ErrFenced, context.Cause(h.live.ctx))
	default:
		h.Abandon()
		return fmt.Errorf("releasing %s: %w (%v)", h.what, context.Cause(ctx), last)
	}
	h.settle()
	return nil
}
