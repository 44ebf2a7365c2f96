package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/s3test"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// PipelineOptions configure the end-to-end measurement.
type PipelineOptions struct {
	Servers []string // ZooKeeper
	Dir     string   // run directory
	BinDir  string   // built service binaries
	Jobs    int      // single-file jobs in the batch
	// Warmup jobs go through the pipeline, in a batch of their own, before
	// the measured one: the figure is the running system's, not that of
	// ZooKeeper's JIT compiler warming up to the stages' requests.
	Warmup      int
	FileBytes   int // size of each job's file
	Concurrency int // INGESTQ_CONCURRENCY of every service
	GoMaxProcs  int // GOMAXPROCS of every service (0: Go's default)
	// Profiles, if set, is where a CPU profile of every service, taken
	// while the jobs flow, is written (<service>.pprof).
	Profiles string
	// ServerPIDs are the ZooKeeper servers' processes, whose CPU time is
	// shown beside the services' (none: it counts as "other").
	ServerPIDs []int
	// Timeline, if set, receives the jobs waiting in each state once a
	// second while the batch runs: where the pipeline queues up.
	Timeline io.Writer
	// S3 stores into a bucket of an S3-compatible server the run starts
	// (versitygw, serving a folder of Dir), not into a folder: its CPU
	// counts as the process "s3".
	S3 bool
}

// PipelineResult is what the end-to-end run measured.
type PipelineResult struct {
	JobsPerSecond float64
	Elapsed       time.Duration
	// Profile is where the services' time and ZooKeeper requests went.
	Profile string
	// ServerRequestsPerJob is what the server received per measured job
	// (its own packet count), ServerFsyncsPerJob how often it synced its
	// transaction log per job (0 with more than one server).
	ServerRequestsPerJob, ServerFsyncsPerJob float64
	// CPUPerJob is the machine's busy CPU time (every process: ZooKeeper,
	// the services, the depositor's server) over the measured batch, per
	// job; 0 where /proc/stat cannot be read.
	CPUPerJob time.Duration
	// CPUByProcess is that CPU time split by who spent it: ZooKeeper, each
	// service, the benchmark (the depositor's web server) and the rest.
	CPUByProcess string
	// ServerCPU is the ZooKeeper servers' CPU time per job (ServerPIDs),
	// ServerJIT the part of it their JIT compilers spent.
	ServerCPU, ServerJIT time.Duration
	Stack                *stack.Stack // still running: the caller stops it (Stop)
	stopStore            func()       // the S3 server's, when the run has one
	stopped              sync.Once
}

// Stop stops the run's services, then its S3 server if it has one; again,
// it does nothing.
func (r *PipelineResult) Stop(ctx context.Context) {
	r.stopped.Do(func() {
		if r.Stack != nil {
			r.Stack.StopServices(ctx)
		}
		if r.stopStore != nil {
			r.stopStore()
		}
	})
}

