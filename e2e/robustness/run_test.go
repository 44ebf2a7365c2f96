package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/leftovers"
	"github.com/ingestq/ingestq/e2e/robustness/failpoint"
	"github.com/ingestq/ingestq/e2e/robustness/fault"
	"github.com/ingestq/ingestq/e2e/robustness/traffic"
	"github.com/ingestq/ingestq/e2e/robustness/validate"
	"github.com/ingestq/ingestq/e2e/robustness/watch"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Settings of a run, from the environment.
const (
	envSeed  = "ROBUSTNESS_SEED"  // one seed to run (replays a run's schedule)
	envSeeds = "ROBUSTNESS_SEEDS" // seeds to run, comma-separated (make robustness)
	envFull  = "ROBUSTNESS_FULL"  // non-empty: every failpoint and fault each seed, the broken builds, mixed versions
	envKeep  = "ROBUSTNESS_KEEP"  // non-empty: keep the data and logs of a run that passed
)

// sessionTimeout is every service's ZooKeeper session timeout: a stalled
// or frozen replica loses its jobs after it.
const sessionTimeout = 3 * time.Second

// stuckAfter ends a run in which no job changed state for this long while
// work was left: far longer than any fault lasts.
const stuckAfter = 3 * time.Minute

// reportMargin is the time a run leaves, before the test's deadline, for
// its end: the faults' goroutine ending its fault, the checks, the report.
const reportMargin = 5 * time.Minute

const (
	adminToken = "robustness-admin-token"
	shoulder   = "ark:/99999/fk4"
)

// runOpts says what one run starts and does.
type runOpts struct {
	seed    uint64
	plan    fault.Plan
	batches int
	// files: the batches are of one small file each (traffic.PlanFiles).
	files bool
	// bins holds the binaries every replica runs; failpoints says they
	// were built with failpoints.
	bins       string
	failpoints bool
	// mixed, when set, is a second build: half of each service's replicas
	// (index 1) start from it, then every replica is rolled to bins.
	mixed string
	// merritt: the stack stores into a node of Merritt's storage service
	// (the stand-in, shared/merritttest) rather than a folder.
	merritt bool
	// scenario, when set, replaces the seeded schedule (the broken builds'
	// targeted faults).
	scenario func(ctx context.Context, r *run) error
	// replay is the command that runs this run again.
	replay string
}

// run is one robustness run.
type run struct {
	t        *testing.T
	opts     runOpts
	dir      string
	start    time.Time
	ens      *zktest.Ensemble
	proxies  map[string][]*zktest.Proxy
	deposits *depositor.Server
	merritt  *merritttest.Service // the storage service stored into, when opts.merritt
	stack    *stack.Stack
	ports    *freeport.Reservation // the failpoints' endpoints'
	watch    *watch.Recorder
	conn     *zk.Conn         // the checker's own session
	q        *session.Session // for the shared end checks (leftovers)
	peer     *merrittzk.Peer
	traffic  *traffic.Traffic
	clients  traffic.Clients
	conns    []*grpc.ClientConn
	fps      map[string]*failpoint.Client
	env      *fault.Env
	nudge    chan struct{}

	mu       sync.Mutex
	outcomes []fault.Outcome
	// doing is what the faults' goroutine is doing (a fault of the
	// schedule, a replica rolled), since doingSince: what a run stuck
	// waiting for it reports.
	doing      string
	doingSince time.Time
}

// setDoing records what the faults' goroutine is doing.
func (r *run) setDoing(what string) {
	r.mu.Lock()
	r.doing, r.doingSince = what, time.Now()
	r.mu.Unlock()
}

func (r *run) nowDoing() (string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.doing, time.Since(r.doingSince)
}

func (r *run) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%8s] %s", time.Since(r.start).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
}

func adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
}

