package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// BenchmarkPipeline is `make bench`: in one run against one ZooKeeper (fsync
// on, as in production) it measures the queue library and the whole
// pipeline, prints each figure, and ends with one machine-readable BENCH
// line. Knobs: INGESTQ_BENCH_PER_STATE (consumers per state in the
// lifecycle, default 32), INGESTQ_BENCH_E2E_JOBS (default 2000),
// INGESTQ_BENCH_E2E_WARMUP (jobs sent through first, default 1000),
// INGESTQ_BENCH_CONCURRENCY (INGESTQ_CONCURRENCY of every service in the
// end-to-end run, default benchConcurrency),
// INGESTQ_BENCH_TIMELINE=1 (jobs per state every second of the end-to-end
// run), INGESTQ_BENCH_S3_JOBS, INGESTQ_BENCH_S3_WARMUP and
// INGESTQ_BENCH_S3_FILE_BYTES (the run storing into S3: default 1000 jobs
// of 1 KB after 500).
func BenchmarkPipeline(b *testing.B) {
	dir := b.TempDir()
	ctx, srv := startZooKeeper(b, dir, 45*time.Minute, "2g")
	servers := []string{srv.Addr}
	var err error
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		// Batch size: one batch of 1,000 and of 10,000 jobs (100,000 below).
		creates := map[int]float64{}
		for _, n := range []int{1000, 10000} {
			creates[n], err = Create(ctx, servers, n)
			must(err)
		}
		create := creates[10000]
		fmt.Printf("create:    %.0f jobs/s (10,000 jobs, one batch)\n", create)

		// The ceiling first: it also warms the server's JIT, which the
		// first heavy run pays for (the lifecycle measured first came out
		// at half its figure measured after). The best of three runs: one
		// run came out at half another's when the server was busy with
		// something of its own (a snapshot, a collection), and a low
		// ceiling flatters every ratio.
		perState := envInt("INGESTQ_BENCH_PER_STATE", 32)
		type serverReading struct{ all, jit time.Duration }
		serverCPU := func() serverReading {
			all, jit, err := JavaCPU(srv.PID())
			must(err)
			return serverReading{all, jit}
		}
		cpu0 := serverCPU()
		var ceilingTx float64
		var ceilingN int64
		for range 3 {
			tx, n, err := Ceiling(ctx, servers, 4, 128, 5*time.Second)
			must(err)
			ceilingTx = max(ceilingTx, tx)
			ceilingN += n
		}
		cpu1 := serverCPU()
		// The lifecycle, grouped and not, is the best of three runs each,
		// as the ceiling is: the ceiling's ~300,000 transactions leave the
		// server writing snapshots meanwhile, and a ratio of two maxima
		// compares like with like.
		const lifecycleJobs, lifecycleRuns = 2000, 3
		var lifecycle, ungrouped float64
		for range lifecycleRuns {
			jobs, err := Lifecycle(ctx, servers, lifecycleJobs, perState, false)
			must(err)
			lifecycle = max(lifecycle, jobs)
		}
		cpu2 := serverCPU()
		for range lifecycleRuns {
			jobs, err := Lifecycle(ctx, servers, lifecycleJobs, perState, true)
			must(err)
			ungrouped = max(ungrouped, jobs)
		}
		ceiling := ceilingTx / transitionsPerJob
		fmt.Printf("lifecycle: %.0f jobs/s (2,000 jobs through %d transitions, %d consumers per state, one session per state; the best of 3 runs)\n", lifecycle, len(pipeline), perState)
		fmt.Printf("           %.0f jobs/s with every multi and multiRead a request of its own (session.Options.Ungrouped)\n", ungrouped)
		fmt.Printf("ceiling:   %.0f transitions/s => %.0f jobs/s at %d transitions/job (the best of 3 runs of 5 s)\n", ceilingTx, ceiling, len(pipeline))
		ceilingJobs := float64(ceilingN) / transitionsPerJob
		ceilingCPU, ceilingJIT := ms(cpu1.all-cpu0.all)/ceilingJobs, ms(cpu1.jit-cpu0.jit)/ceilingJobs
		lifecycleCPU, lifecycleJIT := ms(cpu2.all-cpu1.all)/(lifecycleJobs*lifecycleRuns), ms(cpu2.jit-cpu1.jit)/(lifecycleJobs*lifecycleRuns)
		fmt.Printf("server CPU per job: ceiling %.2f ms (%d bare transitions), lifecycle %.2f ms = %.2f of the ceiling's\n",
			ceilingCPU, len(pipeline), lifecycleCPU, lifecycleCPU/ceilingCPU)
		fmt.Printf("           of which compiling (the JIT compiler's threads): ceiling %.2f ms, lifecycle %.2f ms; without it %.2f and %.2f ms = %.2f\n",
			ceilingJIT, lifecycleJIT, ceilingCPU-ceilingJIT, lifecycleCPU-lifecycleJIT, (lifecycleCPU-lifecycleJIT)/(ceilingCPU-ceilingJIT))

		p50, p99, err := Pickup(ctx, servers, 300, 4)
		must(err)
		fmt.Printf("pickup:    p50 %.2f ms, p99 %.2f ms (300 hand-offs, 4 waiting consumers)\n", ms(p50), ms(p99))

		// The same rounds of 100 takes at every depth: at 100 the state
		// empties as they go, which flatters the shallow figure and so the
		// ratio errs against us. The ratio compares the takes of a running
		// consumer (1,000 in 10 rounds, the state refilled between them,
		// its relistings included); its first take, which lists the state,
		// is shown beside them.
		const takes, rounds = 100, 10
		firsts, depths := map[int]time.Duration{}, map[int]time.Duration{}
		for _, d := range []int{100, 1000, 10000} {
			firsts[d], depths[d], _, err = Depth(ctx, servers, d, takes, rounds)
			must(err)
		}
		start := time.Now()
		c, err := Connect(ctx, servers, root("batch100k"))
		must(err)
		_, err = Spawn(ctx, c, 100000)
		must(err)
		c.Close()
		batch100k := time.Since(start)
		creates[100000] = 100000 / batch100k.Seconds()
		firsts[100000], depths[100000], _, err = Depth(ctx, servers, 100000, takes, rounds)
		must(err)
		depthRatio := float64(depths[100000]) / float64(depths[100])
		fmt.Printf("batch:     100,000 jobs created in %.1f s (%.0f jobs/s)\n", batch100k.Seconds(), 100000/batch100k.Seconds())
		fmt.Printf("scaling:   %8s  %-12s  %-22s  %s\n", "jobs", "take from a", "first take of a fresh", "one batch of n created")
		fmt.Printf("           %8s  %-12s  %-22s\n", "", "state of n", "consumer (lists it)")
		for _, n := range []int{100, 1000, 10000, 100000} {
			created := "-"
			if creates[n] > 0 {
				created = fmt.Sprintf("%.1f s, %.0f jobs/s", float64(n)/creates[n], creates[n])
			}
			fmt.Printf("           %8d  %-12s  %-22s  %s\n", n, fmt.Sprintf("%.2f ms", ms(depths[n])),
				fmt.Sprintf("%.1f ms", ms(firsts[n])), created)
		}

		cleanup, err := Cleanup(ctx, servers, 50, 20)
		must(err)
		fmt.Printf("cleanup:   %.1f completed batches/s (50 batches of 20 jobs)\n", cleanup)

		bin := filepath.Join(dir, "bin")
		must(stack.Build(ctx, filepath.Join("..", ".."), bin))
		jobs := envInt("INGESTQ_BENCH_E2E_JOBS", 2000)
		e2e := func(name string, gomaxprocs int) (*PipelineResult, error) {
			return Pipeline(ctx, PipelineOptions{Servers: servers, Dir: filepath.Join(dir, name), BinDir: bin,
				Jobs: jobs, Warmup: envInt("INGESTQ_BENCH_E2E_WARMUP", 1000), FileBytes: 1024,
				Concurrency: envInt("INGESTQ_BENCH_CONCURRENCY", benchConcurrency), GoMaxProcs: gomaxprocs, ServerPIDs: []int{srv.PID()},
				Timeline: timelineOut()})
		}
		// Seven Go processes and ZooKeeper share two cores. The services
		// run with Go's default GOMAXPROCS (2 here); GOMAXPROCS=1 is
		// measured too, first, its stack stopped before the other starts.
		// One P spares the runtime's hand-offs between two, but a service
		// whose goroutine blocks in a file system call (the downloader's
		// and processor's mkdir, link, sync) waits for the runtime to hand
		// its only P to another thread: on balance it costs more here.
		pr1, err := e2e("e2e-gomaxprocs1", 1)
		if pr1 != nil {
			pr1.Stop(context.WithoutCancel(ctx))
		}
		must(err)
		pr, err := e2e("e2e", 0)
		if pr != nil {
			defer pr.Stop(context.WithoutCancel(ctx))
		}
		must(err)
		e2eRatio := pr.JobsPerSecond / ceiling
		fmt.Printf("e2e:       %.0f jobs/s = %.2f of the ceiling; %.1f ms of machine CPU per job (%d single-file jobs of 1 KB after %d of warm-up,\n"+
			"           seven services as processes, %d jobs at once each, Go's default GOMAXPROCS)\n",
			pr.JobsPerSecond, e2eRatio, ms(pr.CPUPerJob), jobs, envInt("INGESTQ_BENCH_E2E_WARMUP", 1000),
			envInt("INGESTQ_BENCH_CONCURRENCY", benchConcurrency))
		fmt.Printf("           CPU ms per job by process: %s\n", pr.CPUByProcess)
		zkRatio := ms(pr.ServerCPU) / ceilingCPU
		zkServingRatio := ms(pr.ServerCPU-pr.ServerJIT) / (ceilingCPU - ceilingJIT)
		fmt.Printf("           ZooKeeper's CPU per job %.2f ms = %.2f of the ceiling's %.2f ms; without compiling %.2f ms = %.2f of %.2f ms\n",
			ms(pr.ServerCPU), zkRatio, ceilingCPU, ms(pr.ServerCPU-pr.ServerJIT), zkServingRatio, ceilingCPU-ceilingJIT)
		fmt.Printf("           %.0f jobs/s = %.2f of the ceiling; %.1f ms of machine CPU per job with GOMAXPROCS=1 in every service\n",
			pr1.JobsPerSecond, pr1.JobsPerSecond/ceiling, ms(pr1.CPUPerJob))
		fmt.Printf("           CPU ms per job by process: %s\n", pr1.CPUByProcess)
		fmt.Printf("           where the time and the ZooKeeper requests per job went (%.1f requests and %.2f log syncs per job at the server):\n%s",
			pr.ServerRequestsPerJob, pr.ServerFsyncsPerJob, pr.Profile)

		rss, err := stageRSSAt100k(ctx, pr.Stack)
		must(err)
		fmt.Printf("memory:    estimator peak RSS %.0f MB while 100,000 jobs wait in Pending\n", rss)
		// Stopped before the next run: it is still working through the
		// 100,000 jobs.
		pr.Stop(context.WithoutCancel(ctx))

		// The whole pipeline again, storing into S3: a versitygw server on
		// this machine, its posix backend on the same disk.
		s3Jobs, s3Warmup, s3Bytes := envInt("INGESTQ_BENCH_S3_JOBS", 1000), envInt("INGESTQ_BENCH_S3_WARMUP", 500), envInt("INGESTQ_BENCH_S3_FILE_BYTES", 1024)
		ps3, err := Pipeline(ctx, PipelineOptions{Servers: servers, Dir: filepath.Join(dir, "e2e-s3"), BinDir: bin,
			Jobs: s3Jobs, Warmup: s3Warmup, FileBytes: s3Bytes, Concurrency: envInt("INGESTQ_BENCH_CONCURRENCY", benchConcurrency),
			ServerPIDs: []int{srv.PID()}, S3: true})
		if ps3 != nil {
			ps3.Stop(context.WithoutCancel(ctx))
		}
		must(err)
		fmt.Printf("e2e on S3: %.0f jobs/s = %.0f deposits an hour; %.1f ms of machine CPU per job (%d single-file jobs of %d bytes after %d of warm-up,\n"+
			"           stored into a bucket of versitygw on this machine, its posix backend on the same disk)\n",
			ps3.JobsPerSecond, 3600*ps3.JobsPerSecond, ms(ps3.CPUPerJob), s3Jobs, s3Bytes, s3Warmup)
		fmt.Printf("           CPU ms per job by process: %s\n", ps3.CPUByProcess)

		fmt.Printf("BENCH lifecycle_jobs_per_s=%.0f ceiling_jobs_per_s=%.0f lifecycle_ratio=%.2f create_jobs_per_s=%.0f pickup_p99_ms=%.2f"+
			" e2e_jobs_per_s=%.0f e2e_ratio=%.2f e2e_cpu_ms_per_job=%.1f e2e_gomaxprocs1_jobs_per_s=%.0f"+
			" zk_cpu_per_job_ratio=%.2f zk_serving_cpu_per_job_ratio=%.2f lifecycle_zk_cpu_per_job_ratio=%.2f"+
			" s3_e2e_deposits_per_h=%.0f s3_e2e_cpu_ms_per_job=%.1f"+
			" depth_pickup_ratio=%.2f batch100k_create_s=%.1f rss_mb_at_100k=%.0f cleanup_batches_per_s=%.1f\n",
			lifecycle, ceiling, lifecycle/ceiling, create, ms(p99),
			pr.JobsPerSecond, e2eRatio, ms(pr.CPUPerJob), pr1.JobsPerSecond,
			zkRatio, zkServingRatio, lifecycleCPU/ceilingCPU,
			3600*ps3.JobsPerSecond, ms(ps3.CPUPerJob),
			depthRatio, batch100k.Seconds(), rss, cleanup)
	}
}

