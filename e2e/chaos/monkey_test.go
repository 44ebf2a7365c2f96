package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// When the one-off faults come, as the fraction of jobs completed: early
// enough that the rest of the run shows the pipeline recovering. They come
// in this order, each after the one before.
const (
	freezeAt     = 0.1
	partitionAt  = 0.1
	quorumLossAt = 0.3
	leaderKillAt = 0.35
)

// cutFor is how long a frozen or partitioned replica, and a lost quorum,
// stay so: well past the session timeout.
const cutFor = 3 * sessionTimeout

// freezeServices are the services a freeze picks from: stages whose steps
// last (downloads from a slow server; storing with fsyncs) and leave work
// on disk half-done. The others are the fallback when neither has a job in
// flight for a while.
var (
	freezeServices   = []string{"downloader", "processor"}
	fallbackServices = []string{"estimator", "provisioner", "notifier"}
)

// monkey injects the faults: kills, one after the other, all through the
// run; beside them, once each, the scenario's other faults.
type monkey struct {
	r   *run
	mon *monitor

	// The killer's: its random source and what it did.
	rng           *rand.Rand
	killOrder     []string       // services left to kill in this round
	kills         map[string]int // service → kill -9 and restart
	killsInFlight int            // kills that caught the replica in the middle of jobs
	jobsCaught    int            // jobs those kills interrupted
	failedStarts  []string       // starts after a kill that exited before serving: replica and why
	everyKilled   chan struct{}  // closed once every service has been killed

	// The one-off faults': their random source and what they did.
	oneOffRng *rand.Rand
	leader    *leaderKill
	quorum    *quorumLoss
	freeze    *cutOff
	partition *cutOff
	missed    int // freezes and partitions tried whose jobs had moved on before the cut landed
	hangs     []*serverHang
	// serving follows every service's health (the ZooKeeper server hangs).
	serving *servingWatch
	// faultsMade is closed once every one-off fault is done and every
	// service has been killed.
	faultsMade chan struct{}

	// Neither fault takes the other's replica.
	mu      sync.Mutex
	frozen  *stack.Proc // not to be killed: the freeze or partition follows it to its end
	killing *stack.Proc // not to be frozen: it is being killed and restarted
}

// leaderKill is what the ZooKeeper leader's kill did.
type leaderKill struct {
	at       time.Duration
	server   int           // index killed
	next     int           // index of the leader elected
	election time.Duration // from the kill to a new leader serving
}

// quorumLoss is what stopping two ZooKeeper servers did.
type quorumLoss struct {
	at      time.Duration
	stopped []int         // indexes stopped, the leader first
	outage  time.Duration // from the stop until the first one restarted serves
	leader  int           // index of the leader elected then
}

// cutOff is what a freeze or a partition did and saw.
type cutOff struct {
	how      string // "SIGSTOP" or "link down"
	at       time.Duration
	proc     string   // service-index
	state    string   // the state its stage takes jobs from
	held     []string // jobs it held when cut off
	cut      time.Duration
	expired  time.Duration // from the cut until its worker entry (session) was gone
	takeover time.Duration // from the cut until every held job had been moved on
	// lone: no other replica of its service could take its jobs; it took
	// them again itself, after it was back.
	lone bool
	// How the returning replica's own steps on the held jobs ended, from its
	// log: job id → message.
	ends map[string]string
	// The stage's count of fenced outcomes (StageService, and the
	// Prometheus metric), before the cut and once its steps had ended.
	fencedBefore, fencedAfter int64
	metricBefore, metricAfter float64
}

// cutter is a way to cut a replica off from ZooKeeper and to undo it.
type cutter struct {
	how, undo  string // in words, for the log: "SIGSTOP", "SIGCONT"
	candidates func() (first, fallback []*stack.Proc)
	cut, heal  func(p *stack.Proc) error
}

func newMonkey(r *run, mon *monitor) *monkey {
	return &monkey{r: r, mon: mon, rng: rand.New(rand.NewPCG(r.set.seed, 2)), oneOffRng: rand.New(rand.NewPCG(r.set.seed, 3)),
		kills: map[string]int{}, everyKilled: make(chan struct{}), faultsMade: make(chan struct{})}
}