// Pipeline runs the seven services as processes against servers, submits
// one batch (a manifest of manifests) of Jobs single-file objects served
// from loopback, and measures from the submission to every job Completed.
// The stack is left running for further measurements.
func Pipeline(ctx context.Context, o PipelineOptions) (*PipelineResult, error) {
	deposits := filepath.Join(o.Dir, "deposits")
	if err := writeDeposit(deposits, "batch", o.Jobs, o.FileBytes); err != nil {
		return nil, err
	}
	if o.Warmup > 0 {
		if err := writeDeposit(deposits, "warmup", o.Warmup, o.FileBytes); err != nil {
			return nil, err
		}
	}
	dep, err := depositor.Start(deposits)
	if err != nil {
		return nil, err
	}
	profiles := filepath.Join(o.Dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(profiles, "bench.yaml"),
		[]byte("name: bench\ncollection: bench\nnotification_addresses: [bench@example.org]\n"), 0o644); err != nil {
		return nil, err
	}
	// No bound on the jobs queued: a run of more than 100,000 jobs is what
	// INGESTQ_BENCH_E2E_JOBS may ask for.
	env := map[string]string{"INGESTQ_CONCURRENCY": strconv.Itoa(o.Concurrency), "INGESTQ_LOG_LEVEL": "warn", "INGESTQ_MAX_QUEUED_JOBS": "0",
		"INGESTQ_PPROF": strconv.FormatBool(o.Profiles != "")}
	if o.GoMaxProcs > 0 {
		env["GOMAXPROCS"] = strconv.Itoa(o.GoMaxProcs)
	}
	var s3 *s3test.Server
	var stopStore func()
	if o.S3 {
		if s3, stopStore, err = startS3(ctx, o.Dir, env); err != nil {
			dep.Close()
			return nil, err
		}
	}
	s, err := stack.Start(ctx, stack.Options{Dir: o.Dir, BinDir: o.BinDir, ProfilesDir: profiles, ZooKeeper: o.Servers,
		Root: root("e2e"), Env: env})
	if err != nil {
		dep.Close()
		if stopStore != nil {
			stopStore()
		}
		return nil, err
	}
	res := &PipelineResult{Stack: s, stopStore: stopStore}
	conn, err := grpc.NewClient(s.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	batches := v1.NewBatchServiceClient(conn)
	if o.Warmup > 0 {
		bid, err := submit(ctx, batches, dep.URL+"/warmup.checkm")
		if err != nil {
			return res, err
		}
		if err := waitCompleted(ctx, batches, bid, o.Warmup, s.LogDir); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
		// Its report is written before the measured batch starts.
		if err := waitReported(ctx, batches, bid); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	before, err := ScrapeServices(ctx, s)
	if err != nil {
		return res, err
	}
	var serverBefore ServerCounters
	if len(o.Servers) == 1 {
		if serverBefore, err = ReadServerCounters(o.Servers[0]); err != nil {
			return res, err
		}
	}
	meter := cpuMeter{groups: map[string][]int{"bench": {os.Getpid()}}, java: map[string]bool{"zookeeper": true}}
	if len(o.ServerPIDs) > 0 {
		meter.groups["zookeeper"] = o.ServerPIDs
	}
	if s3 != nil {
		meter.groups["s3"] = []int{s3.PID}
	}
	for _, service := range stack.Services {
		for _, p := range s.Procs(service) {
			meter.groups[service] = append(meter.groups[service], p.PID())
		}
	}
	cpuBefore, cpuErr := meter.read()
	start := time.Now()
	bid, err := submit(ctx, batches, dep.URL+"/batch.checkm")
	if err != nil {
		return res, err
	}
	profiled := make(chan error, 1)
	if o.Profiles != "" {
		go func() { profiled <- profileServices(ctx, s, o.Profiles) }()
	} else {
		profiled <- nil
	}
	if o.Timeline != nil {
		stop := make(chan struct{})
		defer close(stop)
		go timeline(ctx, s, o.Timeline, start, stop)
	}
	if err := waitCompleted(ctx, batches, bid, o.Jobs, s.LogDir); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(start)
	res.JobsPerSecond = float64(o.Jobs) / res.Elapsed.Seconds()
	if cpuAfter, err := meter.read(); err == nil && cpuErr == nil {
		split := splitCPU(cpuBefore, cpuAfter, o.Jobs)
		res.CPUPerJob, res.CPUByProcess = split.Machine, split.String()
		res.ServerCPU, res.ServerJIT = split.Groups["zookeeper"], split.JIT["zookeeper"]
	}
	if len(o.Servers) == 1 {
		serverAfter, err := ReadServerCounters(o.Servers[0])
		if err != nil {
			return res, err
		}
		res.ServerRequestsPerJob = float64(serverAfter.Requests-serverBefore.Requests) / float64(o.Jobs)
		res.ServerFsyncsPerJob = float64(serverAfter.Fsyncs-serverBefore.Fsyncs) / float64(o.Jobs)
	}
	if err := <-profiled; err != nil {
		return res, err
	}
	after, err := ScrapeServices(ctx, s)
	if err != nil {
		return res, err
	}
	res.Profile = Profile(before, after, o.Jobs)
	return res, nil
}

// s3Bucket is the bucket of an S3 run's store.
const s3Bucket = "ingestq"

// startS3 starts the S3-compatible server the tests use, serving a folder
// of dir, makes the store's bucket there and sets env so that the stack
// stores into it; stop ends the server.
func startS3(ctx context.Context, dir string, env map[string]string) (*s3test.Server, func(), error) {
	srv, stop, err := s3test.Run(ctx, filepath.Join(dir, "s3"), filepath.Join(dir, "s3.log"))
	if err != nil {
		return nil, nil, err
	}
	if err := srv.MakeBucket(ctx, s3Bucket); err != nil {
		stop()
		return nil, nil, err
	}
	maps.Copy(env, map[string]string{
		"INGESTQ_STORE": "s3", "INGESTQ_S3_ENDPOINT": srv.Endpoint, "INGESTQ_S3_BUCKET": s3Bucket,
		"INGESTQ_S3_REGION": srv.Region, "INGESTQ_S3_PATH_STYLE": "true",
		"AWS_ACCESS_KEY_ID": srv.Access, "AWS_SECRET_ACCESS_KEY": srv.Secret,
	})
	return srv, stop, nil
}

// submit submits a manifest of manifests and returns its batch id.
func submit(ctx context.Context, batches v1.BatchServiceClient, url string) (string, error) {
	sub, err := batches.Submit(ctx, &v1.SubmitRequest{Submitter: "bench", Profile: "bench",
		PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
	if err != nil {
		return "", fmt.Errorf("submitting %s: %w", url, err)
	}
	return sub.GetBatchId(), nil
}

// waitCompleted waits until all jobs of batch bid are Completed (polling
// every 100 ms), or fails as soon as one fails.
func waitCompleted(ctx context.Context, batches v1.BatchServiceClient, bid string, jobs int, logs string) error {
	for {
		st, err := batches.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}})
		if err != nil {
			return err
		}
		c := st.GetBatch().GetCounts()
		if int(c.GetCompleted()) == jobs {
			return nil
		}
		if c.GetFailed() > 0 || st.GetBatch().GetStatus().GetStatus() == queue.BatchFailed {
			return fmt.Errorf("batch %s failed: %v (logs in %s)", bid, st.GetBatch().GetStatus(), logs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReported waits until batch bid is Completed: its report is done.
func waitReported(ctx context.Context, batches v1.BatchServiceClient, bid string) error {
	for {
		st, err := batches.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}})
		if err != nil {
			return err
		}
		if st.GetBatch().GetStatus().GetStatus() == queue.BatchCompleted {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// timeline prints the jobs in each working state once a second until stop.
func timeline(ctx context.Context, s *stack.Stack, w io.Writer, start time.Time, stop <-chan struct{}) {
	c, err := Connect(ctx, s.Servers, s.Root)
	if err != nil {
		fmt.Fprintf(w, "timeline: %v\n", err)
		return
	}
	defer c.Close()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		counts, err := admin.New(c).Jobs.Counts(ctx)
		if err != nil {
			fmt.Fprintf(w, "timeline: %v\n", err)
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  %5.1fs", time.Since(start).Seconds())
		for _, st := range []queue.JobState{queue.Pending, queue.Estimating, queue.Provisioning, queue.Downloading,
			queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			fmt.Fprintf(&b, " %s=%d", strings.ToLower(queue.JobStateName(st))[:4], counts[st])
		}
		fmt.Fprintln(w, b.String())
	}
}

// profileServices takes a CPU profile of every service at once, for a few
// seconds once the jobs flow, into dir.
func profileServices(ctx context.Context, s *stack.Stack, dir string) error {
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	return profileFor(ctx, s, dir, 8)
}

// profileFor takes a CPU profile of every service at once, for seconds
// from now, into dir.
func profileFor(ctx context.Context, s *stack.Stack, dir string, seconds int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	errs := make(chan error, len(stack.Services))
	for _, service := range stack.Services {
		go func() {
			errs <- fetch(ctx, "http://"+s.Procs(service)[0].Metrics+"/debug/pprof/profile?seconds="+strconv.Itoa(seconds),
				filepath.Join(dir, service+".pprof"))
		}()
	}
	var all []error
	for range stack.Services {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

func fetch(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profiling: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profiling: GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ProfileTop is `go tool pprof -top` of each service's profile in dir: the
// functions its CPU went to.
func ProfileTop(ctx context.Context, dir, binDir string, n int) string {
	var b strings.Builder
	for _, service := range stack.Services {
		out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount="+strconv.Itoa(n),
			filepath.Join(binDir, service), filepath.Join(dir, service+".pprof")).CombinedOutput()
		fmt.Fprintf(&b, "  %s:\n", service)
		if err != nil {
			fmt.Fprintf(&b, "    (no profile: %v)\n", err)
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(line, "Duration:") || strings.HasPrefix(strings.TrimSpace(line), "flat") ||
				strings.Contains(line, "%") && !strings.HasPrefix(line, "File:") && !strings.HasPrefix(line, "Type:") && !strings.HasPrefix(line, "Time:") {
				fmt.Fprintf(&b, "    %s\n", line)
			}
		}
	}
	return b.String()
}

// writeDeposit writes a manifest of manifests of n objects, each one file
// of size bytes, as <dir>/<name>.checkm, its objects under <dir>/<name>/;
// the objects' local ids begin with name.
func writeDeposit(dir, name string, n, size int) error {
	if err := os.MkdirAll(filepath.Join(dir, name, "files"), 0o755); err != nil {
		return err
	}
	var batch strings.Builder
	batch.WriteString("#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:primaryIdentifier | mrt:localIdentifier\n")
	for i := range n {
		body := []byte(strings.Repeat(fmt.Sprintf("object %06d ", i), size/14+1)[:size])
		file := fmt.Sprintf("f%06d.txt", i)
		if err := os.WriteFile(filepath.Join(dir, name, "files", file), body, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		obj := fmt.Sprintf("#%%checkm_0.7\n#%%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n{{base}}/%s/files/%s | sha256 | %s | %d | | %s\n#%%eof\n",
			name, file, hex.EncodeToString(sum[:]), size, file)
		if err := os.WriteFile(filepath.Join(dir, name, fmt.Sprintf("o%06d.checkm", i)), []byte(obj), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&batch, "{{base}}/%s/o%06d.checkm | | | | | o%06d.checkm | | %s-%06d\n", name, i, i, name, i)
	}
	batch.WriteString("#%eof\n")
	return os.WriteFile(filepath.Join(dir, name+".checkm"), []byte(batch.String()), 0o644)
}

// ResidentMB is a process's peak resident memory so far (VmHWM), in MB.
func ResidentMB(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM for pid %d", pid)
}