// stageRSSAt100k queues 100,000 jobs in Pending under the running stack and
// reads the estimator's peak resident memory while it works through them.
func stageRSSAt100k(ctx context.Context, s *stack.Stack) (float64, error) {
	c, err := Connect(ctx, s.Servers, s.Root)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := Spawn(ctx, c, 100000); err != nil {
		return 0, err
	}
	// The window the estimator's peak memory is measured over, working
	// through the jobs: a measure's length, nothing to wait for.
	if !waittest.For(ctx, 20*time.Second) {
		return 0, ctx.Err()
	}
	return ResidentMB(s.Procs("estimator")[0].PID())
}

// goMaxProcs is the services' GOMAXPROCS in BenchmarkEndToEnd:
// INGESTQ_BENCH_GOMAXPROCS; unset or 0 leaves Go's default.
func goMaxProcs() int {
	if n, err := strconv.Atoi(os.Getenv("INGESTQ_BENCH_GOMAXPROCS")); err == nil && n >= 0 {
		return n
	}
	return 0
}

// timelineOut is where the end-to-end run prints its per-state timeline:
// standard output with INGESTQ_BENCH_TIMELINE=1, nowhere otherwise.
func timelineOut() io.Writer {
	if os.Getenv("INGESTQ_BENCH_TIMELINE") == "" {
		return nil
	}
	return os.Stdout
}

