// Package bench measures ingestq against a ZooKeeper: the queue library on
// its own (job creation, a lifecycle through every state, pick-up latency,
// the cost of a deep queue, cleanup) and the seven services as processes
// (end-to-end throughput, memory), each beside the server's own ceiling
// measured in the same run. `make bench` runs it (bench_test.go).
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// pipeline is each working state and where a successful step leads.
var pipeline = []struct{ from, to queue.JobState }{
	{queue.Pending, queue.Estimating}, {queue.Estimating, queue.Provisioning}, {queue.Provisioning, queue.Downloading},
	{queue.Downloading, queue.Processing}, {queue.Processing, queue.Storing}, {queue.Storing, queue.Recording},
	{queue.Recording, queue.Notify}, {queue.Notify, queue.Completed},
}

// transitionsPerJob is how many state changes take a job from Pending to
// Completed: the ceiling's transitions/s over it are the most jobs/s the
// server could move.
var transitionsPerJob = float64(len(pipeline))

// Connect opens a quiet client on a root of its own.
func Connect(ctx context.Context, servers []string, root string) (*session.Session, error) {
	return connect(ctx, servers, root, false)
}

func connect(ctx context.Context, servers []string, root string, ungrouped bool) (*session.Session, error) {
	return session.Connect(ctx, session.Options{Servers: servers, Root: root, SessionTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Ungrouped: ungrouped})
}

func root(name string) string { return fmt.Sprintf("/bench-%s-%d", name, time.Now().UnixNano()) }

// Spawn creates one batch of n jobs in Pending (all jobs created before it
// returns) and returns its bid.
func Spawn(ctx context.Context, c *session.Session, n int) (string, error) {
	bid, err := batches.New(c).CreateBatch(ctx, &v1.Submission{ProfileName: "bench", Submitter: "bench",
		PayloadUrl: "http://127.0.0.1:1/bench", Type: v1.PayloadType_PAYLOAD_TYPE_FILE})
	if err != nil {
		return "", err
	}
	bc, err := batches.New(c).ClaimBatch(ctx, bid)
	if err != nil {
		return "", err
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		return "", err
	}
	const chunk = 10000
	for start := 0; start < n; start += chunk {
		jobs := make([]batches.NewJob, min(chunk, n-start))
		for i := range jobs {
			jobs[i] = batches.NewJob{Priority: queue.DefaultPriority, Configuration: &v1.JobConfiguration{
				ProfileName: "bench", Submitter: "bench", PayloadUrl: "http://127.0.0.1:1/f",
				PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE, BatchEntry: int32(start + i)}}
		}
		if _, err := bc.CreateJobs(ctx, jobs); err != nil {
			return "", err
		}
	}
	return bid, bc.FinishSpawning(ctx)
}

