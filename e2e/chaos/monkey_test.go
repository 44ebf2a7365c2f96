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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// When the one-off faults come, as the fraction of jobs completed: early
// enough that the rest of the run shows the pipeline recovering.
const (
	freezeAt     = 0.1
	leaderKillAt = 0.35
)

// freezeServices are the services a freeze picks from: stages whose steps
// last (downloads from a slow server; storing with fsyncs) and leave work
// on disk half-done. The others are the fallback when neither has a job in
// flight for a while.
var (
	freezeServices   = []string{"downloader", "processor"}
	fallbackServices = []string{"estimator", "provisioner", "notifier"}
)

// monkey injects the faults: kills, one after the other, all through the
// run; beside them, once each, the leader's kill and the freeze.
type monkey struct {
	r   *run
	mon *monitor

	// The killer's: its random source and what it did.
	rng           *rand.Rand
	kills         map[string]int // service → kill -9 and restart
	killsInFlight int            // kills that caught the replica in the middle of jobs
	jobsCaught    int            // jobs those kills interrupted

	// The one-off faults': their random source and what they did.
	oneOffRng     *rand.Rand
	leader        *leaderKill
	freeze        *freezeResult
	missedFreezes int // attempts whose jobs had moved on before SIGSTOP landed
	oneOffsDone   chan struct{}

	// Neither fault takes the other's replica.
	mu      sync.Mutex
	frozen  *stack.Proc // not to be killed: the freeze follows it to its thaw
	killing *stack.Proc // not to be frozen: it is being killed and restarted
}

// leaderKill is what the ZooKeeper leader's kill did.
type leaderKill struct {
	at       time.Duration
	server   int           // index killed
	next     int           // index of the leader elected
	election time.Duration // from the kill to a new leader serving
}

// freezeResult is what the freeze did and saw.
type freezeResult struct {
	at       time.Duration
	proc     string   // service-index
	state    string   // the state its stage takes jobs from
	held     []string // jobs it held when frozen
	frozen   time.Duration
	expired  time.Duration // from SIGSTOP until its worker entry (session) was gone
	takeover time.Duration // from SIGSTOP until every held job had been moved on by another replica
	// How the thawed replica's own steps on the held jobs ended, from its
	// log: job id → message.
	ends map[string]string
	// The stage's count of fenced outcomes (StageService, and the
	// Prometheus metric), before SIGSTOP and once its steps had ended.
	fencedBefore, fencedAfter int64
	metricBefore, metricAfter float64
}

func newMonkey(r *run, mon *monitor) *monkey {
	return &monkey{r: r, mon: mon, rng: rand.New(rand.NewPCG(r.set.seed, 2)), oneOffRng: rand.New(rand.NewPCG(r.set.seed, 3)),
		kills: map[string]int{}, oneOffsDone: make(chan struct{})}
}

