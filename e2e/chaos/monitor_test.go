package chaos

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
)

// monitor watches the run from outside: the jobs in each state (one small
// read per state), to find the longest stall, and the ensemble's leader, to
// count leader changes.
type monitor struct {
	r    *run
	stop func()
	done chan struct{}

	mu        sync.Mutex
	completed int
	counts    map[queue.JobState]int // as last read
	notify    chan struct{}          // closed and replaced whenever the counts change
	// The longest time no job changed state, and no job completed, while
	// jobs were live; and when each began (run time).
	stall, completionGap       time.Duration
	stallAt, completionGapAt   time.Duration
	lastChange, lastCompletion time.Time
	leader                     int // index of the last leader seen, -1 before the first
	leaderChanges              []leaderChange
}

type leaderChange struct {
	at       time.Duration
	from, to int // server indexes
}

// pollEvery is how often the monitor reads the counts; logEvery, how often
// at most it logs them.
const (
	pollEvery = 200 * time.Millisecond
	logEvery  = 5 * time.Second
)

func startMonitor(ctx context.Context, r *run) *monitor {
	ctx, cancel := context.WithCancel(ctx)
	now := time.Now()
	m := &monitor{r: r, stop: cancel, done: make(chan struct{}), notify: make(chan struct{}),
		lastChange: now, lastCompletion: now, leader: r.ens.Leader()}
	go m.loop(ctx)
	return m
}

func (m *monitor) loop(ctx context.Context) {
	defer close(m.done)
	var last map[queue.JobState]int
	var logged time.Time
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	leaderTick := time.NewTicker(time.Second)
	defer leaderTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-leaderTick.C:
			m.lookAtLeader()
		case <-tick.C:
			counts, err := admin.New(m.r.q).Jobs.Counts(ctx)
			if err != nil {
				// No answer (an election, say) counts as no change.
				m.observe(last, time.Now())
				continue
			}
			if !maps.Equal(counts, last) {
				m.changedAt(counts, time.Now())
				last = counts
				if time.Since(logged) >= logEvery {
					m.r.logf("jobs by state: %v", countNames(counts))
					logged = time.Now()
				}
			} else {
				m.observe(last, time.Now())
			}
		}
	}
}

// changedAt records new counts.
func (m *monitor) changedAt(counts map[queue.JobState]int, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.measure(counts, now)
	m.lastChange = now
	if counts[queue.Completed] > m.completed {
		m.lastCompletion = now
	}
	m.completed = counts[queue.Completed]
	m.counts = counts
	close(m.notify)
	m.notify = make(chan struct{})
}

// observe measures the stalls up to now when nothing changed.
func (m *monitor) observe(counts map[queue.JobState]int, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.measure(counts, now)
}

// measure extends the stall figures while jobs are live: a queue that is
// merely waiting for the next submission is not stalled.
func (m *monitor) measure(counts map[queue.JobState]int, now time.Time) {
	if live(counts) == 0 {
		m.lastChange, m.lastCompletion = now, now
		return
	}
	at := func(t time.Time) time.Duration { return t.Sub(m.r.start) }
	if d := now.Sub(m.lastChange); d > m.stall {
		m.stall, m.stallAt = d, at(m.lastChange)
	}
	if d := now.Sub(m.lastCompletion); d > m.completionGap {
		m.completionGap, m.completionGapAt = d, at(m.lastCompletion)
	}
}

// live counts the jobs that have not ended.
func live(counts map[queue.JobState]int) int {
	n := 0
	for s, c := range counts {
		if s != queue.Completed && s != queue.Failed {
			n += c
		}
	}
	return n
}

func (m *monitor) lookAtLeader() {
	idx := m.r.ens.Leader()
	if idx < 0 {
		return // electing, or the leader is down
	}
	m.mu.Lock()
	prev := m.leader
	if prev == idx {
		m.mu.Unlock()
		return
	}
	m.leader = idx
	if prev >= 0 {
		m.leaderChanges = append(m.leaderChanges, leaderChange{at: time.Since(m.r.start), from: prev, to: idx})
	}
	m.mu.Unlock()
	if prev >= 0 {
		m.r.logf("ZooKeeper leader changed: server %d → server %d", prev+1, idx+1)
	}
}

// ended counts the jobs seen last that have ended, Completed or Failed.
func (m *monitor) ended() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[queue.Completed] + m.counts[queue.Failed]
}

// stuckFor is how long no job has changed state while jobs are live (0
// when none is).
func (m *monitor) stuckFor() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if live(m.counts) == 0 {
		return 0
	}
	return time.Since(m.lastChange)
}

// changed is closed when the counts next change.
func (m *monitor) changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.notify
}

// progress is the fraction of the run's jobs completed.
func (m *monitor) progress() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return float64(m.completed) / float64(m.r.set.jobs)
}

// stopped ends the monitor and waits for it.
func (m *monitor) stopped() {
	m.stop()
	<-m.done
}