// run injects faults until ctx ends; an error is a fault that could not be
// undone (a replica or server that would not start again) or a broken
// promise seen during a one-off fault.
func (m *monkey) run(ctx context.Context) error {
	if m.r.sc.serverHangs {
		m.serving = watchServing(ctx, m.r)
	}
	if !m.r.sc.kills {
		return m.oneOffs(ctx)
	}
	// Either failing stops the other.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var oneOffErr error
	wg.Go(func() {
		if oneOffErr = m.oneOffs(ctx); oneOffErr != nil {
			cancel()
		}
	})
	err := m.killAtRandom(ctx)
	cancel()
	wg.Wait()
	return errors.Join(err, oneOffErr)
}

// pause waits a random gap, or until ctx ends (false).
func (m *monkey) pause(ctx context.Context, rng *rand.Rand) bool {
	gap := m.r.set.gapMin + time.Duration(rng.Int64N(int64(m.r.set.gapMax-m.r.set.gapMin)))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(gap):
		return true
	}
}

// killAtRandom kills replicas one after the other until ctx ends.
func (m *monkey) killAtRandom(ctx context.Context) error {
	for m.pause(ctx, m.rng) {
		if err := m.killReplica(ctx); err != nil {
			return err
		}
	}
	return nil
}

// oneOff is a fault made once, when the run has got far enough.
type oneOff struct {
	at   float64 // fraction of the jobs completed
	make func(ctx context.Context) error
	done func() bool // false after make: try again later
	name string
}

// plan lists the scenario's one-off faults in the order they come.
func (m *monkey) plan() []oneOff {
	var out []oneOff
	if m.r.sc.freeze {
		out = append(out, oneOff{at: freezeAt, name: "a replica frozen in the middle of a job",
			make: func(ctx context.Context) error { return m.cutReplica(ctx, m.freezer(), &m.freeze) },
			done: func() bool { return m.freeze != nil }})
	}
	if m.r.sc.partition != nil {
		out = append(out, oneOff{at: partitionAt, name: "the downloader in its namespace partitioned in the middle of a job",
			make: func(ctx context.Context) error { return m.cutReplica(ctx, m.partitioner(), &m.partition) },
			done: func() bool { return m.partition != nil }})
	}
	if m.r.sc.quorumLoss {
		out = append(out, oneOff{at: quorumLossAt, name: "ZooKeeper's quorum lost", make: m.loseQuorum,
			done: func() bool { return m.quorum != nil }})
	}
	if m.r.sc.leaderKill {
		out = append(out, oneOff{at: leaderKillAt, name: "the ZooKeeper leader killed", make: m.killLeader,
			done: func() bool { return m.leader != nil }})
	}
	if m.r.sc.serverHangs {
		out = append(out,
			oneOff{at: leaderHangAt, name: "the ZooKeeper leader hung",
				make: func(ctx context.Context) error { return m.hangServer(ctx, "leader") },
				done: func() bool { return len(m.hangs) >= 1 }},
			oneOff{at: followerHangAt, name: "a ZooKeeper follower hung",
				make: func(ctx context.Context) error { return m.hangServer(ctx, "follower") },
				done: func() bool { return len(m.hangs) >= 2 }})
	}
	return out
}

// oneOffs makes the one-off faults, each once the run has got that far;
// then, once every service has been killed too, it closes faultsMade.
func (m *monkey) oneOffs(ctx context.Context) error {
	defer close(m.faultsMade)
	plan := m.plan()
	for len(plan) > 0 && m.pause(ctx, m.oneOffRng) {
		next := plan[0]
		if m.mon.progress() < next.at {
			continue
		}
		if err := next.make(ctx); err != nil {
			return err
		}
		if next.done() {
			plan = plan[1:]
		}
	}
	if m.r.sc.kills {
		select {
		case <-ctx.Done():
		case <-m.everyKilled:
		}
	}
	return nil
}