// benchConcurrency is the services' INGESTQ_CONCURRENCY in the end-to-end
// run: many small jobs at once, the setting docs/deploy.md advises for
// them. More jobs in flight per service let its claims, reads and commits
// share ZooKeeper requests (and the server's log syncs): from 16 to 64,
// requests per job go from ~10 to ~4 and syncs from ~2 to ~0.6.
const benchConcurrency = 64

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// startZooKeeper starts a ZooKeeper server with this heap in dir for the
// benchmark, and a context bounding the benchmark's patience; both end
// with the benchmark.
func startZooKeeper(b testing.TB, dir string, patience time.Duration, heap string) (context.Context, *zktest.Server) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	b.Cleanup(cancel)
	srv, err := zktest.Start(ctx, filepath.Join(dir, "zookeeper"), zktest.Options{JVMHeap: heap})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	return ctx, srv
}

// BenchmarkLifecycle is the lifecycle figure of BenchmarkPipeline alone,
// beside the ceiling, for quick comparisons while working on the queue
// library: go test -run '^$' -bench Lifecycle ./bench/ (one run of each
// unless INGESTQ_BENCH_RUNS says more). Beside jobs/s it reports the CPU a
// job cost the server and the queue clients (this process) while the jobs
// moved.
func BenchmarkLifecycle(b *testing.B) {
	ctx, srv := startZooKeeper(b, b.TempDir(), 10*time.Minute, "1g")
	servers := []string{srv.Addr}
	perState := envInt("INGESTQ_BENCH_PER_STATE", 32)
	// INGESTQ_BENCH_RUNS: the best of that many runs of the ceiling and of
	// each lifecycle, as BenchmarkPipeline takes the best of three; the
	// CPU figures are the means over the runs.
	runs := envInt("INGESTQ_BENCH_RUNS", 1)
	for range b.N {
		var ceilingTx, ceilingCPU float64
		for range runs {
			cpu0, _ := ProcessCPU(srv.PID())
			tx, n, err := Ceiling(ctx, servers, 4, 128, 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			cpu1, _ := ProcessCPU(srv.PID())
			ceilingTx = max(ceilingTx, tx)
			ceilingCPU += ms(cpu1-cpu0) / (float64(n) / transitionsPerJob) / float64(runs)
		}
		b.ReportMetric(ceilingCPU, "ceiling_server_ms/job")
		for _, ungrouped := range []bool{false, true} {
			var best, server, client float64
			for range runs {
				res, err := LifecycleCPU(ctx, servers, srv.PID(), 2000, perState, ungrouped)
				if err != nil {
					b.Fatal(err)
				}
				best = max(best, res.JobsPerSecond)
				server += ms(res.ServerCPU) / float64(runs)
				client += ms(res.ClientCPU) / float64(runs)
			}
			name := "grouped"
			if ungrouped {
				name = "ungrouped"
			}
			b.ReportMetric(best, name+"_jobs/s")
			b.ReportMetric(best/(ceilingTx/transitionsPerJob), name+"_ratio")
			b.ReportMetric(server, name+"_server_ms/job")
			b.ReportMetric(client, name+"_client_ms/job")
		}
	}
}

// BenchmarkDepth is the depth_pickup_ratio of BenchmarkPipeline alone: a
// running consumer's take with 100,000 jobs waiting and with 100 (the same
// 1,000 takes in 10 rounds at each depth), on a server of its own, for
// comparisons of the consumer:
// go test -run '^$' -bench Depth -benchtime 1x ./bench/
func BenchmarkDepth(b *testing.B) {
	ctx, srv := startZooKeeper(b, b.TempDir(), 20*time.Minute, "2g")
	servers := []string{srv.Addr}
	const takes, rounds = 100, 10
	for range b.N {
		_, shallow, _, err := Depth(ctx, servers, 100, takes, rounds)
		if err != nil {
			b.Fatal(err)
		}
		_, deep, listings, err := Depth(ctx, servers, 100000, takes, rounds)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ms(shallow), "take_ms_at_100")
		b.ReportMetric(ms(deep), "take_ms_at_100k")
		b.ReportMetric(float64(listings), "listings_at_100k")
		b.ReportMetric(float64(deep)/float64(shallow), "depth_pickup_ratio")
	}
}