// run injects faults until ctx ends; an error is a fault that could not be
// undone (a replica or server that would not start again) or a broken
// promise seen during the freeze.
func (m *monkey) run(ctx context.Context) error {
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

// oneOffs freezes a replica, then kills the leader, each once the run has
// got that far; then it closes oneOffsDone.
func (m *monkey) oneOffs(ctx context.Context) error {
	defer close(m.oneOffsDone)
	for m.leader == nil && m.pause(ctx, m.oneOffRng) {
		var err error
		switch p := m.mon.progress(); {
		case m.freeze == nil && p >= freezeAt:
			err = m.freezeReplica(ctx)
		case m.freeze != nil && p >= leaderKillAt:
			err = m.killLeader(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkAllDone says whether every one-off fault happened.
func (m *monkey) checkAllDone() error {
	var errs []error
	if m.leader == nil {
		errs = append(errs, errors.New("the run ended before the ZooKeeper leader was killed"))
	}
	if m.freeze == nil {
		errs = append(errs, fmt.Errorf("the run ended before a replica could be frozen in the middle of a job (%d attempts missed)", m.missedFreezes))
	}
	return errors.Join(errs...)
}

// killReplica kills a replica of a random service with SIGKILL and starts
// it again after a moment. Of the service's replicas it takes one in the
// middle of jobs when there is one, at random: a crash that interrupts
// nothing proves little.
func (m *monkey) killReplica(ctx context.Context) error {
	service := stack.Services[m.rng.IntN(len(stack.Services))]
	p, caught, seen := m.pickVictim(ctx, service)
	if p == nil {
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
	down := time.Duration(m.rng.Int64N(int64(1500 * time.Millisecond)))
	time.Sleep(down) // how long the replica stays dead; not a wait for anything
	start := time.Now()
	if err := p.Restart(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("restarting %s-%d after kill -9: %w", service, p.Index, err)
	}
	m.r.logf("kill -9 %s-%d (%s), down %s, serving again after %s", service, p.Index, seen,
		down.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return nil
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
		if idx := r.ens.Leader(); idx >= 0 && idx != not {
			return idx, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no ZooKeeper leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freezeReplica freezes a stage replica that is in the middle of jobs for
// longer than its session timeout, and checks what must follow: its session
// ends, another replica takes over and moves its jobs on while it is still
// frozen, and once thawed its own late commits are refused.
func (m *monkey) freezeReplica(ctx context.Context) error {
	p, ws, err := m.pickBusyReplica(ctx)
	if err != nil || p == nil {
		return err
	}
	defer func() {
		m.mu.Lock()
		m.frozen = nil
		m.mu.Unlock()
	}()
	// Once frozen, the replica is seen through to its thaw and its refused
	// commits even if the rest of the work ends meanwhile; every wait below
	// has a bound of its own.
	ctx = context.WithoutCancel(ctx)
	fr := &freezeResult{at: time.Since(m.r.start), proc: fmt.Sprintf("%s-%d", p.Service, p.Index),
		fencedBefore: fenced(ws), ends: map[string]string{}}
	fr.metricBefore, _ = fencedMetric(ctx, p)
	logStart := fileSize(p.LogPath())
	p.Freeze()
	frozeAt := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			p.Thaw()
		}
	}()
	// What it still holds now that it cannot move: jobs in the state its
	// runner takes, locked (by it: nothing else may take a locked job).
	from := map[string]queue.JobState{} // held job → its state
	var states []string
	for _, w := range ws {
		state, err := queue.ParseJobState(w.GetStage())
		if err != nil {
			return fmt.Errorf("%s works on stage %q: %w", fr.proc, w.GetStage(), err)
		}
		for _, f := range w.GetInFlight() {
			j, err := m.r.q.GetJob(ctx, f.GetJobId())
			if err == nil && j.GetStatus().GetStatus() == state && j.GetLocked() {
				fr.held = append(fr.held, f.GetJobId())
				from[f.GetJobId()] = state
				if !slices.Contains(states, w.GetStage()) {
					states = append(states, w.GetStage())
				}
			}
		}
	}
	fr.state = strings.Join(states, ", ")
	if len(fr.held) == 0 {
		// Its jobs were done before SIGSTOP landed: try again later.
		m.missedFreezes++
		return nil
	}
	m.r.logf("SIGSTOP %s holding %s in %s", fr.proc, strings.Join(fr.held, ", "), fr.state)

	// Its session expires: its worker entry (ephemeral, like its locks) goes.
	waitCtx, cancel := context.WithTimeout(ctx, 10*sessionTimeout+time.Minute)
	defer cancel()
	if err := until(waitCtx, 100*time.Millisecond, func() (bool, error) {
		all, err := m.r.q.ListWorkers(waitCtx)
		return err == nil && !slices.ContainsFunc(all, func(o *v1.WorkerInfo) bool {
			return slices.ContainsFunc(ws, func(w *v1.WorkerInfo) bool { return w.GetId() == o.GetId() })
		}), nil
	}); err != nil {
		return fmt.Errorf("frozen %s: its session never expired (session timeout %s): %w", fr.proc, sessionTimeout, err)
	}
	fr.expired = time.Since(frozeAt)
	// Its half-done work is left for another replica, which moves every held
	// job on while the frozen one still cannot act.
	if err := until(waitCtx, 100*time.Millisecond, func() (bool, error) {
		for _, jid := range fr.held {
			st, err := m.r.q.JobStatus(waitCtx, jid)
			if err != nil || st.GetStatus() == from[jid] {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("frozen %s: its jobs %v were not taken over: %w", fr.proc, fr.held, err)
	}
	fr.takeover = time.Since(frozeAt)
	// Frozen well past the session timeout either way.
	if rest := 3*sessionTimeout - time.Since(frozeAt); rest > 0 {
		time.Sleep(rest) // the length of the freeze itself; nothing is awaited
	}
	p.Thaw()
	thawed = true
	fr.frozen = time.Since(frozeAt)
	m.r.logf("SIGCONT %s after %s (session gone after %s, its jobs moved on by another replica after %s)",
		fr.proc, fr.frozen.Round(time.Millisecond), fr.expired.Round(time.Millisecond), fr.takeover.Round(time.Millisecond))

	// Its own steps on the held jobs resume and must end without a commit.
	if err := until(waitCtx, 200*time.Millisecond, func() (bool, error) {
		ends, err := stepEnds(p.LogPath(), logStart, fr.held)
		if err != nil {
			return false, err
		}
		fr.ends = ends
		return len(ends) == len(fr.held), nil
	}); err != nil {
		return fmt.Errorf("thawed %s: its steps on %v did not end as refused commits (log %s; seen %v): %w",
			fr.proc, fr.held, p.LogPath(), fr.ends, err)
	}
	var bad []string
	for jid, msg := range fr.ends {
		if !lateCommitRefused(msg) {
			bad = append(bad, jid+": "+msg)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("thawed %s: late steps not refused as fenced: %v", fr.proc, bad)
	}
	// Each refused step is counted as fenced just after its log line.
	countErr := until(waitCtx, 100*time.Millisecond, func() (bool, error) {
		after, err := workerStatus(waitCtx, p)
		if err == nil {
			fr.fencedAfter = fenced(after)
		}
		return fr.fencedAfter-fr.fencedBefore >= int64(len(fr.held)), nil
	})
	fr.metricAfter, _ = fencedMetric(waitCtx, p)
	m.freeze = fr
	for _, jid := range slices.Sorted(func(yield func(string) bool) {
		for k := range fr.ends {
			if !yield(k) {
				return
			}
		}
	}) {
		m.r.logf("%s late step on %s: %q", fr.proc, jid, fr.ends[jid])
	}
	m.r.logf("%s fenced outcomes: %d before the freeze, %d after (metric ingestq_jobs_handled_total{outcome=\"fenced\"}: %g → %g)",
		fr.proc, fr.fencedBefore, fr.fencedAfter, fr.metricBefore, fr.metricAfter)
	if countErr != nil {
		return fmt.Errorf("thawed %s counted %d fenced outcomes for %d refused late steps: %w",
			fr.proc, fr.fencedAfter-fr.fencedBefore, len(fr.held), countErr)
	}
	return nil
}

// pickBusyReplica finds a replica with jobs in flight: of freezeServices
// for up to 10 s, then of any stage. Nil when none is busy meanwhile.
func (m *monkey) pickBusyReplica(ctx context.Context) (*stack.Proc, []*v1.WorkerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	started := time.Now()
	for {
		services := freezeServices
		if time.Since(started) > 10*time.Second {
			services = append(slices.Clone(freezeServices), fallbackServices...)
		}
		var procs []*stack.Proc
		for _, s := range services {
			procs = append(procs, m.r.stack.Procs(s)...)
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
			m.missedFreezes++
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