// startRun starts the ensemble, the depositor's server, the stack (every
// replica reaching ZooKeeper through proxies of its own), the watcher and
// the traffic; the test's cleanup stops them.
func startRun(ctx context.Context, t *testing.T, opts runOpts) *run {
	t.Helper()
	dir, err := testenv.MkdirTemp("ingestq-robustness-")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, opts: opts, dir: dir, start: time.Now(), proxies: map[string][]*zktest.Proxy{}, fps: map[string]*failpoint.Client{},
		nudge: make(chan struct{}, 1)}
	t.Cleanup(func() {
		r.close()
		if t.Failed() || os.Getenv(envKeep) != "" {
			t.Logf("robustness: data and logs kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	if r.ens, err = zktest.StartEnsemble(ctx, filepath.Join(dir, "zookeeper"), 3, zktest.Options{NoSync: true, JVMHeap: "256m"}); err != nil {
		t.Fatal(err)
	}
	if r.deposits, err = depositor.Start(filepath.Join(dir, "deposits")); err != nil {
		t.Fatal(err)
	}
	r.deposits.SetDelay(200 * time.Millisecond)
	// A file's first answer is cut after 48 KiB, and downloads sync every
	// 32 KiB: medium (64 KiB) and large (1 MiB) files resume, from a range
	// or from a partial file, under every fault.
	r.deposits.SetCutFirst(48 << 10)
	rng := rand.New(rand.NewPCG(opts.seed, 1))
	batches := traffic.Plan(rng, opts.seed, opts.batches)
	if opts.files {
		batches = traffic.PlanFiles(opts.seed, opts.batches)
	}
	// One more batch for each failpoint, sent as it is armed.
	batches = traffic.PlanReserve(opts.seed, batches, len(opts.plan.Points))
	if err := traffic.Write(filepath.Join(dir, "deposits"), r.deposits.URL, rng, batches); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, traffic.Profile+".yaml"),
		[]byte(traffic.ProfileYAML(r.deposits.URL+depositor.CallbackPath)), 0o644); err != nil {
		t.Fatal(err)
	}

	// Each replica: its proxies to the ensemble, its failpoint endpoint.
	replicas := map[string]int{}
	replicaEnv := map[stack.Replica]map[string]string{}
	replicaBin := map[stack.Replica]string{}
	// Held until the run ends: no other reservation, the stack's
	// included, is given these ports.
	r.ports = freeport.Reserve()
	ports, err := r.ports.Take(len(stack.Services) * 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stack.Services {
		replicas[s] = 2
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", s, i)
			var servers []string
			for _, addr := range r.ens.Addrs() {
				p, err := zktest.NewProxy(addr)
				if err != nil {
					t.Fatal(err)
				}
				r.proxies[name] = append(r.proxies[name], p)
				servers = append(servers, p.Addr)
			}
			env := map[string]string{"INGESTQ_ZK_SERVERS": strings.Join(servers, ",")}
			if opts.failpoints {
				env["GOFAIL_HTTP"] = ports[0].String()
				r.fps[name] = failpoint.NewClient(ports[0].String())
			}
			ports = ports[1:]
			replicaEnv[stack.Replica{Service: s, Index: i}] = env
			if opts.mixed != "" && i == 1 {
				replicaBin[stack.Replica{Service: s, Index: i}] = opts.mixed
			}
		}
	}
	env := map[string]string{}
	if opts.merritt {
		if r.merritt, err = merritttest.Run(merrittNode); err != nil {
			t.Fatal(err)
		}
		// A call held past its timeout ends soon, and is tried again soon.
		env = map[string]string{"INGESTQ_STORE": "merritt", "INGESTQ_MERRITT_STORAGE_URL": r.merritt.URL,
			"INGESTQ_MERRITT_NODE": strconv.Itoa(merrittNode), "INGESTQ_MERRITT_TIMEOUT": "5s",
			"INGESTQ_MERRITT_RETRY_BACKOFF": "200ms", "INGESTQ_FIXITY_AUDIT_INTERVAL": "0"}
	}
	r.stack, err = stack.Start(ctx, stack.Options{
		Dir: dir, BinDir: opts.bins, ProfilesDir: profiles, ZooKeeper: r.ens.Addrs(), Root: "/robust",
		Replicas: replicas, AdminToken: adminToken, ReplicaEnv: replicaEnv, ReplicaBinDir: replicaBin,
		Env: withEnv(env, map[string]string{
			"INGESTQ_ZK_SESSION_TIMEOUT":   sessionTimeout.String(),
			"INGESTQ_CONCURRENCY":          "2",
			"INGESTQ_MINT_SHOULDER":        shoulder,
			"INGESTQ_PROVISION_RETRY":      "1s",
			"INGESTQ_MANIFEST_BACKOFF":     "200ms",
			"INGESTQ_DOWNLOAD_BACKOFF":     "200ms",
			"INGESTQ_DOWNLOAD_BACKOFF_MAX": "2s",
			"INGESTQ_DOWNLOAD_SYNC_BYTES":  "32768",
			"INGESTQ_CALLBACK_BACKOFF":     "200ms",
			// No console: the suite's traffic goes through the APIs, and
			// neither the failpoint builds nor the baseline's build have one.
			"INGESTQ_CONSOLE_LISTEN": "",
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if r.watch, err = watch.Start(ctx, r.ens.Addrs(), r.stack.Root, log); err != nil {
		t.Fatal(err)
	}
	if r.conn, _, err = zk.Connect(r.ens.Addrs(), 20*time.Second, zk.WithLogger(watch.Quiet{})); err != nil {
		t.Fatal(err)
	}
	if r.q, err = session.Connect(ctx, session.Options{Servers: r.ens.Addrs(), Root: r.stack.Root, SessionTimeout: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	r.peer = merrittzk.Connect(t, r.ens.Addrs(), r.stack.Root)
	r.clients.AdminCtx = adminCtx
	for _, s := range []string{"batcher", "recorder"} {
		for _, p := range r.stack.Procs(s) {
			conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			r.conns = append(r.conns, conn)
			if s == "batcher" {
				r.clients.Batchers = append(r.clients.Batchers, v1.NewBatchServiceClient(conn))
				r.clients.Admins = append(r.clients.Admins, v1.NewAdminServiceClient(conn))
			} else {
				r.clients.Recorders = append(r.clients.Recorders, v1.NewRecordingServiceClient(conn))
			}
		}
	}
	r.traffic = traffic.New(r.clients, batches, r.deposits.URL, r.peer, r.stack.InventoryDB, opts.seed, r.logf)
	r.env = &fault.Env{Stack: r.stack, Ensemble: r.ens, Proxies: r.proxies, Failpoints: r.fps, SessionTimeout: sessionTimeout,
		Merritt: r.merritt, Logf: r.logf, Nudge: func() {
			select {
			case r.nudge <- struct{}{}:
			default:
			}
		}}
	if !opts.failpoints {
		r.env.Failpoints = nil
	}
	r.start = time.Now()
	return r
}

func (r *run) close() {
	for _, c := range r.conns {
		c.Close()
	}
	if r.watch != nil {
		r.watch.Stop()
	}
	if r.conn != nil {
		r.conn.Close()
	}
	if r.q != nil {
		r.q.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r.stack != nil {
		r.stack.Stop(ctx)
	}
	if r.ports != nil {
		r.ports.Close()
	}
	for _, ps := range r.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
	if r.ens != nil {
		r.ens.Stop()
	}
	if r.deposits != nil {
		r.deposits.Close()
	}
	if r.merritt != nil {
		r.merritt.Close()
	}
}

// merrittNode is the storage node a run storing into Merritt's storage
// service stores into.
const merrittNode = 9501

// withEnv is base with extra's settings added (extra's win).
func withEnv(extra, base map[string]string) map[string]string {
	for k, v := range extra {
		base[k] = v
	}
	return base
}

// schedule makes the run's faults one after another, as the seed ordered
// them.
func (r *run) schedule(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(r.opts.seed, 13))
	faults := fault.Schedule(r.opts.seed, r.opts.plan)
	for i, f := range faults {
		r.setDoing(fmt.Sprintf("the pause before fault %d of %d (%s)", i+1, len(faults), f))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(300+rng.IntN(1200)) * time.Millisecond):
		}
		r.setDoing(fmt.Sprintf("fault %d of %d: %s", i+1, len(faults), f))
		out, err := r.env.Make(ctx, rng, f)
		r.mu.Lock()
		r.outcomes = append(r.outcomes, out)
		r.mu.Unlock()
		detail := out.Detail
		if out.Replica != "" {
			detail = out.Replica + " " + detail
		}
		r.logf("fault: %s: %s (%s)", f, strings.TrimSpace(detail), out.Took.Round(100*time.Millisecond))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

// roll restarts every replica started from the mixed build with bins, one
// by one, as a rolling update does: each stopped (SIGTERM, its drain),
// started from the new build and serving before the next.
func (r *run) roll(ctx context.Context) error {
	for _, s := range stack.Services {
		for _, p := range r.stack.Procs(s) {
			if filepath.Dir(p.Bin()) != r.opts.mixed {
				continue
			}
			r.setDoing(fmt.Sprintf("rolling %s-%d to the current build", s, p.Index))
			stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
			err := p.Stop(stopCtx)
			cancel()
			if err != nil {
				r.logf("rolling %s-%d: %v", s, p.Index, err)
			}
			p.UseBinDir(r.opts.bins)
			if err := p.Restart(ctx); err != nil {
				return fmt.Errorf("rolling %s-%d to the current build: %w", s, p.Index, err)
			}
			r.logf("rolled %s-%d to the current build", s, p.Index)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(2 * time.Second):
			}
		}
	}
	return nil
}

// progress is one reading of what a run waits for.
type progress struct {
	// moved changes whenever anything moved: a job's state, a batch
	// submitted, the faults' goroutine's step, a batch's state.
	moved string
	// waits is what is left to wait for, in words; none: the work is done.
	waits []string
}

// waitProgress reads progress every second until nothing is left to wait
// for. It ends with an error naming what is left when nothing moved for
// stuck, or when ctx ends; and with read's error when read fails.
func waitProgress(ctx context.Context, stuck time.Duration, read func(context.Context) (progress, error)) error {
	var last string
	lastChange := time.Now()
	for first := true; ; first = false {
		p, err := read(ctx)
		if err != nil {
			return err
		}
		if len(p.waits) == 0 {
			return nil
		}
		if first || p.moved != last {
			last, lastChange = p.moved, time.Now()
		}
		if time.Since(lastChange) >= stuck {
			return fmt.Errorf("stuck: nothing moved for %s; waiting for %s", stuck, strings.Join(p.waits, "; "))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the work did not end in time (%w); waiting for %s", ctx.Err(), strings.Join(p.waits, "; "))
		case <-time.After(time.Second):
		}
	}
}

// waitDone waits until the traffic has been submitted (submitted closed),
// the faults have ended (faultsDone closed) and every batch has ended as
// it must: each completed, the doomed one failed and deleted. A stuck or
// late run's error says what it waited for. A submission that failed
// (*submitErr, set before submitted is closed) ends the wait at once.
func (r *run) waitDone(ctx context.Context, submitted, faultsDone <-chan struct{}, submitErr *error) error {
	err := waitProgress(ctx, stuckAfter, func(ctx context.Context) (progress, error) {
		counts := r.stateCounts()
		p := progress{moved: "jobs by state: " + counts}
		select {
		case <-submitted:
			if *submitErr != nil {
				return p, errors.New("the traffic's submission ended early")
			}
		default:
			n := 0
			for i := range r.traffic.Batches() {
				if _, ok := r.traffic.Bid(i); ok {
					n++
				}
			}
			p.moved += fmt.Sprintf("; %d submitted", n)
			p.waits = append(p.waits, "the traffic: "+r.traffic.Awaiting())
		}
		select {
		case <-faultsDone:
		default:
			doing, since := r.nowDoing()
			p.moved += "; " + doing
			p.waits = append(p.waits, fmt.Sprintf("the faults: %s (for %s)", doing, since.Round(time.Second)))
		}
		if len(p.waits) > 0 {
			// The batches are read once the traffic and the faults are
			// done; until then the jobs' states say whether work moves.
			return p, nil
		}
		for _, w := range r.unended(ctx) {
			p.moved += "; " + w.state
			p.waits = append(p.waits, w.words)
		}
		return p, nil
	})
	if err != nil {
		return fmt.Errorf("%w (jobs by state %s; locks: %v)", err, r.stateCounts(), leftovers.Locks(ctx, r.q))
	}
	return nil
}

// stateCounts reads the jobs in each state folder, in words.
func (r *run) stateCounts() string {
	states, _, err := r.conn.Children(r.stack.Root + "/jobs/states")
	if err != nil {
		return "unknown: " + err.Error()
	}
	slices.Sort(states)
	var parts []string
	for _, s := range states {
		if n, _, err := r.conn.Children(r.stack.Root + "/jobs/states/" + s); err == nil && len(n) > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, len(n)))
		}
	}
	return strings.Join(parts, ", ")
}

// batchWait is a batch that has not ended as it must.
type batchWait struct {
	state string // its id and state, for progress
	words string // what the run waits for, for a report
}

// unended lists the batches not ended as they must: each completed, the
// doomed one failed and deleted by the operator.
func (r *run) unended(ctx context.Context) []batchWait {
	var out []batchWait
	for i, b := range r.traffic.Batches() {
		bid, ok := r.traffic.Bid(i)
		if !ok {
			out = append(out, batchWait{state: b.UUID + " unsubmitted", words: fmt.Sprintf("batch %d (%s): its submission", i+1, b.UUID)})
			continue
		}
		if b.Doomed && r.traffic.Deleted(bid) {
			continue
		}
		cctx, cancel := context.WithTimeout(adminCtx(ctx), 5*time.Second)
		resp, err := r.clients.Admins[i%len(r.clients.Admins)].GetBatch(cctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
		cancel()
		st := resp.GetBatch().GetStatus().GetStatus()
		state := queue.BatchStateName(st)
		if err != nil {
			state = "unread (" + status.Code(err).String() + ")"
		}
		switch {
		case b.Doomed:
			out = append(out, batchWait{state: bid + " " + state,
				words: fmt.Sprintf("batch %s (its payload missing) to fail and be deleted by the operator: its state is %s", bid, state)})
		case err != nil || st != v1.BatchState_BATCH_STATE_COMPLETED:
			if err != nil {
				state += ": " + err.Error()
			}
			out = append(out, batchWait{state: bid + " " + state, words: fmt.Sprintf("batch %s to complete: its state is %s", bid, state)})
		}
	}
	return out
}

// result is what a run ends with.
type result struct {
	report   *validate.Report
	outcomes []fault.Outcome
	err      error // the run itself failed (stuck, a fault not undone)
}

// do runs the traffic and the faults until the work is done, then checks.
func (r *run) do(ctx context.Context) result {
	work, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	submitted := make(chan struct{})
	faultsDone := make(chan struct{})
	var submitErr, faultErr error
	// Batches keep coming through the faults: the first spaced over the
	// schedule's expected length (about 10 s a fault), one more each time
	// a failpoint is armed.
	faults := len(fault.Schedule(r.opts.seed, r.opts.plan))
	reserve := len(r.opts.plan.Points)
	spacing := min(20*time.Second, max(3*time.Second, time.Duration(faults)*10*time.Second/time.Duration(max(1, r.opts.batches))))
	wg.Go(func() {
		defer close(submitted)
		submitErr = r.traffic.Submit(work, spacing, reserve, r.nudge, faultsDone)
	})
	wg.Go(func() { r.traffic.Operate(work) })
	wg.Go(func() { r.traffic.Record(work) })
	r.setDoing("the first fault")
	wg.Go(func() {
		defer close(faultsDone)
		switch {
		case r.opts.scenario != nil:
			r.setDoing("the run's scenario")
			faultErr = r.opts.scenario(work, r)
		case r.opts.mixed != "":
			if faultErr = r.schedule(work); faultErr == nil {
				faultErr = r.roll(work)
			}
		default:
			faultErr = r.schedule(work)
		}
	})
	// The wait ends in time for the checks to report before the test's
	// deadline.
	waitCtx := work
	if d, ok := r.t.Deadline(); ok {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(work, d.Add(-reportMargin))
		defer cancel()
	}
	doneErr := r.waitDone(waitCtx, submitted, faultsDone, &submitErr)
	stop()
	wg.Wait()
	res := result{outcomes: r.outcomes}
	if err := errors.Join(doneErr, submitErr, faultErr); err != nil {
		res.err = err
	}
	// The checks read a pipeline at rest: every replica serving, no lock
	// left once a dead holder's session has expired.
	for _, s := range stack.Services {
		for _, p := range r.stack.Procs(s) {
			if err := p.WaitServing(ctx); err != nil {
				res.err = errors.Join(res.err, err)
			}
		}
	}
	lockCtx, cancel := context.WithTimeout(ctx, 10*sessionTimeout+30*time.Second)
	for leftovers.Locks(lockCtx, r.q) != nil {
		select {
		case <-lockCtx.Done():
		case <-time.After(500 * time.Millisecond):
			continue
		}
		break
	}
	cancel()
	if err := leftovers.Locks(ctx, r.q); err != nil {
		res.err = errors.Join(res.err, fmt.Errorf("locks left once the work was done: %w", err))
	}
	if err := r.checkFsck(ctx); err != nil {
		res.err = errors.Join(res.err, err)
	}
	rep, err := validate.Check(ctx, validate.Input{Traffic: r.traffic, Watch: r.watch, Conn: r.conn, Root: r.stack.Root,
		StoreRoot: r.stack.StoreRoot, Merritt: r.merritt, MerrittNode: merrittNode, Inventory: r.stack.InventoryDB, OutboxDir: r.stack.OutboxDir, Callbacks: r.deposits.Callbacks(),
		Shoulder: shoulder, PorcupineDir: r.dir, Replicas: r.replicaSessions()})
	if err != nil {
		res.err = errors.Join(res.err, fmt.Errorf("the checker could not read: %w", err))
	}
	res.report = rep
	stopCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.stack.StopServices(stopCtx); err != nil {
		res.err = errors.Join(res.err, err)
	}
	return res
}

// replicaSessions maps each ZooKeeper session a replica's log says it
// established to that replica ("recorder-1").
func (r *run) replicaSessions() map[int64]string {
	out := map[int64]string{}
	logs, _ := filepath.Glob(filepath.Join(r.stack.LogDir, "*.log"))
	for _, p := range logs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		replica := strings.TrimSuffix(filepath.Base(p), ".log")
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, `"msg":"zookeeper session established"`) {
				continue
			}
			var l struct {
				Session string `json:"session"`
			}
			if json.Unmarshal([]byte(line), &l) == nil {
				if id, err := strconv.ParseInt(strings.TrimPrefix(l.Session, "0x"), 16, 64); err == nil {
					out[id] = replica
				}
			}
		}
	}
	return out
}

