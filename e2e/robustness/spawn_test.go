package robustness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/robustness/failpoint"
	"github.com/ingestq/ingestq/e2e/robustness/traffic"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// spawnRows is the size of the batch TestABatcherKilledAtEachPointOfSpawning
// spawns: large enough that its jobs are written in several multis.
const spawnRows = 1000

// spawnSessionTimeout is the batchers' ZooKeeper session timeout there: a
// killed batcher's lock on the batch goes after it.
const spawnSessionTimeout = 3 * time.Second

// A stalled batcher is frozen for stallFor (its session expires), then
// continued; it leaves the failpoint stallThen later.
const (
	stallFor  = 3 * spawnSessionTimeout
	stallThen = 3 * time.Second
)

// batcherProc is one batcher process of the robustness build, on ports of
// its own, started again on them after a kill.
type batcherProc struct {
	name string
	bin  string
	env  []string
	addr string // gRPC
	fp   *failpoint.Client
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs the batcher and waits until it serves.
func (b *batcherProc) start(ctx context.Context) error {
	logFile, err := os.OpenFile(b.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(b.bin)
	cmd.Env = b.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	b.mu.Lock()
	b.cmd, b.exited = cmd, exited
	b.mu.Unlock()
	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		resp, err := health.Check(cctx, &healthpb.HealthCheckRequest{})
		ccancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting; see %s", b.name, b.log)
		case <-ctx.Done():
			return fmt.Errorf("%s not serving: %w; see %s", b.name, ctx.Err(), b.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// signal sends sig to the batcher's process group.
func (b *batcherProc) signal(sig syscall.Signal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil && b.cmd.Process != nil {
		syscall.Kill(-b.cmd.Process.Pid, sig)
	}
}

// kill ends the batcher at once (kill -9) and waits for it to be gone.
func (b *batcherProc) kill() {
	b.signal(syscall.SIGKILL)
	b.mu.Lock()
	exited := b.exited
	b.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// spawnRun is one case of TestABatcherKilledAtEachPointOfSpawning: a
// ZooKeeper root, the depositor's server and the batchers.
type spawnRun struct {
	t        *testing.T
	dir      string
	root     string
	q        *session.Session
	deposits *depositor.Server
	outbox   string
	bins     string
	servers  []string
	ports    *freeport.Reservation
	profiles string
}

// batcher makes (does not start) the n-th batcher of the run.
func (r *spawnRun) batcher(n int) *batcherProc {
	r.t.Helper()
	addrs, err := r.ports.Take(2)
	if err != nil {
		r.t.Fatal(err)
	}
	name := fmt.Sprintf("batcher-%d", n)
	b := &batcherProc{name: name, bin: filepath.Join(r.bins, "batcher"), addr: addrs[0].String(), fp: failpoint.NewClient(addrs[1].String()),
		log: filepath.Join(r.dir, name+".log")}
	b.env = append(os.Environ(),
		"INGESTQ_ZK_SERVERS="+strings.Join(r.servers, ","),
		"INGESTQ_ZK_ROOT="+r.root,
		"INGESTQ_ZK_SESSION_TIMEOUT="+spawnSessionTimeout.String(),
		"INGESTQ_LISTEN="+b.addr,
		"INGESTQ_METRICS_LISTEN=",
		"INGESTQ_WORK_ROOT="+filepath.Join(r.dir, "work"),
		"INGESTQ_STORE_ROOT="+filepath.Join(r.dir, "store"),
		"INGESTQ_OUTBOX_DIR="+r.outbox,
		"INGESTQ_PROFILES_DIR="+r.profiles,
		"INGESTQ_FETCH_ALLOW=loopback",
		"INGESTQ_DRAIN_TIMEOUT=5s",
		"GOFAIL_HTTP="+b.fp.Addr,
	)
	r.t.Cleanup(b.kill)
	return b
}

// submit sends the run's manifest of spawnRows rows to b.
func (r *spawnRun) submit(ctx context.Context, b *batcherProc) string {
	r.t.Helper()
	conn, err := grpc.NewClient(b.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	resp, err := v1.NewBatchServiceClient(conn).Submit(ctx, &v1.SubmitRequest{Submitter: "robustness", Profile: traffic.Profile,
		PayloadUrl: r.deposits.URL + "/rows.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.GetBatchId()
}

// waitSpawned waits until the batch's jobs are all created: Processing, no
// spawning marker, no lock (a Pending batch is still to be taken).
func (r *spawnRun) waitSpawned(ctx context.Context, bid string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		read, err := r.q.Nodes().Read(ctx, []string{r.q.Paths().Batch(bid).Status(), r.q.Paths().Batch(bid).Node(queue.NodeSpawning),
			r.q.Paths().Batch(bid).Lock()})
		if err != nil {
			r.t.Fatal(err)
		}
		st, err := queue.DecodeBatchStatus("", read[0].Data)
		if err != nil {
			r.t.Fatal(err)
		}
		switch {
		case st.GetStatus() != queue.BatchPending && st.GetStatus() != queue.BatchProcessing:
			r.t.Fatalf("batch %s is %s (%q), want Processing with its jobs", bid, queue.BatchStateName(st.GetStatus()), st.GetMessage())
		case st.GetStatus() == queue.BatchProcessing && read[1].Stat == nil && read[2].Stat == nil:
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("batch %s never finished spawning; see the batchers' logs in %s", bid, r.dir)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// withoutStatus lists the job nodes without a status.
func (r *spawnRun) withoutStatus(ctx context.Context) []string {
	r.t.Helper()
	names, _, err := r.q.Nodes().Children(ctx, r.q.Paths().Jobs())
	if err != nil {
		r.t.Fatal(err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return !queue.ValidJobID(n) })
	ps := make([]string, len(names))
	for i, jid := range names {
		ps[i] = r.q.Paths().Job(jid).Status()
	}
	read, err := r.q.Nodes().Read(ctx, ps)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for i, n := range read {
		if n.Stat == nil {
			out = append(out, names[i])
		}
	}
	return out
}

// countJobs checks what the batch's spawning left: exactly one job per
// row, and no job node without a status. It returns the batch's jobs.
func (r *spawnRun) countJobs(ctx context.Context, bid string) []string {
	r.t.Helper()
	names, _, err := r.q.Nodes().Children(ctx, r.q.Paths().Jobs())
	if err != nil {
		r.t.Fatal(err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return !queue.ValidJobID(n) })
	var statuses, confs []string
	for _, jid := range names {
		statuses = append(statuses, r.q.Paths().Job(jid).Status())
		confs = append(confs, r.q.Paths().Job(jid).Node(queue.NodeConfig))
	}
	read, err := r.q.Nodes().Read(ctx, append(statuses, confs...))
	if err != nil {
		r.t.Fatal(err)
	}
	rows := map[int32][]string{}
	var noStatus []string
	for i, jid := range names {
		if read[i].Stat == nil {
			noStatus = append(noStatus, jid)
			continue
		}
		conf, err := queue.DecodeConfiguration(confs[i], read[len(names)+i].Data)
		if err != nil {
			r.t.Fatal(err)
		}
		if conf.GetBatchId() == bid {
			rows[conf.GetBatchEntry()] = append(rows[conf.GetBatchEntry()], jid)
		}
	}
	if len(noStatus) > 0 {
		r.t.Errorf("%d job node(s) without status left: %v", len(noStatus), noStatus[:min(5, len(noStatus))])
	}
	var twice, missing []int32
	var all []string
	for row := range int32(spawnRows) {
		switch n := len(rows[row]); {
		case n == 0:
			missing = append(missing, row)
		case n > 1:
			twice = append(twice, row)
		}
		all = append(all, rows[row]...)
	}
	if len(twice) > 0 || len(missing) > 0 || len(rows) != spawnRows {
		r.t.Errorf("batch %s: %d row(s) with more than one job (%v), %d with none (%v), %d rows with jobs; want one job for each of %d",
			bid, len(twice), twice[:min(5, len(twice))], len(missing), missing[:min(5, len(missing))], len(rows), spawnRows)
	}
	return all
}

// endAll fails every job, standing in for the stages: the batch is then
// reported.
func (r *spawnRun) endAll(ctx context.Context, jids []string) {
	r.t.Helper()
	errs := make([]error, len(jids))
	session.EachAtMost(len(jids), 16, func(i int) {
		cl, err := jobs.New(r.q).ClaimJob(ctx, jids[i])
		if err == nil {
			err = cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: "ended by the test"})
		}
		errs[i] = err
	})
	if err := errors.Join(errs...); err != nil {
		r.t.Fatal(err)
	}
}

// checkReportedOnce waits for the batch's report and checks it was made
// once: the batch Failed with its every job listed once, and one report
// mail in the outbox (a resend under the same key replaces the file, as a
// receiver deduplicates it).
func (r *spawnRun) checkReportedOnce(ctx context.Context, bid string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var b *v1.Batch
	for {
		var err error
		if b, err = batches.New(r.q).GetBatch(ctx, bid); err != nil {
			r.t.Fatal(err)
		}
		if b.GetStatus().GetStatus() == queue.BatchFailed {
			break
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("batch %s is %s (%q), never reported", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
		case <-time.After(100 * time.Millisecond):
		}
	}
	failed := b.GetStatusReport().GetFailedJobs()
	if len(failed) != spawnRows || len(slices.Compact(slices.Sorted(slices.Values(failed)))) != spawnRows ||
		len(b.GetStatusReport().GetSuccessfulJobs()) != 0 {
		r.t.Errorf("the report lists %d failed jobs (%d distinct) and %d successful, want %d failed, each once",
			len(failed), len(slices.Compact(slices.Sorted(slices.Values(failed)))), len(b.GetStatusReport().GetSuccessfulJobs()), spawnRows)
	}
	des, err := os.ReadDir(r.outbox)
	if err != nil {
		r.t.Fatal(err)
	}
	var mails []string
	for _, de := range des {
		if strings.HasPrefix(de.Name(), bid+"-") {
			mails = append(mails, de.Name())
		}
	}
	if !slices.Equal(mails, []string{bid + "-report.eml"}) {
		r.t.Errorf("mails of batch %s in the outbox: %v, want its one report", bid, mails)
	}
}

// TestABatcherKilledAtEachPointOfSpawningLeavesOneJobPerRowAndNoNodeBehind
// stops a batcher of the robustness build at each failpoint of a batch's
// spawning, a manifest of 1,000 rows, and kills it there (kill -9), or
// freezes it there past its session while another batcher takes the batch
// and then lets it go on; then a batcher (started again, or the other)
// finishes the batch. Once it is spawned the queue holds exactly one job
// per row and no job node without a status; once its jobs end, the batch
// is reported once.
func TestABatcherKilledAtEachPointOfSpawningLeavesOneJobPerRowAndNoNodeBehind(t *testing.T) {
	ctx := context.Background()
	bins, err := build(ctx, "failpoints", func(ctx context.Context, dir string) error { return buildFailpoints(ctx, dir) })
	if err != nil {
		t.Fatal(err)
	}
	dir, err := testenv.MkdirTemp("ingestq-spawn-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv(envKeep) != "" {
			t.Logf("data and logs kept in %s", dir)
		} else {
			os.RemoveAll(dir)
		}
	})
	zk, err := zktest.Start(ctx, filepath.Join(dir, "zookeeper"), zktest.Options{NoSync: true, JVMHeap: "512m"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(zk.Stop)
	deposits, err := depositor.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deposits.Close() })
	deposits.Set("/rows.checkm", []byte(rowsManifest(spawnRows)))
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, traffic.Profile+".yaml"), []byte(traffic.ProfileYAML(deposits.URL+depositor.CallbackPath)), 0o644); err != nil {
		t.Fatal(err)
	}
	ports := freeport.Reserve()
	t.Cleanup(ports.Close)

	var points []failpoint.Point
	for _, p := range failpoint.All {
		if p.Service == "batcher" && p.Name != "batcherReportMailed" {
			points = append(points, p)
		}
	}
	if len(points) < 4 {
		t.Fatalf("the spawning's failpoints are %v: the catalogue lost some", points)
	}
	type tc struct {
		point  failpoint.Point
		action failpoint.Action
	}
	var cases []tc
	for _, p := range points {
		cases = append(cases, tc{p, failpoint.Crash})
	}
	for _, name := range []string{"batcherJobIDsReserved", "batcherJobsWritten"} {
		p, _ := failpoint.Named(name)
		cases = append(cases, tc{p, failpoint.Stall})
	}
	for i, c := range cases {
		t.Run(c.point.Name+"/"+string(c.action), func(t *testing.T) {
			root := fmt.Sprintf("/spawn-%d", i)
			q, err := session.Connect(ctx, session.Options{Servers: []string{zk.Addr}, Root: root, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(q.Close)
			caseDir := filepath.Join(dir, fmt.Sprintf("case-%d", i))
			r := &spawnRun{t: t, dir: caseDir, root: root, q: q, deposits: deposits, outbox: filepath.Join(caseDir, "outbox"), bins: bins,
				servers: []string{zk.Addr}, ports: ports, profiles: profiles}
			if err := os.MkdirAll(caseDir, 0o755); err != nil {
				t.Fatal(err)
			}
			first := r.batcher(1)
			if err := first.start(ctx); err != nil {
				t.Fatal(err)
			}
			// The failpoint holds the batcher there (asleep) until it is
			// killed, or until after its stall. Killed, every goroutine
			// that reaches it stays (the other multis of jobs in flight
			// too); stalled, only the first.
			term := fmt.Sprintf("sleep(%d)", (stallFor + stallThen).Milliseconds())
			if c.action == failpoint.Stall {
				term = "1*" + term
			}
			if err := first.fp.Enable(ctx, c.point.Name, term); err != nil {
				t.Fatal(err)
			}
			bid := r.submit(ctx, first)
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			err = first.fp.WaitReached(wctx, c.point.Name, 10*time.Millisecond)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			reached := time.Now()
			switch c.action {
			case failpoint.Crash:
				first.kill()
				left := r.withoutStatus(ctx)
				t.Logf("killed at %s: %d job node(s) left without status", c.point.Name, len(left))
				if (c.point.Name == "batcherJobIDsReserved" || c.point.Name == "batcherJobsWritten") && len(left) == 0 {
					t.Fatalf("killed at %s, the batcher left no job id unwritten: the test does not kill where it means to", c.point.Name)
				}
				if err := first.start(ctx); err != nil {
					t.Fatal(err)
				}
				r.waitSpawned(ctx, bid)
				if _, removed := reclaimsLogged([]string{first.log}); removed != len(left) {
					t.Errorf("the batcher finishing the batch logged %d job ids removed, want the %d left", removed, len(left))
				}
			case failpoint.Stall:
				// Frozen past its session: another batcher takes the batch
				// and finishes it. Then the frozen one goes on from the
				// failpoint, its session gone: it must change nothing.
				first.signal(syscall.SIGSTOP)
				if err := r.batcher(2).start(ctx); err != nil {
					t.Fatal(err)
				}
				waittest.For(ctx, time.Until(reached.Add(stallFor))) // the stall's own length: nothing to wait for
				first.signal(syscall.SIGCONT)
				r.waitSpawned(ctx, bid)
				// The thawed batcher leaves the failpoint stallThen after
				// it thawed; what it does then is done a moment later. It
				// must change nothing, so there is no change to wait for:
				// it is given the time.
				waittest.For(ctx, time.Until(reached.Add(stallFor+stallThen+2*time.Second)))
			}
			jids := r.countJobs(ctx, bid)
			if t.Failed() {
				t.Fatalf("see the batchers' logs in %s", caseDir)
			}
			r.endAll(ctx, jids)
			r.checkReportedOnce(ctx, bid)
			// Nothing left behind once the batch has ended either.
			r.countJobs(ctx, bid)
		})
	}
}

// rowsManifest is a manifest of manifests of n rows, row i naming
// obj<i>.checkm (never fetched: the batcher reads only the rows).
func rowsManifest(n int) string {
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\n" +
		"#%prefix | mrt: | http://merritt.cdlib.org/terms#\n#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | " +
		"mrt:primaryIdentifier | mrt:localIdentifier | mrt:creator | mrt:title | mrt:date\n")
	for i := range n {
		fmt.Fprintf(&b, "{{base}}/obj%04d.checkm | | | | | obj%04d.checkm | | loc%04d | | |\n", i, i, i)
	}
	return b.String() + "#%eof\n"
}
