package queue

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/zktest"
)

// BenchmarkQueue measures, in one run against one ZooKeeper started for it
// (with fsync on, as in production), what the foundation issue asks:
//
//	create     one batch of 10,000 jobs created (jobs/s)
//	lifecycle  2,000 jobs driven Pending → Completed by K consumers per state (jobs/s)
//	pickup     job entering a state → a waiting consumer holds it (p50, p99)
//	ceiling    atomic 3-operation transitions/s the server accepts (what
//	           ../shared/tools/zklimit measures), ÷ 9 per job lifecycle
//
// and ends with one machine-readable BENCH line. Run it with `make bench`
// (go test -run '^$' -bench BenchmarkQueue -benchtime 1x ./queue/).
func BenchmarkQueue(b *testing.B) {
	ctx := context.Background()
	srv, err := zktest.Start(ctx, b.TempDir(), zktest.Options{JVMHeap: "1g"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	servers := []string{srv.Addr}
	for i := 0; i < b.N; i++ {
		createRate := benchCreate(b, servers, 10000)
		cpu0, _ := srv.CPUTime()
		req0 := serverReceived(srv.Addr)
		lifecycleRate := benchLifecycle(b, servers, 2000, benchPerState())
		cpu1, _ := srv.CPUTime()
		req1 := serverReceived(srv.Addr)
		p50, p99 := benchPickup(b, servers, 300)
		cpu2, _ := srv.CPUTime()
		ceilingTx, ceilingN := benchCeiling(b, servers, 4, 128, 5*time.Second)
		cpu3, _ := srv.CPUTime()
		// Server CPU per job: what each workload costs ZooKeeper itself,
		// whatever else the machine was doing.
		lifeCPU := float64(cpu1-cpu0) / 1e6 / 2000
		ceilCPU := float64(cpu3-cpu2) / 1e6 / (float64(ceilingN) / 9)
		ceiling := ceilingTx / 9
		ratio := lifecycleRate / ceiling
		fmt.Printf("create:    %.0f jobs/s (10,000 jobs, one batch)\n", createRate)
		fmt.Printf("lifecycle: %.0f jobs/s (2,000 jobs, 7 transitions each, %d consumers per state, one session per state)\n", lifecycleRate, benchPerState())
		fmt.Printf("pickup:    p50 %.2f ms, p99 %.2f ms (300 hand-offs, 4 waiting consumers)\n", p50, p99)
		fmt.Printf("ceiling:   %.0f transitions/s => %.0f jobs/s at 9 transitions/job\n", ceilingTx, ceiling)
		fmt.Printf("server CPU per job: lifecycle %.2f ms, ceiling %.2f ms (9 bare transitions); lifecycle requests per job: %.1f\n",
			lifeCPU, ceilCPU, float64(req1-req0)/2000)
		if dir := os.Getenv("INGESTQ_ZKLIMIT_DIR"); dir != "" {
			fmt.Printf("zklimit:   %s\n", runZklimit(b, dir, srv.Addr))
		}
		fmt.Printf("BENCH lifecycle_jobs_per_s=%.0f ceiling_jobs_per_s=%.0f ratio=%.2f create_jobs_per_s=%.0f pickup_p99_ms=%.2f\n",
			lifecycleRate, ceiling, ratio, createRate, p99)
		b.ReportMetric(lifecycleRate, "lifecycle-jobs/s")
		b.ReportMetric(ratio, "ratio")
	}
}

func benchClient(b *testing.B, servers []string, root string) *Client {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, Options{Servers: servers, Root: root, SessionTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchJobs(n int) []NewJob {
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{Priority: DefaultPriority, Configuration: &v1.JobConfiguration{
			ProfileName: "bench", Submitter: "bench", PayloadUrl: "http://127.0.0.1:1/f",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE, BatchEntry: int32(i)}}
	}
	return jobs
}

func benchSpawn(b *testing.B, c *Client, n int) {
	ctx := context.Background()
	bid, err := c.CreateBatch(ctx, sampleSubmission())
	if err != nil {
		b.Fatal(err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		b.Fatal(err)
	}
	if err := bc.Commit(ctx, BatchChange{To: BatchProcessing}); err != nil {
		b.Fatal(err)
	}
	if _, err := bc.CreateJobs(ctx, benchJobs(n)); err != nil {
		b.Fatal(err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		b.Fatal(err)
	}
}

func benchCreate(b *testing.B, servers []string, n int) float64 {
	c := benchClient(b, servers, fmt.Sprintf("/bench-create-%d", time.Now().UnixNano()))
	defer c.Close()
	start := time.Now()
	benchSpawn(b, c, n)
	return float64(n) / time.Since(start).Seconds()
}

func benchLifecycle(b *testing.B, servers []string, n, perState int) float64 {
	root := fmt.Sprintf("/bench-life-%d", time.Now().UnixNano())
	admin := benchClient(b, servers, root)
	defer admin.Close()
	benchSpawn(b, admin, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done sync.WaitGroup
	done.Add(n)
	var wg sync.WaitGroup
	// Each state is served as a stage service serves it: its own session,
	// one Consumer, perState goroutines sharing it.
	var clients []*Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range pipeline {
		clients = append(clients, benchClient(b, servers, root))
	}
	start := time.Now()
	for i, p := range pipeline {
		co := clients[i].NewConsumer(p.from, ConsumerOptions{Parts: PartsStatusOnly})
		for range perState {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					cl, err := co.Next(ctx)
					if err != nil {
						return
					}
					if err := cl.Commit(ctx, Change{To: p.to}); err != nil {
						if ctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					if p.to == Completed {
						done.Done()
					}
				}
			}()
		}
	}
	done.Wait()
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return float64(n) / elapsed.Seconds()
}

func benchPickup(b *testing.B, servers []string, rounds int) (p50, p99 float64) {
	root := fmt.Sprintf("/bench-pickup-%d", time.Now().UnixNano())
	producer := benchClient(b, servers, root)
	defer producer.Close()
	benchSpawn(b, producer, rounds)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64 // UnixNano when the hand-off started
	got := make(chan time.Duration, rounds)
	var wg sync.WaitGroup
	for range 4 {
		c := benchClient(b, servers, root)
		defer c.Close()
		co := c.NewConsumer(Estimating, ConsumerOptions{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cl, err := co.Next(ctx)
				if err != nil {
					return
				}
				got <- time.Since(time.Unix(0, sent.Load()))
				cl.Commit(ctx, Change{To: Provisioning})
			}
		}()
	}
	co := producer.NewConsumer(Pending, ConsumerOptions{Spread: 1})
	var lat []float64
	for range rounds {
		cl, err := co.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		// Measured from the start of the commit that moves the job in, so the
		// figure includes that commit's round trip (an upper bound).
		sent.Store(time.Now().UnixNano())
		if err := cl.Commit(ctx, Change{To: Estimating}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, float64(<-got)/1e6)
	}
	cancel()
	wg.Wait()
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100]
}

// benchCeiling is ../shared/tools/zklimit's measurement: workers each move
// one job between two folders with a 3-operation multi (set status, delete
// old entry, create new entry), as fast as the server accepts.
func benchCeiling(b *testing.B, servers []string, conns, workers int, d time.Duration) (perSecond float64, total int64) {
	var cs []*zk.Conn
	for range conns {
		c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger{slog.New(slog.DiscardHandler)}))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	root := fmt.Sprintf("/bench-ceiling-%d", time.Now().UnixNano())
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{root, root + "/a", root + "/b", root + "/jobs"} {
		if _, err := cs[0].Create(p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			b.Fatal(err)
		}
	}
	var ops atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[w%len(cs)]
			job := fmt.Sprintf("%s/jobs/j%d", root, w)
			c.Create(job, []byte(`{"status":"Pending"}`), 0, acl)
			c.Create(fmt.Sprintf("%s/a/05-j%d", root, w), nil, 0, acl)
			from, to := "a", "b"
			for time.Now().Before(deadline) {
				_, err := c.Multi(
					&zk.SetDataRequest{Path: job, Data: []byte(`{"status":"Next","last_successful_status":"Prev","retry_count":0}`), Version: -1},
					&zk.DeleteRequest{Path: fmt.Sprintf("%s/%s/05-j%d", root, from, w), Version: -1},
					&zk.CreateRequest{Path: fmt.Sprintf("%s/%s/05-j%d", root, to, w), Acl: acl},
				)
				if err != nil {
					b.Error(err)
					return
				}
				ops.Add(1)
				from, to = to, from
			}
		}()
	}
	wg.Wait()
	return float64(ops.Load()) / d.Seconds(), ops.Load()
}

// runZklimit runs the shared reference tool against the same server, so the
// project's own probe can be compared with it in the same run.
func runZklimit(b *testing.B, dir, addr string) string {
	cmd := exec.Command("go", "run", ".", "-zk", addr, "-workers", "128")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("not run (%v): %s", err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	re := regexp.MustCompile(`zk multi transitions/s: ([0-9]+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[1])
			return fmt.Sprintf("%d transitions/s => %d jobs/s", n, n/9)
		}
	}
	return string(out)
}

// benchPerState is K, the consumers per state (INGESTQ_BENCH_PER_STATE, default 32).
func benchPerState() int {
	if n, err := strconv.Atoi(os.Getenv("INGESTQ_BENCH_PER_STATE")); err == nil && n > 0 {
		return n
	}
	return 32
}

// serverReceived is the server's count of requests received ("srvr").
func serverReceived(addr string) int64 {
	out, err := zktest.FourLetter(addr, "srvr")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Received: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