// checkFsck runs fsck over the tree at rest, with no grace: every node a
// writer left half-made is damage, however fresh (the janitor's grace is
// far longer than a run, so what it would reclaim is still there).
func (r *run) checkFsck(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep, err := admin.New(r.q).Queue.Fsck(cctx, admin.FsckOptions{Grace: time.Nanosecond})
	if err != nil {
		return fmt.Errorf("fsck: %w", err)
	}
	if !rep.Clean() {
		var ds []string
		for _, d := range rep.Damages {
			ds = append(ds, fmt.Sprintf("%s %s: %s", d.Kind, d.Item, d.Detail))
		}
		return fmt.Errorf("fsck found damage: %d finding(s): %s", len(ds), strings.Join(ds[:min(10, len(ds))], "; "))
	}
	return nil
}

// reclaims counts, in the replicas' logs, what was removed as garbage: by
// the janitor (nodes, by kind), and by batchers ending a batch's spawning
// (job ids an earlier batcher reserved and never wrote).
func (r *run) reclaims() (janitor map[string]int, strays int) {
	logs, _ := filepath.Glob(filepath.Join(r.stack.LogDir, "batcher-*.log"))
	return reclaimsLogged(logs)
}

// reclaimsLogged counts what the batchers whose logs are at paths logged
// as removed: see run.reclaims.
func reclaimsLogged(paths []string) (janitor map[string]int, strays int) {
	janitor = map[string]int{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			var l struct {
				Msg  string `json:"msg"`
				Kind string `json:"kind"`
				Jobs int    `json:"jobs"`
			}
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch l.Msg {
			case "queue garbage reclaimed":
				janitor[l.Kind]++
			case "job ids reserved and never written removed":
				strays += l.Jobs
			}
		}
	}
	return janitor, strays
}

