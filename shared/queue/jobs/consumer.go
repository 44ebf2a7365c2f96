package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
)

// Consumer takes jobs of one state, in path order (priority, then age). It
// learns of new work from a child watch on the state folder, never by
// polling, and many goroutines may call Next at once: they share one local
// snapshot of the folder and never try the same entry twice.
//
// Costs stay flat with queue depth: the folder is listed when the snapshot
// runs dry, or when the watch has fired and the snapshot is older than a few
// listing times, so a deep queue is listed a bounded number of times per
// second, not once per job.
//
// A job can also become free with no child of the folder changing: a claim
// of this consumer lost (its session, its lock) or refused, a lock of
// another consumer gone, a session of this client established anew. The
// first and last mark the snapshot stale and wake the callers; a lock seen
// in the way is watched (watchLock); and as a backstop, a folder quiet for
// relistBackstop is listed again.
type Consumer struct {
	c        *Client
	state    queue.JobState
	opts     ConsumerOptions
	mu       sync.Mutex
	snapshot []entry // not yet tried, in order
	trying   map[string]bool
	// held are the jobs this consumer's claims hold: still in the folder
	// until committed, but not worth a read to find them locked.
	held     map[string]*Claim
	listedAt time.Time
	listCost time.Duration
	dirty    bool          // the folder changed since the snapshot
	wake     chan struct{} // closed when the folder or a blocking lock changes
	watching bool          // a child watch is armed
	lockWait map[string]bool
	deferred map[string]time.Time // jid → not before
	busyRate float64              // moving average of claims that met a held lock
	timer    *time.Timer          // wakes callers when the first deferral ends
	timerAt  time.Time
	backstop time.Duration // relistBackstop (shorter in tests)
	retryGap time.Duration // ReleasedRetryAfter (longer in tests)
	// With InOrder: picks numbered in the order made, and those whose turn
	// has not passed yet (being claimed, or claimed and waiting for their
	// turn); turn is closed and replaced when one passes.
	picks uint64
	open  []uint64
	turn  chan struct{}
}

// ConsumerOptions tune a Consumer.
type ConsumerOptions struct {
	// Spread is how many entries at the head of the queue a claim picks from
	// at random, so that replicas racing for the same state do not all try
	// the first job (default 8; 1 = strict order).
	Spread int
	// IgnorePause takes jobs even while the ingest queue is paused (admin tools).
	IgnorePause bool
	// Parts are the data nodes read with each job (default: all but the manifest).
	Parts queue.Parts
	// InOrder numbers the jobs taken in the order they were picked, so that
	// claims can be taken concurrently and the jobs still dealt with one
	// at a time in that order (WaitTurn, PassTurn).
	InOrder bool
}

// NewConsumer returns a consumer of jobs in state.
func (c *Client) NewConsumer(state queue.JobState, opts ConsumerOptions) *Consumer {
	if opts.Spread <= 0 {
		opts.Spread = 8
	}
	return &Consumer{c: c, state: state, opts: opts, trying: map[string]bool{}, held: map[string]*Claim{},
		wake: make(chan struct{}), lockWait: map[string]bool{}, dirty: true, deferred: map[string]time.Time{},
		busyRate: 0.1, turn: make(chan struct{}), backstop: relistBackstop,
		retryGap: ReleasedRetryAfter}
}