// Create measures one batch of n jobs created (jobs/s).
func Create(ctx context.Context, servers []string, n int) (float64, error) {
	c, err := Connect(ctx, servers, root("create"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	if _, err := Spawn(ctx, c, n); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Lifecycle drives n jobs from Pending to Completed through every state,
// each state served as a stage service serves it: its own session, one
// Consumer, perState goroutines sharing it. It returns jobs/s. Ungrouped
// sends each claim and commit as a request of its own (session.Options).
func Lifecycle(ctx context.Context, servers []string, n, perState int, ungrouped bool) (float64, error) {
	res, err := LifecycleCPU(ctx, servers, 0, n, perState, ungrouped)
	return res.JobsPerSecond, err
}

// LifecycleResult is what one Lifecycle run measured: its throughput and,
// over the same time (the jobs' creation aside), the CPU one job cost the
// server and this process (the queue clients of every state).
type LifecycleResult struct {
	JobsPerSecond        float64
	ServerCPU, ClientCPU time.Duration // per job; 0 when not measured
}

// LifecycleCPU is Lifecycle measuring the CPU per job of the server whose
// process is serverPID (none with 0) and of this process.
func LifecycleCPU(ctx context.Context, servers []string, serverPID, n, perState int, ungrouped bool) (LifecycleResult, error) {
	return lifecycleAt(ctx, servers, root("life"), serverPID, n, perState, ungrouped)
}

// lifecycleAt is LifecycleCPU with the queue under root r.
func lifecycleAt(ctx context.Context, servers []string, r string, serverPID, n, perState int, ungrouped bool) (LifecycleResult, error) {
	var res LifecycleResult
	admin, err := Connect(ctx, servers, r)
	if err != nil {
		return res, err
	}
	defer admin.Close()
	if _, err := Spawn(ctx, admin, n); err != nil {
		return res, err
	}
	var clients []*session.Session
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range pipeline {
		c, err := connect(ctx, servers, r, ungrouped)
		if err != nil {
			return res, err
		}
		clients = append(clients, c)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var done sync.WaitGroup
	done.Add(n)
	var wg sync.WaitGroup
	cpu := func() (server, client time.Duration) {
		if serverPID != 0 {
			server, _ = ProcessCPU(serverPID)
		}
		client, _ = ProcessCPU(os.Getpid())
		return server, client
	}
	server0, client0 := cpu()
	start := time.Now()
	for i, p := range pipeline {
		co := jobs.New(clients[i]).NewConsumer(p.from, jobs.ConsumerOptions{Parts: queue.PartsStatusOnly})
		for range perState {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					cl, err := co.Next(ctx)
					if err != nil {
						return
					}
					if err := cl.Commit(ctx, jobs.Change{To: p.to}); err != nil {
						cancel(fmt.Errorf("commit %s → %s: %w", cl.ID(), queue.JobStateName(p.to), err))
						return
					}
					if p.to == queue.Completed {
						done.Done()
					}
				}
			}()
		}
	}
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		wg.Wait()
		return res, context.Cause(ctx)
	}
	elapsed := time.Since(start)
	server1, client1 := cpu()
	cancel(nil)
	wg.Wait()
	res.JobsPerSecond = float64(n) / elapsed.Seconds()
	if serverPID != 0 {
		res.ServerCPU = (server1 - server0) / time.Duration(n)
	}
	res.ClientCPU = (client1 - client0) / time.Duration(n)
	return res, nil
}

// Pickup measures, rounds times, how long a job moved into a state takes
// to reach one of several waiting consumers (from the start of the commit
// that moves it in, so the figure includes that commit's round trip).
func Pickup(ctx context.Context, servers []string, rounds, waiting int) (p50, p99 time.Duration, err error) {
	r := root("pickup")
	producer, err := Connect(ctx, servers, r)
	if err != nil {
		return 0, 0, err
	}
	defer producer.Close()
	if _, err := Spawn(ctx, producer, rounds); err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sent atomic.Int64
	got := make(chan time.Duration, rounds)
	var wg sync.WaitGroup
	for range waiting {
		c, err := Connect(ctx, servers, r)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		co := jobs.New(c).NewConsumer(queue.Estimating, jobs.ConsumerOptions{Parts: queue.PartsStatusOnly})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cl, err := co.Next(ctx)
				if err != nil {
					return
				}
				got <- time.Since(time.Unix(0, sent.Load()))
				cl.Commit(ctx, jobs.Change{To: queue.Provisioning})
			}
		}()
	}
	co := jobs.New(producer).NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1, Parts: queue.PartsStatusOnly})
	lat := make([]time.Duration, 0, rounds)
	for range rounds {
		cl, err := co.Next(ctx)
		if err != nil {
			return 0, 0, err
		}
		sent.Store(time.Now().UnixNano())
		if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
			return 0, 0, err
		}
		lat = append(lat, <-got)
	}
	cancel()
	wg.Wait()
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// Depth measures the cost of taking a job with depth jobs waiting in the
// state. A fresh consumer's first take also lists the state (once, then it
// follows the folder's changes): that take is returned alone, as first.
// each is the mean time of a running consumer's takes, from asking for the
// next job to holding it, each committed onward before the next: rounds
// rounds of takes jobs, the state refilled to depth before each, the first
// take of a round untimed (it may relist the folder the refill changed).
// The mean is over every timed take of every round: a running consumer
// relists its folder now and then (at most every ten listing times), and
// at depth that listing is what a take costs more, spread over the takes
// between two listings, as a single round of a hundred takes would not.
//
// listings is how many times the consumer listed the state meanwhile.
func Depth(ctx context.Context, servers []string, depth, takes, rounds int) (first, each time.Duration, listings int64, err error) {
	if takes < 2 || takes > depth || rounds < 1 {
		// The take after the last job would wait for a job that never comes.
		return 0, 0, 0, fmt.Errorf("depth %d: %d takes in %d rounds, want 2 to the jobs waiting, in 1 or more", depth, takes, rounds)
	}
	c, err := Connect(ctx, servers, root(fmt.Sprintf("depth%d", depth)))
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	if _, err := Spawn(ctx, c, depth); err != nil {
		return 0, 0, 0, err
	}
	listed := func() int64 {
		for _, r := range c.Requests() {
			if r.Op == "children" && r.Node == "jobs/states/*" {
				return r.Count
			}
		}
		return 0
	}
	before := listed()
	co := jobs.New(c).NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartsStatusOnly})
	var total time.Duration
	for r := range rounds {
		if r > 0 {
			if _, err := Spawn(ctx, c, takes); err != nil {
				return 0, 0, 0, err
			}
		}
		for i := range takes {
			start := time.Now()
			cl, err := co.Next(ctx)
			if err != nil {
				return 0, 0, 0, err
			}
			switch {
			case i > 0:
				total += time.Since(start)
			case r == 0:
				first = time.Since(start)
			}
			if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	return first, total / time.Duration(rounds*(takes-1)), listed() - before, nil
}

// Cleanup creates batches completed batches of jobsEach jobs and measures
// how many a cleanup removes per second.
func Cleanup(ctx context.Context, servers []string, batches, jobsEach int) (float64, error) {
	c, err := Connect(ctx, servers, root("cleanup"))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	for range batches {
		bid, err := Spawn(ctx, c, jobsEach)
		if err != nil {
			return 0, err
		}
		if err := complete(ctx, c, bid); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	res, err := admin.New(c).Batches.Cleanup(ctx, 0, 0)
	if err != nil {
		return 0, err
	}
	if len(res.Batches) != batches {
		return 0, fmt.Errorf("cleanup removed %d batches, want %d", len(res.Batches), batches)
	}
	return float64(batches) / time.Since(start).Seconds(), nil
}

// complete drives every job of a batch to Completed and reports the batch.
func complete(ctx context.Context, c *session.Session, bid string) error {
	refs, err := jobs.NewReader(c).BatchJobIDs(ctx, bid)
	if err != nil {
		return err
	}
	for _, jid := range refs["batch-processing"] {
		for _, p := range pipeline {
			cl, err := jobs.New(c).ClaimJob(ctx, jid)
			if err != nil {
				return err
			}
			if err := cl.Commit(ctx, jobs.Change{To: p.to}); err != nil {
				return err
			}
		}
	}
	bc, err := batches.New(c).ClaimBatch(ctx, bid)
	if err != nil {
		return err
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		return err
	}
	return bc.Commit(ctx, batches.BatchChange{To: queue.BatchCompleted})
}

// Ceiling is the fastest the server moves jobs at all: workers each move
// one job between two folders with a 3-operation multi (set status, delete
// the old entry, create the new one) as fast as the server accepts.
// It returns transitions/s and how many were made.
func Ceiling(ctx context.Context, servers []string, conns, workers int, d time.Duration) (float64, int64, error) {
	var cs []*zk.Conn
	for range conns {
		c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		cs = append(cs, c)
	}
	r := root("ceiling")
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{r, r + "/a", r + "/b", r + "/jobs"} {
		if _, err := cs[0].Create(p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return 0, 0, err
		}
	}
	var ops atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[w%len(cs)]
			job := fmt.Sprintf("%s/jobs/j%d", r, w)
			c.Create(job, []byte(`{"status":"Pending"}`), 0, acl)
			c.Create(fmt.Sprintf("%s/a/05-j%d", r, w), nil, 0, acl)
			from, to := "a", "b"
			for time.Now().Before(deadline) && ctx.Err() == nil {
				_, err := c.Multi(
					&zk.SetDataRequest{Path: job, Data: []byte(`{"status":"Next","last_successful_status":"Prev","retry_count":0}`), Version: -1},
					&zk.DeleteRequest{Path: fmt.Sprintf("%s/%s/05-j%d", r, from, w), Version: -1},
					&zk.CreateRequest{Path: fmt.Sprintf("%s/%s/05-j%d", r, to, w), Acl: acl},
				)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				ops.Add(1)
				from, to = to, from
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, 0, err
	}
	return float64(ops.Load()) / d.Seconds(), ops.Load(), nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// ServerCounters are the counters of a server's mntr that the benchmarks
// divide by the jobs of a run: what each job cost the server.
type ServerCounters struct {
	Requests int64 // zk_packets_received: requests, round trips
	Fsyncs   int64 // zk_cnt_fsynctime: transaction log syncs
}

// ReadServerCounters reads a server's counters (mntr) now.
func ReadServerCounters(addr string) (ServerCounters, error) {
	out, err := zktest.FourLetter(addr, "mntr")
	if err != nil {
		return ServerCounters{}, err
	}
	var sc ServerCounters
	fields := map[string]*int64{"zk_packets_received": &sc.Requests, "zk_cnt_fsynctime": &sc.Fsyncs}
	seen := 0
	for _, line := range strings.Split(out, "\n") {
		name, v, _ := strings.Cut(line, "\t")
		if dst, ok := fields[name]; ok {
			if *dst, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64); err != nil {
				return sc, fmt.Errorf("mntr of %s: %s: %w", addr, name, err)
			}
			seen++
		}
	}
	if seen != len(fields) {
		return sc, fmt.Errorf("mntr of %s lacks some of %v", addr, slices.Collect(maps.Keys(fields)))
	}
	return sc, nil
}