// BenchmarkEndToEnd is the end-to-end figure of BenchmarkPipeline alone,
// beside the ceiling, with the server requests and machine CPU each job
// cost and a CPU profile of every service:
// go test -run '^$' -bench EndToEnd ./bench/ (INGESTQ_BENCH_E2E_JOBS jobs
// of INGESTQ_BENCH_E2E_FILE_BYTES each, default 1024;
// INGESTQ_BENCH_GOMAXPROCS, default Go's own (0);
// INGESTQ_BENCH_PROFILE_DIR keeps the profiles; INGESTQ_BENCH_STORE=s3
// stores into a versitygw server's bucket).
func BenchmarkEndToEnd(b *testing.B) {
	dir := b.TempDir()
	ctx, srv := startZooKeeper(b, dir, 20*time.Minute, "1g")
	servers := []string{srv.Addr}
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, filepath.Join("..", ".."), bin); err != nil {
		b.Fatal(err)
	}
	jobs := envInt("INGESTQ_BENCH_E2E_JOBS", 2000)
	// A fresh server's first heavy run pays for its JIT warm-up: the
	// ceiling measured first would come out low and flatter the ratio.
	if _, _, err := Ceiling(ctx, servers, 4, 128, 5*time.Second); err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		all0, jit0, err := JavaCPU(srv.PID())
		if err != nil {
			b.Fatal(err)
		}
		ceilingTx, ceilingN, err := Ceiling(ctx, servers, 4, 128, 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		all1, jit1, err := JavaCPU(srv.PID())
		if err != nil {
			b.Fatal(err)
		}
		ceilingJobs := float64(ceilingN) / transitionsPerJob
		ceilingCPU, ceilingJIT := ms(all1-all0)/ceilingJobs, ms(jit1-jit0)/ceilingJobs
		// INGESTQ_BENCH_PROFILE_DIR keeps the services' CPU profiles.
		profiles := filepath.Join(cmp.Or(os.Getenv("INGESTQ_BENCH_PROFILE_DIR"), dir), fmt.Sprint("profiles", i))
		pr, err := Pipeline(ctx, PipelineOptions{Servers: servers, Dir: filepath.Join(dir, fmt.Sprint("e2e", i)), BinDir: bin,
			Jobs: jobs, Warmup: envInt("INGESTQ_BENCH_E2E_WARMUP", 1000), FileBytes: envInt("INGESTQ_BENCH_E2E_FILE_BYTES", 1024),
			Concurrency: envInt("INGESTQ_BENCH_CONCURRENCY", benchConcurrency), GoMaxProcs: goMaxProcs(), Profiles: profiles,
			ServerPIDs: []int{srv.PID()}, Timeline: timelineOut(), S3: os.Getenv("INGESTQ_BENCH_STORE") == "s3"})
		if pr != nil {
			pr.Stop(context.WithoutCancel(ctx))
		}
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(pr.JobsPerSecond, "jobs/s")
		b.ReportMetric(pr.JobsPerSecond/(ceilingTx/transitionsPerJob), "ratio")
		b.ReportMetric(pr.ServerRequestsPerJob, "requests/job")
		b.ReportMetric(pr.ServerFsyncsPerJob, "fsyncs/job")
		b.ReportMetric(float64(pr.CPUPerJob)/1e6, "cpu-ms/job")
		b.ReportMetric(ms(pr.ServerCPU)/ceilingCPU, "zk_cpu_per_job_ratio")
		b.ReportMetric(ms(pr.ServerCPU-pr.ServerJIT)/(ceilingCPU-ceilingJIT), "zk_serving_cpu_per_job_ratio")
		fmt.Printf("  CPU ms per job by process: %s\n", pr.CPUByProcess)
		fmt.Printf("  ZooKeeper's CPU per job %.2f ms (%.2f compiling), the ceiling's %.2f ms (%.2f compiling)\n",
			ms(pr.ServerCPU), ms(pr.ServerJIT), ceilingCPU, ceilingJIT)
		fmt.Print(pr.Profile)
		fmt.Print(ProfileTop(ctx, profiles, bin, 12))
	}
}