// WaitTurn blocks until every job this consumer picked before cl's has had
// its turn (InOrder): claims taken concurrently are then dealt with one at
// a time, in the order the jobs were picked. PassTurn ends cl's turn; it
// must be called for every claim, whether or not WaitTurn returned nil.
func (co *Consumer) WaitTurn(ctx context.Context, cl *Claim) error {
	for {
		co.mu.Lock()
		first, turn := len(co.open) == 0 || co.open[0] == cl.pick, co.turn
		co.mu.Unlock()
		if first {
			return nil
		}
		select {
		case <-turn:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// PassTurn ends cl's turn (see WaitTurn).
func (co *Consumer) PassTurn(cl *Claim) {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.passLocked(cl.pick)
}

func (co *Consumer) passLocked(pick uint64) {
	if i, ok := slices.BinarySearch(co.open, pick); ok {
		co.open = slices.Delete(co.open, i, i+1)
		close(co.turn)
		co.turn = make(chan struct{})
	}
}

// Defer keeps this consumer from taking jid again before `until` (a job a
// stage gave back to wait, as provisioning does while space is short).
// Other jobs overtake it meanwhile.
func (co *Consumer) Defer(jid string, until time.Time) {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.deferred[jid] = until
	co.wakeAtLocked(until)
}

// State is the state this consumer takes jobs from.
func (co *Consumer) State() queue.JobState { return co.state }

// Next blocks until it holds a job of the consumer's state, or ctx ends.
func (co *Consumer) Next(ctx context.Context) (*Claim, error) {
	for {
		if !co.opts.IgnorePause {
			if err := co.c.WaitUnpaused(ctx); err != nil {
				return nil, err
			}
		}
		cl, wake, err := co.TryNext(ctx)
		if cl != nil || (err != nil && !errors.Is(err, queue.ErrNoSession)) {
			return cl, err
		}
		if errors.Is(err, queue.ErrNoSession) {
			wake = co.c.sessionWake(ctx)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-wake:
		}
	}
}

// TryNext claims a job if one is free now. With none, it returns a channel
// that is closed when it is worth trying again.
func (co *Consumer) TryNext(ctx context.Context) (*Claim, <-chan struct{}, error) {
	for {
		e, wake, err := co.pick(ctx)
		if err != nil || e == nil {
			return nil, wake, err
		}
		co.mu.Lock()
		checkLock := co.busyRate > 0.05
		co.mu.Unlock()
		cl, err := co.c.claimEntry(ctx, co.state, *e, co.opts.Parts, checkLock)
		co.mu.Lock()
		delete(co.trying, e.Name)
		if err == nil {
			// Held before it stops being tried, in one step: a listing
			// meanwhile would offer the job again, to be found locked by
			// this very claim.
			co.held[cl.ID()] = cl
		}
		co.busyRate *= 0.9
		if errors.Is(err, errBusy) {
			co.busyRate += 0.1
		}
		if err != nil {
			co.passLocked(e.pick)
		}
		co.mu.Unlock()
		switch {
		case err == nil:
			cl.pick = e.pick
			cl.givenBack = co.giveBack
			co.hold(cl)
			return cl, nil, nil
		case errors.Is(err, errBusy):
			co.watchLock(e.JID)
		case errors.Is(err, errStale):
		default:
			// Not tried (no session, a read failed): the job is still a
			// candidate, and no watch would bring it back.
			co.mu.Lock()
			co.restoreLocked(*e)
			co.mu.Unlock()
			return nil, nil, err
		}
	}
}

// pick returns the next entry to try, relisting the folder when needed.
func (co *Consumer) pick(ctx context.Context) (*entry, <-chan struct{}, error) {
	co.mu.Lock()
	defer co.mu.Unlock()
	if len(co.snapshot) == 0 || (co.dirty && time.Since(co.listedAt) > co.relistAfter()) {
		if co.dirty || !co.watching {
			if err := co.relistLocked(ctx); err != nil {
				return nil, nil, err
			}
		}
	}
	// Pick at random among the first Spread entries that are not deferred.
	now := time.Now()
	var candidates []int
	var firstWake time.Time
	for i, e := range co.snapshot {
		if until, ok := co.deferred[e.JID]; ok {
			if now.Before(until) {
				if firstWake.IsZero() || until.Before(firstWake) {
					firstWake = until
				}
				continue
			}
			delete(co.deferred, e.JID)
		}
		candidates = append(candidates, i)
		if len(candidates) == co.opts.Spread {
			break
		}
	}
	if len(candidates) == 0 {
		if !firstWake.IsZero() {
			co.wakeAtLocked(firstWake)
		}
		return nil, co.wake, nil
	}
	i := candidates[0]
	if len(candidates) > 1 {
		i = candidates[rand.IntN(len(candidates))]
	}
	e := co.snapshot[i]
	// i is near the head: shift what is before it, not the (perhaps
	// 100,000 entries) after it.
	copy(co.snapshot[1:i+1], co.snapshot[:i])
	co.snapshot = co.snapshot[1:]
	co.trying[e.Name] = true
	if co.opts.InOrder {
		co.picks++
		e.pick = co.picks
		co.open = append(co.open, e.pick)
	}
	return &e, nil, nil
}

// hold keeps cl's job out of this consumer's snapshots until the claim
// ends, however it ends (committed, released, or lost with the session).
// A claim that ends otherwise than committed or released leaves its job in
// the folder, perhaps free, and left out of every listing made meanwhile:
// the snapshot is marked stale and callers woken to list it again.
func (co *Consumer) hold(cl *Claim) {
	jid := cl.ID()
	co.mu.Lock()
	co.held[jid] = cl
	co.mu.Unlock()
	context.AfterFunc(cl.Context(), func() {
		settled := cl.hold.Settled()
		co.mu.Lock()
		defer co.mu.Unlock()
		if co.held[jid] == cl { // not a later claim of the same job
			delete(co.held, jid)
		}
		if !settled {
			co.dirty = true
			co.wakeLocked()
		}
	})
}

// wakeLocked wakes the callers waiting for a change.
func (co *Consumer) wakeLocked() {
	close(co.wake)
	co.wake = make(chan struct{})
}

// TakeOver commits ch, which moves cl's job into this consumer's state,
// and keeps the job's lock: the claim then holds the job in this state, as
// if this consumer had taken it, with the data nodes this consumer reads.
// A process that runs two consecutive stages hands a job from one to the
// next so, without the other's claim (two round trips) or a watch between
// them. It reports false, with the job committed and its lock released,
// when the ingest queue is paused (no job is taken meanwhile) or the data
// nodes could not be read.
func (co *Consumer) TakeOver(ctx context.Context, cl *Claim, ch Change) (bool, error) {
	if ch.To != co.state {
		return false, fmt.Errorf("job %s: taking over into %s, but this consumer takes %s jobs",
			cl.ID(), queue.JobStateName(ch.To), queue.JobStateName(co.state))
	}
	if !co.opts.IgnorePause && co.c.pausedNow() {
		return false, cl.Commit(ctx, ch)
	}
	// Held before the job appears in the state folder: this consumer's next
	// listing must not offer it.
	jid := cl.ID()
	co.mu.Lock()
	co.held[jid] = cl
	co.mu.Unlock()
	if err := cl.commit(ctx, ch, true); err != nil {
		co.mu.Lock()
		if co.held[jid] == cl {
			delete(co.held, jid)
		}
		co.mu.Unlock()
		return false, err
	}
	cl.givenBack = co.giveBack
	co.hold(cl)
	if err := cl.Load(ctx, co.opts.Parts); err != nil {
		if !errors.Is(err, queue.ErrCorrupt) {
			// The job is in this state now; whoever takes it next reads it.
			return false, cl.Release(ctx)
		}
		if cl.LoadErr == nil {
			cl.LoadErr = err
		}
	}
	return true, nil
}

// ReleasedRetryAfter is how long a consumer leaves a job its own claim gave
// back before taking it again. A stage releases a job when it cannot go on
// with it now (a read failed, its context ended): taken straight back, a
// lasting failure would spin, and other replicas, which learn of the
// release only through a watch, would never get the job.
const ReleasedRetryAfter = time.Second

// giveBack puts a released job's entry back in the snapshot, in order, to
// be taken again after ReleasedRetryAfter: nothing in the folder changed,
// so no watch would bring it back.
func (co *Consumer) giveBack(name string) {
	qe, ok := queue.ParseEntry(name)
	if !ok {
		return
	}
	e, jid := entry{Entry: qe}, qe.JID
	co.mu.Lock()
	defer co.mu.Unlock()
	delete(co.held, jid)
	co.restoreLocked(e)
	until := time.Now().Add(co.retryGap)
	co.deferred[jid] = until
	co.wakeAtLocked(until)
}

// compareEntries orders picked entries as their state folder orders
// them (CompareEntries).
func compareEntries(a, b entry) int { return queue.CompareEntries(a.Entry, b.Entry) }

// restoreLocked puts an entry back in the snapshot, in order, unless it is
// there or being tried.
func (co *Consumer) restoreLocked(e entry) {
	i, found := slices.BinarySearchFunc(co.snapshot, e, compareEntries)
	if !found && !co.trying[e.Name] {
		co.snapshot = slices.Insert(co.snapshot, i, e)
	}
}

// wakeAtLocked makes sure waiting callers are woken at t (or earlier).
func (co *Consumer) wakeAtLocked(t time.Time) {
	if co.timer != nil && !co.timerAt.After(t) && co.timerAt.After(time.Now()) {
		return
	}
	if co.timer != nil {
		co.timer.Stop()
	}
	co.timerAt = t
	co.timer = time.AfterFunc(time.Until(t), func() {
		co.mu.Lock()
		defer co.mu.Unlock()
		// A job given back without a new entry changes nothing the folder
		// watch sees: relist to find it again.
		co.dirty = true
		close(co.wake)
		co.wake = make(chan struct{})
	})
}

// relistAfter bounds how often a busy consumer relists its folder: a listing
// may cost at most ~10% of its time and happens at most every 200 ms, which
// is also how long a new higher-priority job may wait behind the snapshot.
// An idle consumer (empty snapshot) relists at once when the watch fires.
func (co *Consumer) relistAfter() time.Duration {
	return max(200*time.Millisecond, 10*co.listCost)
}

// relistGap is the least time between two listings a watch brings about.
// Only jobs that arrive within it of the last listing wait for it, so an
// idle consumer lists at once; a busy pipeline is spared a listing (and a
// wake-up of every waiting caller) per job. 20 ms against 5 ms: ZooKeeper
// serves a tenth fewer requests a job end to end (BENCHMARKS.md).
const relistGap = 20 * time.Millisecond

// relistBackstop is how long a folder whose watch has not fired is trusted:
// then it is listed again, in case a job became free in a way nothing
// watched saw. A listing then costs at most 1% of the time (the backstop
// is at least 100 listing times), and a busy folder, whose watch fires
// all the time, is never listed for it.
const relistBackstop = 30 * time.Second

func (co *Consumer) relistLocked(ctx context.Context) error {
	// Without a session there is nothing to list: Next waits for one.
	if _, err := co.c.s.Current(); err != nil {
		return fmt.Errorf("listing %s jobs: %w", queue.JobStateName(co.state), err)
	}
	start := time.Now()
	// A session established from here on may have freed jobs this listing
	// shows held (its claims lost) or locked (its locks tidied).
	established := co.c.s.Established()
	// The lock is held across the listing so concurrent Next calls wait for
	// one listing instead of each making its own.
	names, _, ev, err := co.c.z.WatchChildren(ctx, co.c.p.StateDir(co.state))
	if err != nil {
		return fmt.Errorf("listing %s jobs: %w", queue.JobStateName(co.state), err)
	}
	co.listedAt = time.Now()
	co.dirty = false
	co.watching = true
	all := queue.SortedEntries(names)
	co.snapshot = co.snapshot[:0]
	for _, e := range all {
		if !co.trying[e.Name] && co.held[e.JID] == nil {
			co.snapshot = append(co.snapshot, entry{Entry: e})
		}
	}
	// What a listing costs includes sorting it (~35 ms of 100,000 names).
	co.listCost = time.Since(start)
	wake, listedAt := co.wake, co.listedAt
	backstop := time.NewTimer(max(co.backstop, 100*co.listCost))
	go func() {
		defer backstop.Stop()
		select {
		case <-ev:
		case <-established:
		case <-backstop.C:
		case <-co.c.s.Life().Done():
		}
		// Jobs arriving one after another are found by one listing, not
		// one each: the next listing waits out relistGap from this one.
		if wait := relistGap - time.Since(listedAt); wait > 0 {
			select {
			case <-time.After(wait):
			case <-co.c.s.Life().Done():
			}
		}
		co.mu.Lock()
		co.dirty = true
		co.watching = false
		if co.wake == wake {
			close(co.wake)
			co.wake = make(chan struct{})
		}
		co.mu.Unlock()
	}()
	return nil
}

// watchLock wakes waiting callers when a job that blocked them is unlocked
// without leaving the state (its consumer released it or died): that changes
// no child of the state folder, so the folder watch would not fire.
func (co *Consumer) watchLock(jid string) {
	co.mu.Lock()
	if co.lockWait[jid] || len(co.lockWait) > 256 {
		co.mu.Unlock()
		return
	}
	co.lockWait[jid] = true
	co.mu.Unlock()
	go func() {
		defer func() {
			co.mu.Lock()
			delete(co.lockWait, jid)
			co.dirty = true
			close(co.wake)
			co.wake = make(chan struct{})
			co.mu.Unlock()
		}()
		ok, _, ev, err := co.c.z.WatchExists(co.c.s.Life(), co.c.p.Job(jid).Lock())
		if err != nil || !ok {
			return
		}
		select {
		case <-ev:
		case <-co.c.s.Life().Done():
		}
	}()
}

// sessionWake returns a channel closed when a session is (re)established.
func (c *Client) sessionWake(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	cancel := c.s.OnSession(func(ok bool) {
		if ok {
			once.Do(func() { close(ch) })
		}
	})
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ch
}

// --- queue pause ---

// pauseState caches whether /locks/queue/ingest exists, kept current by a watch.
type pauseState struct {
	once   sync.Once
	mu     sync.Mutex
	paused bool
	known  bool
	change chan struct{}
}

// Paused reports whether the ingest queue is paused (read from ZooKeeper).
func (c *Client) Paused(ctx context.Context) (bool, error) {
	ok, _, err := c.z.Exists(ctx, c.p.Locks().IngestPause())
	if err != nil {
		return false, fmt.Errorf("reading queue pause: %w", err)
	}
	return ok, nil
}

// pausedNow reports whether the ingest queue is paused, as far as the
// watch that WaitUnpaused keeps knows (false before it knows).
func (c *Client) pausedNow() bool {
	ps := &c.pause
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.known && ps.paused
}

// WaitUnpaused returns at once while the queue runs, or blocks until it is
// unpaused or ctx ends. The state comes from a watch, not a read per call.
func (c *Client) WaitUnpaused(ctx context.Context) error {
	ps := &c.pause
	ps.once.Do(func() {
		ps.change = make(chan struct{})
		go c.followPause()
	})
	for {
		ps.mu.Lock()
		paused, known, ch := ps.paused, ps.known, ps.change
		ps.mu.Unlock()
		if known && !paused {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ch:
		}
	}
}

// pauseBeforeRewatch waits a moment before a watch that failed is set
// again; false when the session has ended and the follower should stop.
func (c *Client) pauseBeforeRewatch() bool {
	select {
	case <-c.s.Life().Done():
		return false
	case <-time.After(200 * time.Millisecond):
		return true
	}
}

func (c *Client) followPause() {
	ps := &c.pause
	for {
		ok, _, ev, err := c.z.WatchExists(c.s.Life(), c.p.Locks().IngestPause())
		if err != nil {
			if !c.pauseBeforeRewatch() {
				return
			}
			continue
		}
		ps.mu.Lock()
		if !ps.known || ps.paused != ok {
			ps.paused, ps.known = ok, true
			close(ps.change)
			ps.change = make(chan struct{})
		}
		ps.mu.Unlock()
		select {
		case <-c.s.Life().Done():
			return
		case <-ev:
		}
	}
}
