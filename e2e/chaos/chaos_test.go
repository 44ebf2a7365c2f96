// Package chaos runs the whole pipeline under faults and proves that no
// deposit is lost or duplicated. Each scenario starts a three-server
// ZooKeeper ensemble on loopback, replicas of every service (their built
// binaries), and batches of deposits served from loopback, then makes its
// faults while the jobs flow:
//
//   - the main one: two replicas of every service, killed (kill -9) and
//     started again all through the run; the ZooKeeper leader killed once;
//     one replica frozen (SIGSTOP) for longer than its session timeout while
//     it is in the middle of jobs;
//   - a lone replica per stage, each killed and started again, one frozen
//     past its session timeout: no other replica can take its jobs, it must
//     take them back itself;
//   - ZooKeeper's quorum lost: two of the three servers stopped for longer
//     than the session timeout, then started again;
//   - a downloader replica in a network namespace of its own, cut off from
//     ZooKeeper past its session timeout by taking its link down, then
//     healed;
//   - every service reaching ZooKeeper through a proxy that delays each
//     direction, under the main scenario's faults;
//   - a ZooKeeper server hung (SIGSTOP) for many session timeouts, the
//     leader, then a follower: no service may lose its session or stop
//     serving while the two others make a quorum (hang_test.go).
//
// At the end every job must be Completed, each object stored and recorded
// once, each batch reported once, fsck clean and no lock left; the run logs
// what it did and saw, and its exactly-once figures.
//
// `go test ./chaos/` is the short run (part of make test); `make chaos` is
// the full one (INGESTQ_CHAOS_JOBS=500 for every scenario).
// INGESTQ_CHAOS_SEED replays a run's choices (which replica, when), though
// not its timing.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/leftovers"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// Environment variables that size a run.
const (
	envJobs = "INGESTQ_CHAOS_JOBS" // jobs in all, in every scenario (default: the scenario's short run)
	envSeed = "INGESTQ_CHAOS_SEED" // seed of the run's random choices (default: the clock)
	envKeep = "INGESTQ_CHAOS_KEEP" // non-empty: keep data and logs of a run that passed
)

// sessionTimeout is every service's ZooKeeper session timeout: short, so
// that a frozen replica loses its jobs quickly (and a killed one frees
// them), yet long enough that a loaded machine does not expire sessions of
// its own accord.
const sessionTimeout = 3 * time.Second

// stuckAfter ends a run in which no job has changed state for this long
// while jobs are live: far longer than any fault lasts (a freeze, a
// partition and a quorum loss each last three session timeouts), so the
// pipeline is stuck, and the run says where rather than waiting for the
// test's own timeout.
const stuckAfter = 2 * time.Minute

const adminToken = "chaos-admin-token"

// scenario is one chaos test: the stack it runs and the faults it makes.
type scenario struct {
	// shortJobs is the size of the run in make test: every fault once or
	// more, in a minute or two on two cores. INGESTQ_CHAOS_JOBS overrides it.
	shortJobs int
	// replicas of every service.
	replicas int
	// kills: kill -9 and restart replicas all through the run, every
	// service at least once.
	kills bool
	// freeze: once, SIGSTOP a busy downloader or processor replica for
	// three session timeouts, then SIGCONT.
	freeze bool
	// leaderKill: once, kill -9 the ZooKeeper leader, and start it again
	// after a new one is elected.
	leaderKill bool
	// quorumLoss: once, stop two of the three ZooKeeper servers for three
	// session timeouts, then start them again.
	quorumLoss bool
	// partition: the first downloader replica runs in this network
	// namespace; once, its link is taken down for three session timeouts
	// while it is in the middle of jobs, then brought up again.
	partition *netLink
	// latency: every service reaches each ZooKeeper server through a proxy
	// that holds each direction this long.
	latency zktest.Delay
	// serverHangs: once the ZooKeeper leader, then a follower, frozen
	// (SIGSTOP) for hangFor, with Submits made meanwhile; every service's
	// health is followed all through the run.
	serverHangs bool
	// sessionTimeout, when set, is the services' session timeout in place
	// of the package's.
	sessionTimeout time.Duration
}