// logReport logs a run's figures, faults and violations, with the command
// that replays it.
func (r *run) logReport(res result) {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "robustness report (seed %d)\n", r.opts.seed)
	fmt.Fprintf(&b, "  replay:      %s\n", r.opts.replay)
	fmt.Fprintf(&b, "  took:        %s\n", time.Since(r.start).Round(time.Second))
	fmt.Fprintf(&b, "  traffic:     %d batches (%s); operator and external inventory: %s\n", len(r.traffic.Batches()), batchKinds(r.traffic.Batches()), r.traffic.ActionsLine())
	for _, o := range res.outcomes {
		state := "made"
		if o.Fault.Kind == fault.Failpoint {
			state = "not reached"
			if o.Reached {
				state = "reached on " + o.Replica
			}
		} else if o.Replica != "" {
			state = "on " + o.Replica
		}
		fmt.Fprintf(&b, "  fault:       %s: %s %s\n", o.Fault, state, o.Detail)
	}
	if rep := res.report; rep != nil {
		keys := make([]string, 0, len(rep.Figures))
		for k := range rep.Figures {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  figure:      %s: %d\n", k, rep.Figures[k])
		}
		for _, n := range rep.Notes {
			fmt.Fprintf(&b, "  note:        %s\n", n)
		}
		fmt.Fprintf(&b, "  violations:  %d\n", len(rep.Violations))
		for _, v := range rep.Violations {
			fmt.Fprintf(&b, "    %s\n", v)
		}
	}
	janitor, strays := r.reclaims()
	fmt.Fprintf(&b, "  reclaims:    %d job id(s) reserved and never written removed by batchers ending a spawn; by the janitor: %d %v\n",
		strays, sumCounts(janitor), janitor)
	if res.err != nil {
		fmt.Fprintf(&b, "  run error:   %v\n", res.err)
	}
	r.t.Log(b.String())
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func batchKinds(bs []*traffic.Batch) string {
	var parts []string
	for _, b := range bs {
		k := strings.ToLower(strings.TrimPrefix(b.Type.String(), "PAYLOAD_TYPE_")) + "/" + b.Size
		switch {
		case b.Peer:
			k += " (Merritt library)"
		case b.Doomed:
			k += " (doomed)"
		}
		parts = append(parts, k)
	}
	return strings.Join(parts, ", ")
}