// checkAllDone says whether every fault of the scenario happened.
func (m *monkey) checkAllDone() error {
	var errs []error
	for _, f := range m.plan() {
		if !f.done() {
			errs = append(errs, fmt.Errorf("the run ended before %s (%d freezes or partitions missed their jobs)", f.name, m.missed))
		}
	}
	if m.r.sc.kills {
		for _, s := range stack.Services {
			if m.kills[s] == 0 {
				errs = append(errs, fmt.Errorf("the run ended before %s was killed", s))
			}
		}
	}
	if m.serving != nil {
		// All through the run, not only while a server hung.
		errs = append(errs, m.serving.failures()...)
		errs = append(errs, sessionsLost(m.r.stack)...)
	}
	return errors.Join(errs...)
}

// nextService is the service whose replica is killed next: every service
// once a round, in an order shuffled each round.
func (m *monkey) nextService() string {
	if len(m.killOrder) == 0 {
		m.killOrder = slices.Clone(stack.Services)
		m.rng.Shuffle(len(m.killOrder), func(i, j int) { m.killOrder[i], m.killOrder[j] = m.killOrder[j], m.killOrder[i] })
	}
	s := m.killOrder[0]
	m.killOrder = m.killOrder[1:]
	return s
}

// killReplica kills a replica of the next service with SIGKILL and starts
// it again after a moment. Of the service's replicas it takes one in the
// middle of jobs when there is one, at random: a crash that interrupts
// nothing proves little.
func (m *monkey) killReplica(ctx context.Context) error {
	service := m.nextService()
	p, caught, seen := m.pickVictim(ctx, service)
	if p == nil {
		// Every replica of it is frozen or cut off: it stays due, so that a
		// lone replica is killed too once it is back.
		m.killOrder = append(m.killOrder, service)
		return nil
	}
	defer func() {
		m.mu.Lock()
		m.killing = nil
		m.mu.Unlock()
	}()
	p.Kill()
	m.kills[service]++
	if caught > 0 {
		m.killsInFlight++
		m.jobsCaught += caught
	}
	if len(m.kills) == len(stack.Services) && m.kills[service] == 1 {
		close(m.everyKilled)
	}
	down := time.Duration(m.rng.Int64N(int64(1500 * time.Millisecond)))
	waittest.For(ctx, down) // how long the replica stays dead: the fault itself, nothing to wait for
	start := time.Now()
	if err := m.restart(context.WithoutCancel(ctx), p); err != nil {
		return fmt.Errorf("restarting %s-%d after kill -9: %w", service, p.Index, err)
	}
	m.r.logf("kill -9 %s-%d (%s), down %s, serving again after %s", service, p.Index, seen,
		down.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return nil
}

// maxStarts bounds the starts of a killed replica. A deployment's
// supervisor starts a process that exits again (docker-compose's
// restart: unless-stopped, Kubernetes' restart policy), and so does the
// run: a start that fails, while ZooKeeper elects a leader say, is tried
// again, and counted in the figures.
const maxStarts = 5

// restart starts a killed replica again and waits until it serves.
func (m *monkey) restart(ctx context.Context, p *stack.Proc) error {
	for attempt := 1; ; attempt++ {
		err := p.Restart(ctx)
		if err == nil || !errors.Is(err, stack.ErrExitedStarting) || attempt == maxStarts {
			return err
		}
		why := lastError(p.LogPath())
		m.failedStarts = append(m.failedStarts, fmt.Sprintf("%s-%d: %s", p.Service, p.Index, why))
		m.r.logf("%s-%d exited while starting (%s); started again, as its supervisor would", p.Service, p.Index, why)
	}
}

// lastError is the last error a replica logged: its message and error.
func lastError(path string) string {
	last := "no error logged"
	eachLogLine(path, func(line logLine) {
		if line.Level == "ERROR" {
			last = line.Msg + ": " + line.Error
		}
	})
	return last
}

// pickVictim chooses which of a service's replicas to kill, a busy one
// first, and marks it as being killed. It says how many jobs it has in
// flight, and in words what was seen.
func (m *monkey) pickVictim(ctx context.Context, service string) (*stack.Proc, int, string) {
	type candidate struct {
		p    *stack.Proc
		n    int
		seen string
	}
	var cands []candidate
	procs := m.r.stack.Procs(service)
	m.rng.Shuffle(len(procs), func(i, j int) { procs[i], procs[j] = procs[j], procs[i] })
	for _, p := range procs {
		c := candidate{p: p, seen: "jobs in flight: not a stage"}
		if service != "batcher" {
			if ws, err := workerStatus(ctx, p); err != nil {
				c.seen = fmt.Sprintf("jobs in flight unknown: %v", err)
			} else {
				c.n = inFlight(ws)
				c.seen = fmt.Sprintf("%d jobs in flight", c.n)
			}
		}
		cands = append(cands, c)
	}
	// Busy before idle; among equals the shuffle's order stands.
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(min(b.n, 1), min(a.n, 1)) })
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range cands {
		if c.p != m.frozen {
			m.killing = c.p
			return c.p, c.n, c.seen
		}
	}
	return nil, 0, ""
}