// timeout is the services' session timeout in this scenario.
func (sc scenario) timeout() time.Duration {
	if sc.sessionTimeout > 0 {
		return sc.sessionTimeout
	}
	return sessionTimeout
}

// settings size one run.
type settings struct {
	jobs, batches int
	seed          uint64
	// spacing is the time between two submissions: batches arrive while
	// earlier ones are still being worked on, and batchers die while
	// spawning them.
	spacing time.Duration
	// gap is the range of the pause between two faults.
	gapMin, gapMax time.Duration
	// depositDelay slows every answer of the depositor's server, so that
	// downloads last long enough for faults to catch them half-done.
	depositDelay time.Duration
}

func readSettings(t *testing.T, sc scenario) settings {
	t.Helper()
	s := settings{jobs: sc.shortJobs, seed: uint64(time.Now().UnixNano()),
		gapMin: 500 * time.Millisecond, gapMax: 2 * time.Second, depositDelay: 500 * time.Millisecond}
	if v := os.Getenv(envJobs); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("%s=%q: want a number of jobs, at least 10", envJobs, v)
		}
		s.jobs = n
	}
	if v := os.Getenv(envSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
		s.seed = n
	}
	s.batches = min(5, max(2, s.jobs/20))
	// The next batch comes while the last is still being spawned or in
	// the works: every stage stays busy, so faults catch work in flight.
	s.spacing = time.Duration(s.jobs/s.batches) * 100 * time.Millisecond
	return s
}

// run is one chaos run: what it started and what it deposited.
type run struct {
	t        *testing.T
	sc       scenario
	set      settings
	start    time.Time
	dir      string
	ens      *zktest.Ensemble
	proxies  []*zktest.Proxy // the services' way to the ensemble, when it is slowed
	deposits *depositor.Server
	stack    *stack.Stack
	// q reads the queue directly, as an operator's tool would.
	q *session.Session
	// One client per batcher replica: submissions and admin calls go to
	// whichever answers.
	conns    []*grpc.ClientConn
	batchers []v1.BatchServiceClient
	admins   []v1.AdminServiceClient
	batches  []*depositBatch
	// tally is the run's exactly-once figures, as far as they were read.
	tally tally

	mu   sync.Mutex
	bids map[int]string // batch index → bid, once submitted
}

// TestEveryJobCompletesOnceDespiteCrashesLeaderLossAndAFrozenReplica is the
// main scenario: two replicas of every service killed and restarted all
// through the run, the ZooKeeper leader killed, a replica frozen.
func TestEveryJobCompletesOnceDespiteCrashesLeaderLossAndAFrozenReplica(t *testing.T) {
	runScenario(t, scenario{shortJobs: 100, replicas: 2, kills: true, freeze: true, leaderKill: true})
}

// TestEveryJobCompletesOnceWithALoneReplicaPerStageKilledAndFrozen runs one
// replica of every service: a killed replica's jobs wait for it to come
// back, and the frozen one, whose session expires while no other replica
// can take its jobs, must refuse its own late commits once thawed and then
// take those jobs again under its new session.
func TestEveryJobCompletesOnceWithALoneReplicaPerStageKilledAndFrozen(t *testing.T) {
	runScenario(t, scenario{shortJobs: 40, replicas: 1, kills: true, freeze: true})
}

// TestEveryJobCompletesOnceAcrossALossOfZooKeeperQuorum stops two of the
// three ZooKeeper servers for longer than the services' session timeout:
// no server serves meanwhile, and no session can expire either (expiry
// needs a leader), so the services' sessions come back with the quorum.
// What they held before must be finished or freed, not left locked.
func TestEveryJobCompletesOnceAcrossALossOfZooKeeperQuorum(t *testing.T) {
	runScenario(t, scenario{shortJobs: 40, replicas: 2, quorumLoss: true})
}