// BenchmarkServerHeap is what a job costs ZooKeeper's heap, the figure the
// bound on queued jobs (INGESTQ_MAX_QUEUED_JOBS) is sized by: the live heap
// after INGESTQ_BENCH_HEAP_JOBS jobs (default 50,000) went through every
// state to Completed, and after as many more were put in Pending, on a
// server of its own, the queue under no root prefix (INGESTQ_ZK_ROOT's
// default):
// go test -run '^$' -bench ServerHeap -benchtime 1x ./bench/
func BenchmarkServerHeap(b *testing.B) {
	ctx, srv := startZooKeeper(b, b.TempDir(), 20*time.Minute, "2g")
	servers := []string{srv.Addr}
	n := envInt("INGESTQ_BENCH_HEAP_JOBS", 50000)
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	// Every histogram is taken with the server's in-memory log of its last
	// transactions holding small ones only, so that the difference of two
	// is the jobs.
	heap := func() Histogram {
		must(FlushCommittedLog(ctx, servers))
		h, err := LiveHeapByClass(ctx, srv.PID())
		must(err)
		return h
	}
	for range b.N {
		base := heap()
		_, err := lifecycleAt(ctx, servers, "", 0, n, 32, false)
		must(err)
		completed := heap()
		c, err := Connect(ctx, servers, "")
		must(err)
		_, err = Spawn(ctx, c, n)
		c.Close()
		must(err)
		pending := heap()
		perCompleted := float64(completed.Total-base.Total) / float64(n)
		perPending := float64(pending.Total-completed.Total) / float64(n)
		fmt.Printf("heap:      %.2f KB per completed job (bound 3 KB), %.2f KB per pending job (bound 2 KB); %d jobs each\n",
			perCompleted/1000, perPending/1000, n)
		for _, h := range []struct {
			what          string
			before, after Histogram
		}{{"completed", base, completed}, {"pending", completed, pending}} {
			nodes, arrays, structures := NodeGrowth(h.before, h.after, n)
			fmt.Printf("           %-9s %.1f nodes a job: %.2f KB of ZooKeeper's structures for them (%.0f bytes a node), %.2f KB of byte arrays (paths, names, data)\n",
				h.what, nodes, structures/1000, structures/nodes, arrays/1000)
			fmt.Printf("                     bytes a job by class: %s\n", HeapGrowth(h.before, h.after, n, 9))
		}
		fmt.Printf("BENCH heap_kb_per_completed_job=%.2f heap_kb_per_pending_job=%.2f\n", perCompleted/1000, perPending/1000)
		b.ReportMetric(perCompleted/1000, "KB/completed_job")
		b.ReportMetric(perPending/1000, "KB/pending_job")
	}
}