// killLeader kills the ensemble's leader, waits for the other two to elect
// one, and starts the killed server again.
func (m *monkey) killLeader(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx) // what is killed is brought back
	idx, err := waitLeader(ctx, m.r, -1)
	if err != nil {
		return err
	}
	at := time.Since(m.r.start)
	m.r.ens.Servers[idx].Kill()
	killed := time.Now()
	next, err := waitLeader(ctx, m.r, idx)
	if err != nil {
		return fmt.Errorf("after killing ZooKeeper leader %d: %w", idx+1, err)
	}
	m.leader = &leaderKill{at: at, server: idx, next: next, election: time.Since(killed)}
	m.r.logf("kill -9 ZooKeeper leader (server %d); server %d leads after %s", idx+1, next+1, m.leader.election.Round(time.Millisecond))
	if err := m.r.ens.Servers[idx].Restart(ctx); err != nil {
		return fmt.Errorf("restarting ZooKeeper server %d: %w", idx+1, err)
	}
	m.r.logf("ZooKeeper server %d serving again", idx+1)
	return nil
}

// waitLeader waits until a server other than not leads the ensemble.
func waitLeader(ctx context.Context, r *run, not int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if leader := r.ens.Leader(); leader >= 0 && leader != not {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no ZooKeeper leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// loseQuorum stops two of the three ZooKeeper servers, the leader and one
// other, for cutFor: the one left cannot serve alone, and no session can
// expire meanwhile. Then it starts them again and waits for a leader.
func (m *monkey) loseQuorum(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx) // what is stopped is brought back
	leader, err := waitLeader(ctx, m.r, -1)
	if err != nil {
		return err
	}
	var others []int
	for i := range m.r.ens.Servers {
		if i != leader {
			others = append(others, i)
		}
	}
	ql := &quorumLoss{at: time.Since(m.r.start), stopped: []int{leader, others[m.oneOffRng.IntN(len(others))]}}
	var wg sync.WaitGroup
	for _, i := range ql.stopped {
		wg.Go(m.r.ens.Servers[i].Stop)
	}
	wg.Wait()
	stopped := time.Now()
	m.r.logf("ZooKeeper servers %d (leader) and %d stopped: no quorum", ql.stopped[0]+1, ql.stopped[1]+1)
	waittest.For(ctx, cutFor) // the length of the outage itself: nothing to wait for
	// Started one after the other: the first makes a quorum with the one
	// left, and serves once it has joined it.
	for _, i := range ql.stopped {
		if err := m.r.ens.Servers[i].Restart(ctx); err != nil {
			return fmt.Errorf("restarting ZooKeeper server %d after the quorum loss: %w", i+1, err)
		}
		if ql.outage == 0 {
			ql.outage = time.Since(stopped)
		}
	}
	if ql.leader, err = waitLeader(ctx, m.r, -1); err != nil {
		return fmt.Errorf("after the quorum loss: %w", err)
	}
	m.quorum = ql
	m.r.logf("ZooKeeper quorum back after %s: servers %d and %d serving again, server %d leads",
		ql.outage.Round(time.Millisecond), ql.stopped[0]+1, ql.stopped[1]+1, ql.leader+1)
	return nil
}

// freezer cuts a busy downloader or processor replica (or, failing those,
// any stage's) off by freezing it.
func (m *monkey) freezer() cutter {
	return cutter{how: "SIGSTOP", undo: "SIGCONT",
		candidates: func() (first, fallback []*stack.Proc) {
			for _, s := range freezeServices {
				first = append(first, m.r.stack.Procs(s)...)
			}
			for _, s := range fallbackServices {
				fallback = append(fallback, m.r.stack.Procs(s)...)
			}
			return first, fallback
		},
		cut:  func(p *stack.Proc) error { p.Freeze(); return nil },
		heal: func(p *stack.Proc) error { p.Thaw(); return nil },
	}
}

// partitioner cuts the downloader in its network namespace off by taking
// its link down: it runs on, and reaches neither ZooKeeper nor the
// depositor until the link is up again.
func (m *monkey) partitioner() cutter {
	l := m.r.sc.partition
	return cutter{how: "link down", undo: "link up",
		candidates: func() (first, fallback []*stack.Proc) { return m.r.stack.Procs("downloader")[:1], nil },
		cut:        func(*stack.Proc) error { return l.setUp(false) },
		heal:       func(*stack.Proc) error { return l.setUp(true) },
	}
}

// cutReplica cuts a stage replica that is in the middle of jobs off from
// ZooKeeper for cutFor, and checks what must follow: its session ends;
// another replica takes over and moves its jobs on while it is still cut
// off (when its service has no other replica, it takes them again itself
// once it is back); and its own late commits are refused. The result goes
// to *result; nil there means the jobs were done before the cut landed.
func (m *monkey) cutReplica(ctx context.Context, c cutter, result **cutOff) error {
	p, ws, err := m.pickBusyReplica(ctx, c)
	if err != nil || p == nil {
		return err
	}
	defer func() {
		m.mu.Lock()
		m.frozen = nil
		m.mu.Unlock()
	}()
	// Once cut off, the replica is seen through to its return and its
	// refused commits even if the rest of the work ends meanwhile; every
	// wait below has a bound of its own.
	ctx = context.WithoutCancel(ctx)
	co := &cutOff{how: c.how, at: time.Since(m.r.start), proc: fmt.Sprintf("%s-%d", p.Service, p.Index),
		fencedBefore: fenced(ws), ends: map[string]string{}, lone: len(m.r.stack.Procs(p.Service)) == 1}
	co.metricBefore, _ = fencedMetric(ctx, p)
	logStart := fileSize(p.LogPath())
	if err := c.cut(p); err != nil {
		return fmt.Errorf("cutting %s off (%s): %w", co.proc, c.how, err)
	}
	cutAt := time.Now()
	healed := false
	defer func() {
		if !healed {
			c.heal(p)
		}
	}()
	// What it still holds now that it cannot reach ZooKeeper: jobs in the
	// state its runner takes, locked (by it: nothing else may take a locked
	// job).
	from := map[string]queue.JobState{} // held job → its state
	var states []string
	for _, w := range ws {
		state, err := queue.ParseJobState(w.GetStage())
		if err != nil {
			return fmt.Errorf("%s works on stage %q: %w", co.proc, w.GetStage(), err)
		}
		for _, f := range w.GetInFlight() {
			j, err := jobs.NewReader(m.r.q).GetJob(ctx, f.GetJobId())
			if err == nil && j.GetStatus().GetStatus() == state && j.GetLocked() {
				co.held = append(co.held, f.GetJobId())
				from[f.GetJobId()] = state
				if !slices.Contains(states, w.GetStage()) {
					states = append(states, w.GetStage())
				}
			}
		}
	}
	co.state = strings.Join(states, ", ")
	if len(co.held) == 0 {
		// Its jobs were done before the cut landed: try again later.
		m.missed++
		healed = true
		return c.heal(p)
	}
	m.r.logf("%s %s holding %s in %s", c.how, co.proc, strings.Join(co.held, ", "), co.state)

	// Its session expires: its worker entry (ephemeral, like its locks) goes.
	waitCtx, cancel := context.WithTimeout(ctx, 10*sessionTimeout+time.Minute)
	defer cancel()
	if err := until(waitCtx, 100*time.Millisecond, func() (bool, error) {
		all, err := admin.New(m.r.q).Queue.ListWorkers(waitCtx)
		return err == nil && !slices.ContainsFunc(all, func(o *v1.WorkerInfo) bool {
			return slices.ContainsFunc(ws, func(w *v1.WorkerInfo) bool { return w.GetId() == o.GetId() })
		}), nil
	}); err != nil {
		return fmt.Errorf("%s %s: its session never expired (session timeout %s): %w", c.how, co.proc, sessionTimeout, err)
	}
	co.expired = time.Since(cutAt)
	// Its half-done work is left for another replica, which moves every held
	// job on while the cut-off one still cannot act.
	movedOn := func() (bool, error) {
		for _, jid := range co.held {
			st, err := jobs.NewReader(m.r.q).JobStatus(waitCtx, jid)
			if err != nil || st.GetStatus() == from[jid] {
				return false, nil
			}
		}
		return true, nil
	}
	if !co.lone {
		if err := until(waitCtx, 100*time.Millisecond, movedOn); err != nil {
			return fmt.Errorf("%s %s: its jobs %v were not taken over: %w", c.how, co.proc, co.held, err)
		}
		co.takeover = time.Since(cutAt)
	}
	// Cut off well past the session timeout either way.
	if rest := cutFor - time.Since(cutAt); rest > 0 {
		waittest.For(ctx, rest) // the length of the cut itself: nothing to wait for
	}
	healed = true
	if err := c.heal(p); err != nil {
		return fmt.Errorf("bringing %s back (%s): %w", co.proc, c.undo, err)
	}
	co.cut = time.Since(cutAt)
	if co.lone {
		m.r.logf("%s %s after %s (session gone after %s; no other replica to take its jobs)",
			c.undo, co.proc, co.cut.Round(time.Millisecond), co.expired.Round(time.Millisecond))
	} else {
		m.r.logf("%s %s after %s (session gone after %s, its jobs moved on by another replica after %s)",
			c.undo, co.proc, co.cut.Round(time.Millisecond), co.expired.Round(time.Millisecond), co.takeover.Round(time.Millisecond))
	}

	// Its own steps on the held jobs end (or ended while it was cut off),
	// each without a commit.
	if err := until(waitCtx, 200*time.Millisecond, func() (bool, error) {
		ends, err := stepEnds(p.LogPath(), logStart, co.held)
		if err != nil {
			return false, err
		}
		co.ends = ends
		return len(ends) == len(co.held), nil
	}); err != nil {
		return fmt.Errorf("%s: its steps on %v did not end as refused commits after %s (log %s; seen %v): %w",
			co.proc, co.held, c.undo, p.LogPath(), co.ends, err)
	}
	var bad []string
	for jid, msg := range co.ends {
		if !lateCommitRefused(msg) {
			bad = append(bad, jid+": "+msg)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s after %s: late steps not refused as fenced: %v", co.proc, c.undo, bad)
	}
	if co.lone {
		// Under its new session it takes its own jobs again.
		if err := until(waitCtx, 100*time.Millisecond, movedOn); err != nil {
			st := map[string]string{}
			for _, jid := range co.held {
				if j, err := jobs.NewReader(m.r.q).GetJob(waitCtx, jid); err == nil {
					st[jid] = fmt.Sprintf("%s, locked %t", queue.JobStateName(j.GetStatus().GetStatus()), j.GetLocked())
				}
			}
			return fmt.Errorf("lone %s: after %s its jobs were not taken again (session gone after %s; jobs now %v): %w",
				co.proc, c.undo, co.expired.Round(time.Millisecond), st, err)
		}
		co.takeover = time.Since(cutAt)
	}
	// Each refused step is counted as fenced just after its log line.
	countErr := until(waitCtx, 100*time.Millisecond, func() (bool, error) {
		after, err := workerStatus(waitCtx, p)
		if err == nil {
			co.fencedAfter = fenced(after)
		}
		return co.fencedAfter-co.fencedBefore >= int64(len(co.held)), nil
	})
	co.metricAfter, _ = fencedMetric(waitCtx, p)
	*result = co
	for _, jid := range slices.Sorted(func(yield func(string) bool) {
		for k := range co.ends {
			if !yield(k) {
				return
			}
		}
	}) {
		m.r.logf("%s late step on %s: %q", co.proc, jid, co.ends[jid])
	}
	m.r.logf("%s fenced outcomes: %d before the cut, %d after (metric ingestq_jobs_handled_total{outcome=\"fenced\"}: %g → %g)",
		co.proc, co.fencedBefore, co.fencedAfter, co.metricBefore, co.metricAfter)
	if countErr != nil {
		return fmt.Errorf("%s after %s counted %d fenced outcomes for %d refused late steps: %w",
			co.proc, c.undo, co.fencedAfter-co.fencedBefore, len(co.held), countErr)
	}
	return nil
}

// pickBusyReplica finds a replica with jobs in flight among the cutter's
// first candidates for up to 10 s, then among all of them. Nil when none is
// busy meanwhile.
func (m *monkey) pickBusyReplica(ctx context.Context, c cutter) (*stack.Proc, []*v1.WorkerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	started := time.Now()
	first, fallback := c.candidates()
	for {
		procs := slices.Clone(first)
		if time.Since(started) > 10*time.Second {
			procs = append(procs, fallback...)
		}
		m.oneOffRng.Shuffle(len(procs), func(i, j int) { procs[i], procs[j] = procs[j], procs[i] })
		for _, p := range procs {
			if ws, err := workerStatus(ctx, p); err == nil && inFlight(ws) > 0 {
				m.mu.Lock()
				free := m.killing != p
				if free {
					m.frozen = p
				}
				m.mu.Unlock()
				if free {
					return p, ws, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			m.missed++
			return nil, nil, nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// workerStatus asks a stage replica for its worker entries: one per stage
// runner (the estimator runs two: Pending and Estimating).
func workerStatus(ctx context.Context, p *stack.Proc) ([]*v1.WorkerInfo, error) {
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := v1.NewStageServiceClient(conn).GetStatus(ctx, &v1.GetStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("%s-%d GetStatus: %w", p.Service, p.Index, err)
	}
	return resp.GetWorkers(), nil
}

// inFlight counts the jobs a replica's workers have in flight.
func inFlight(ws []*v1.WorkerInfo) int {
	n := 0
	for _, w := range ws {
		n += len(w.GetInFlight())
	}
	return n
}

// fenced sums a replica's fenced outcomes over its workers.
func fenced(ws []*v1.WorkerInfo) int64 {
	var n int64
	for _, w := range ws {
		n += w.GetOutcomes()["fenced"]
	}
	return n
}

// fencedMetric reads the replica's Prometheus count of fenced steps.
func fencedMetric(ctx context.Context, p *stack.Proc) (float64, error) {
	samples, err := stack.ScrapeMetrics(ctx, p.Metrics, "ingestq_jobs_handled_total")
	if err != nil {
		return 0, fmt.Errorf("%s-%d metrics: %w", p.Service, p.Index, err)
	}
	var sum float64
	for _, s := range samples {
		if s.Labels["outcome"] == "fenced" {
			sum += s.Value
		}
	}
	return sum, nil
}

// The stage runner's log messages for a step whose commit was refused: the
// claim was lost before it tried (its context ended with the session), or
// the commit itself was fenced (the status version moved on, or the lock
// is gone).
const (
	msgLostBeforeCommit = "job lost while working on it; not committing"
	msgCommitRefused    = "commit refused: the job was lost"
)

// stepEnd are the runner's messages that end a step without success.
var stepEnd = []string{msgLostBeforeCommit, msgCommitRefused, "commit failed; releasing the job"}

func lateCommitRefused(msg string) bool { return msg == msgLostBeforeCommit || msg == msgCommitRefused }

// stepEnds reads a replica's JSON log from offset and returns, for each of
// jids, the message that ended its step there (absent while none has).
func stepEnds(path string, offset int64, jids []string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var line struct {
			Msg   string `json:"msg"`
			JobID string `json:"job_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if slices.Contains(jids, line.JobID) && slices.Contains(stepEnd, line.Msg) {
			if _, seen := out[line.JobID]; !seen {
				out[line.JobID] = line.Msg
			}
		}
	}
	return out, sc.Err()
}

// fileSize is the size of a file now (0 if it cannot be read).
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// until calls check every interval until it says done, it fails, or ctx ends.
func until(ctx context.Context, interval time.Duration, check func() (bool, error)) error {
	for {
		done, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