// TestEveryJobCompletesOnceWhenADownloaderIsPartitionedFromZooKeeper runs a
// downloader replica in a network namespace of its own and cuts its link
// while it is in the middle of jobs: its session expires, the other
// downloader takes its jobs, and once the link is back its late commits
// are refused and each job is still done once.
func TestEveryJobCompletesOnceWhenADownloaderIsPartitionedFromZooKeeper(t *testing.T) {
	link := newNetLink(t) // skips the test where namespaces cannot be made
	runScenario(t, scenario{shortJobs: 40, replicas: 2, partition: link})
}

// TestEveryJobCompletesOnceOverSlowLinksToZooKeeper runs the main
// scenario's faults while every service reaches ZooKeeper through a proxy
// that holds each direction 20 to 50 ms.
func TestEveryJobCompletesOnceOverSlowLinksToZooKeeper(t *testing.T) {
	runScenario(t, scenario{shortJobs: 40, replicas: 2, kills: true, freeze: true, leaderKill: true,
		latency: zktest.Delay{Min: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
}

// runScenario runs one scenario: the stack, the faults and the
// submissions, then the checks.
func runScenario(t *testing.T, sc scenario) {
	set := readSettings(t, sc)
	// Every wait of the run ends by this deadline; go test's own timeout
	// leaves time to clean up.
	deadline := time.Now().Add(60 * time.Minute)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-90 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	setup := time.Now()
	r := startRun(ctx, t, sc, set)
	t.Logf("chaos: %d jobs in %d batches, %s, seed %d (%s=%d replays the choices); set up in %s; data and logs in %s",
		set.jobs, set.batches, r.layout(), set.seed, envSeed, set.seed, time.Since(setup).Round(time.Second), r.dir)

	// Faults and submissions stop once the work is done or the run fails.
	work, stopWork := context.WithCancelCause(ctx)
	defer stopWork(nil)
	mon := startMonitor(work, r)
	m := newMonkey(r, mon)
	var wg sync.WaitGroup
	var submitErr, monkeyErr error
	wg.Go(func() {
		if submitErr = r.submitAll(work, m.faultsMade, mon); submitErr != nil && work.Err() == nil {
			stopWork(submitErr)
		}
	})
	wg.Go(func() {
		if monkeyErr = m.run(work); monkeyErr != nil && work.Err() == nil {
			stopWork(monkeyErr)
		}
	})
	waitErr := r.waitAllCompleted(work, mon)
	stopWork(errors.New("the work is done"))
	wg.Wait()
	mon.stopped()
	if err := errors.Join(waitErr, submitErr, monkeyErr); err != nil {
		r.readTally(ctx)
		r.logFigures(m, mon)
		t.Fatalf("chaos run: %v", err)
	}
	if err := m.checkAllDone(); err != nil {
		r.readTally(ctx)
		r.logFigures(m, mon)
		t.Fatal(err)
	}
	// Every process runs again: the checks read a pipeline at rest.
	if err := r.allServing(ctx); err != nil {
		t.Fatal(err)
	}
	elapsed, checking := time.Since(r.start), time.Now()
	found := r.checkEnd(ctx)
	r.logFigures(m, mon)
	if t.Failed() {
		found = "the checks above failed"
	}
	t.Logf("chaos: the faulty run took %s, the checks and the stop %s; %s", elapsed.Round(time.Second),
		time.Since(checking).Round(time.Second), found)
}

// serviceBins are the service binaries, built once for every scenario of
// the test binary (a build is most of a short run's set-up); TestMain
// removes them.
var serviceBins builtServices

type builtServices struct {
	once sync.Once
	dir  string
	err  error
}

// get builds the binaries on first use and returns their directory.
func (b *builtServices) get(ctx context.Context) (string, error) {
	b.once.Do(func() {
		if b.dir, b.err = testenv.MkdirTemp("ingestq-chaos-bin-"); b.err == nil {
			b.err = stack.Build(ctx, filepath.Join("..", ".."), b.dir)
		}
	})
	return b.dir, b.err
}

func TestMain(m *testing.M) {
	testenv.Isolate()
	bypassProxies()
	code := m.Run()
	if serviceBins.dir != "" {
		os.RemoveAll(serviceBins.dir)
	}
	os.Exit(code)
}

// startRun starts the ensemble, the depositor's server and the stack of a
// scenario; the test's cleanup stops them.
func startRun(ctx context.Context, t *testing.T, sc scenario, set settings) *run {
	t.Helper()
	dir, err := testenv.MkdirTemp("ingestq-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, sc: sc, set: set, dir: dir, bids: map[int]string{}}
	t.Cleanup(func() {
		r.close()
		if t.Failed() || os.Getenv(envKeep) != "" {
			t.Logf("chaos: logs and data kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	bin, err := serviceBins.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Clients reach ZooKeeper and the depositor on loopback, or, when a
	// replica runs in a namespace of its own, on the address of this end of
	// its link, which every process reaches.
	zkOpts := zktest.Options{NoSync: true, JVMHeap: "256m"}
	depositHost := "127.0.0.1"
	if l := sc.partition; l != nil {
		zkOpts.ClientHost, depositHost = l.hostAddr, l.hostAddr.String()
	}
	// forceSync=no: a killed server loses nothing the kernel has, and the
	// run is not about disks.
	if r.ens, err = zktest.StartEnsemble(ctx, filepath.Join(dir, "zookeeper"), 3, zkOpts); err != nil {
		t.Fatal(err)
	}
	if r.deposits, err = depositor.StartOn(filepath.Join(dir, "deposits"), depositHost); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(set.seed, 1))
	if r.batches, err = writeDeposits(filepath.Join(dir, "deposits"), r.deposits.URL, set, 0, rng); err != nil {
		t.Fatal(err)
	}
	if sc.serverHangs {
		// One-object batches, submitted while a server hangs.
		probes := settings{jobs: 2 * probesPerHang, batches: 2 * probesPerHang, seed: set.seed}
		more, err := writeDeposits(filepath.Join(dir, "deposits"), r.deposits.URL, probes, set.batches, rng)
		if err != nil {
			t.Fatal(err)
		}
		r.batches = append(r.batches, more...)
	}
	r.deposits.SetDelay(set.depositDelay)
	profiles := filepath.Join(dir, "profiles")
	if err := writeProfile(profiles); err != nil {
		t.Fatal(err)
	}
	replicas := map[string]int{}
	for _, s := range stack.Services {
		replicas[s] = sc.replicas
	}
	servers := r.ens.Addrs()
	if sc.latency != (zktest.Delay{}) {
		servers = nil
		for _, addr := range r.ens.Addrs() {
			p, err := zktest.NewProxy(addr)
			if err != nil {
				t.Fatal(err)
			}
			p.SetDelay(sc.latency, sc.latency)
			r.proxies = append(r.proxies, p)
			servers = append(servers, p.Addr)
		}
	}
	var placements map[stack.Replica]stack.Placement
	if l := sc.partition; l != nil {
		placements = map[stack.Replica]stack.Placement{{Service: "downloader", Index: 0}: {NetNS: l.ns, Addr: l.nsAddr}}
	}
	env := map[string]string{
		"INGESTQ_ZK_SESSION_TIMEOUT": sc.timeout().String(),
		// Two jobs at a time per replica: replicas stay busy, so a
		// kill finds jobs in flight more often than not.
		"INGESTQ_CONCURRENCY": "2",
		// Waits that would otherwise slow the run without testing more.
		"INGESTQ_PROVISION_RETRY":      "1s",
		"INGESTQ_MANIFEST_BACKOFF":     "200ms",
		"INGESTQ_DOWNLOAD_BACKOFF":     "200ms",
		"INGESTQ_DOWNLOAD_BACKOFF_MAX": "2s",
	}
	// With a partition the depositor listens on the veth pair's host end,
	// in 198.18.0.0/15, which the fetch policy does not count as internal:
	// nothing to allow beside the stack's loopback.
	r.stack, err = stack.Start(ctx, stack.Options{
		Dir: dir, BinDir: bin, ProfilesDir: profiles, ZooKeeper: servers, Root: "/chaos",
		Replicas: replicas, AdminToken: adminToken, Placements: placements,
		Env: env,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The test's own session outlives a leader election and a quorum loss.
	if r.q, err = session.Connect(ctx, session.Options{Servers: r.ens.Addrs(), Root: r.stack.Root, SessionTimeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, p := range r.stack.Procs("batcher") {
		conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		r.conns = append(r.conns, conn)
		r.batchers = append(r.batchers, v1.NewBatchServiceClient(conn))
		r.admins = append(r.admins, v1.NewAdminServiceClient(conn))
	}
	r.start = time.Now()
	return r
}

// layout says in words what the run started.
func (r *run) layout() string {
	s := fmt.Sprintf("%d replica(s) of every service", r.sc.replicas)
	if l := r.sc.partition; l != nil {
		s += fmt.Sprintf(", downloader-0 in network namespace %s at %s (ZooKeeper at %s)", l.ns, l.nsAddr, l.hostAddr)
	}
	if d := r.sc.latency; d != (zktest.Delay{}) {
		s += fmt.Sprintf(", ZooKeeper %s–%s away each way", d.Min, max(d.Min, d.Max))
	}
	if r.sc.serverHangs {
		s += fmt.Sprintf(", %d probe batches of one object for the ZooKeeper server hangs", len(r.batches)-r.set.batches)
	}
	if r.sc.sessionTimeout > 0 {
		s += fmt.Sprintf(", session timeout %s", r.sc.sessionTimeout)
	}
	return s
}

// close stops whatever startRun started, each part at most once.
func (r *run) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range r.conns {
		c.Close()
	}
	if r.q != nil {
		r.q.Close()
	}
	if r.stack != nil {
		r.stack.Stop(ctx)
	}
	for _, p := range r.proxies {
		p.Close()
	}
	if r.ens != nil {
		r.ens.Stop()
	}
	if r.deposits != nil {
		r.deposits.Close()
	}
}

// since is how long the run has been going, for the log.
func (r *run) since() string { return time.Since(r.start).Round(100 * time.Millisecond).String() }

// logf logs a line stamped with the run's elapsed time.
func (r *run) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%8s] %s", r.since(), fmt.Sprintf(format, args...))
}

// adminCtx carries the admin token.
func adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
}

// allServing waits until every replica answers its health check.
func (r *run) allServing(ctx context.Context) error {
	for _, s := range stack.Services {
		for _, p := range r.stack.Procs(s) {
			if err := p.WaitServing(ctx); err != nil {
				return fmt.Errorf("after the faults: %w", err)
			}
		}
	}
	for i, s := range r.ens.Servers {
		if err := s.WaitServing(ctx); err != nil {
			return fmt.Errorf("after the faults, ZooKeeper server %d: %w", i+1, err)
		}
	}
	return nil
}

// stopAndCheckLeftovers stops every service (they drain and must exit
// cleanly), then checks that they left no worker entry and fsck finds
// nothing. A replica killed just before keeps its entry until the server
// expires its session: only an entry that outlives that is left over.
func (r *run) stopAndCheckLeftovers(ctx context.Context) error {
	stopCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	stopErr := r.stack.StopServices(stopCtx)
	expiryCtx, cancelExpiry := context.WithTimeout(stopCtx, 3*sessionTimeout+10*time.Second)
	until(expiryCtx, 200*time.Millisecond, func() (bool, error) {
		ws, err := admin.New(r.q).Queue.ListWorkers(expiryCtx)
		return err == nil && len(ws) == 0, nil
	})
	cancelExpiry()
	return errors.Join(stopErr, leftovers.AfterStop(stopCtx, r.q))
}

// sortedKeys lists a map's keys in order, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