// The builds the tests share, each made once per test binary; TestMain
// removes them.
var builds = struct {
	sync.Mutex
	root string
	by   map[string]*builtOnce
}{by: map[string]*builtOnce{}}

type builtOnce struct {
	once sync.Once
	dir  string
	err  error
}

// build makes (once) the build called name into a folder of its own.
func build(ctx context.Context, name string, make func(ctx context.Context, dir string) error) (string, error) {
	builds.Lock()
	if builds.root == "" {
		root, err := testenv.MkdirTemp("ingestq-robustness-builds-")
		if err != nil {
			builds.Unlock()
			return "", err
		}
		builds.root = root
	}
	b, ok := builds.by[name]
	if !ok {
		b = &builtOnce{dir: filepath.Join(builds.root, name)}
		builds.by[name] = b
	}
	builds.Unlock()
	b.once.Do(func() {
		if err := make(ctx, b.dir); err != nil {
			b.err = fmt.Errorf("building %s: %w", name, err)
		}
	})
	return b.dir, b.err
}

// repoRoot is the repository's top folder (the tests run in e2e/robustness).
func repoRoot() string { return filepath.Join("..", "..") }

// gofailVersion is the failpoint tool the robustness build uses.
const gofailVersion = "v0.2.0"

// buildFailpoints builds the services with failpoints (make
// build-failpoints), with patches applied first.
func buildFailpoints(ctx context.Context, dir string, patches ...string) error {
	gofail := os.Getenv("GOFAIL") // make robustness installs it
	tools, err := build(ctx, "tools", func(ctx context.Context, dir string) error {
		if gofail != "" {
			return nil
		}
		cmd := exec.CommandContext(ctx, "go", "install", "go.etcd.io/gofail@"+gofailVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing gofail: %w\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		return err
	}
	args := []string{dir}
	for _, p := range patches {
		args = append(args, filepath.Join(root, "e2e", "robustness", "broken", p))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "build-failpoints.sh"), args...)
	if gofail == "" {
		gofail = filepath.Join(tools, "gofail")
	} else if gofail, err = filepath.Abs(gofail); err != nil {
		return err
	}
	cmd.Env = append(os.Environ(), "GOFAIL="+gofail)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

func TestMain(m *testing.M) {
	testenv.Isolate()
	code := m.Run()
	if builds.root != "" {
		os.RemoveAll(builds.root)
	}
	os.Exit(code)
}
