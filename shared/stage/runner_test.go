package stage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMain(m *testing.M) {
	if root := os.Getenv(envReplicaRoot); root != "" {
		os.Exit(runReplica(root))
	}
	zktest.Main(m)
}

// newJobs is n jobs of profile (and so collection) "p".
func newJobs(n int) []batches.NewJob {
	out := make([]batches.NewJob, n)
	for i := range out {
		out[i] = batches.NewJob{Priority: 5, Configuration: &v1.JobConfiguration{ProfileName: "p"}}
	}
	return out
}

func startRunner(t *testing.T, c *session.Session, cfg Config) *Runner {
	t.Helper()
	if cfg.Service == "" {
		cfg.Service = "test"
	}
	if cfg.Name == "" {
		cfg.Name = "estimating"
	}
	if cfg.From == 0 {
		cfg.From, cfg.To = queue.Estimating, queue.Provisioning
	}
	r, err := New(jobs.New(c), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Run(ctx)
	t.Cleanup(func() {
		cancel()
		<-r.Done()
	})
	return r
}

func TestReplicasShareTheWorkAndHandleEachJobOnce(t *testing.T) {
	root := zktest.Root(t)
	operator := queuetest.Connect(t, root)
	jids := queuetest.SpawnN(t, operator, newJobs(60), queue.Estimating)
	const replicas = 3
	var mu sync.Mutex
	handled := map[string]int{}
	byReplica := map[int]int{}
	// No job ends before every replica holds one: a replica that took
	// everything first, or never took any, cannot finish the batch.
	allHold := make(chan struct{})
	for i := 0; i < replicas; i++ {
		startRunner(t, queuetest.Connect(t, root), Config{Concurrency: 2, Handler: func(ctx context.Context, cl Job) Outcome {
			mu.Lock()
			handled[cl.ID()]++
			byReplica[i]++
			if byReplica[i] == 1 && len(byReplica) == replicas {
				close(allHold)
			}
			mu.Unlock()
			select {
			case <-allHold:
			case <-ctx.Done():
				return Release()
			}
			return Next(jobs.Change{SpaceNeeded: ptr(int64(10))})
		}})
	}
	queuetest.Eventually(t, "every job in Provisioning", func() bool {
		counts, _ := admin.New(operator).Jobs.Counts(context.Background())
		return counts[queue.Provisioning] == len(jids)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, jid := range jids {
		if handled[jid] != 1 {
			t.Errorf("%s handled %d times", jid, handled[jid])
		}
	}
	if len(byReplica) != replicas {
		t.Errorf("jobs handled by replica: %v, want all %d sharing", byReplica, replicas)
	}
}

func TestInOrderStageHandsJobsOverInQueueOrder(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	// Priorities out of creation order: queue order is priority, then age.
	priorities := []int32{9, 1, 5, 1, 7, 3, 9, 2, 5, 1}
	specs := make([]batches.NewJob, len(priorities))
	for i, p := range priorities {
		specs[i] = batches.NewJob{Priority: p, Configuration: &v1.JobConfiguration{ProfileName: "p"}}
	}
	jids := queuetest.SpawnN(t, c, specs, queue.Estimating)
	want := slices.Clone(jids)
	slices.SortStableFunc(want, func(a, b string) int {
		return cmp.Compare(priorities[slices.Index(jids, a)], priorities[slices.Index(jids, b)])
	})
	var mu sync.Mutex
	var order []string
	startRunner(t, c, Config{Concurrency: 4, Spread: 1, InOrder: true, Handler: func(ctx context.Context, cl Job) Outcome {
		mu.Lock()
		order = append(order, cl.ID())
		mu.Unlock()
		return Next(jobs.Change{SpaceNeeded: ptr(int64(1))})
	}})
	queuetest.Eventually(t, "every job in Provisioning", func() bool {
		counts, _ := admin.New(c).Jobs.Counts(context.Background())
		return counts[queue.Provisioning] == len(jids)
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, want) {
		t.Errorf("handled in the order\n%v\nwant queue order\n%v", order, want)
	}
}

func TestChainedRunnersHandAJobOnWithoutClaimingItAgain(t *testing.T) {
	tests := []struct {
		name        string
		pauseSecond bool
		statusReads int64 // per job: one claim, or one per stage
	}{
		{name: "the next stage takes the job straight from the first", statusReads: 1},
		{name: "a paused next stage leaves the job in its state", pauseSecond: true, statusReads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := queuetest.Connect(t, zktest.Root(t))
			const n = 6
			jids := queuetest.SpawnN(t, c, newJobs(n), queue.Pending)
			var mu sync.Mutex
			seen := map[string][]queue.JobState{}
			record := func(cl Job) {
				mu.Lock()
				seen[cl.ID()] = append(seen[cl.ID()], cl.State())
				mu.Unlock()
			}
			jc := jobs.New(c)
			first, err := New(jc, Config{Service: "test", Name: "pending", From: queue.Pending, To: queue.Estimating, Concurrency: 2,
				Handler: func(ctx context.Context, cl Job) Outcome { record(cl); return Next(jobs.Change{}) }})
			if err != nil {
				t.Fatal(err)
			}
			second, err := New(jc, Config{Service: "test", Name: "estimating", From: queue.Estimating, To: queue.Provisioning, Concurrency: 2,
				Handler: func(ctx context.Context, cl Job) Outcome {
					record(cl)
					return Next(jobs.Change{SpaceNeeded: ptr(int64(1))})
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Chain(second); err != nil {
				t.Fatal(err)
			}
			if err := second.Chain(first); err == nil {
				t.Error("a runner taking Estimating jobs accepted to hand Provisioning jobs to one taking Pending")
			}
			if tt.pauseSecond {
				second.Pause()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer func() { cancel(); <-first.Done(); <-second.Done() }()
			go first.Run(ctx)
			go second.Run(ctx)
			want := queue.Provisioning
			if tt.pauseSecond {
				want = queue.Estimating
			}
			queuetest.Eventually(t, "every job in "+queue.JobStateName(want), func() bool {
				counts, _ := admin.New(c).Jobs.Counts(context.Background())
				return counts[want] == n
			})
			reads := int64(0)
			for _, r := range c.Requests() {
				if r.ReadsNode() && r.Node == "jobs/*/status" {
					reads += r.Count
				}
			}
			if reads != tt.statusReads*n {
				t.Errorf("%d reads of job statuses for %d jobs; want %d: a job handed on is not claimed again", reads, n, tt.statusReads*n)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, jid := range jids {
				wantSeen := []queue.JobState{queue.Pending, queue.Estimating}
				if tt.pauseSecond {
					wantSeen = wantSeen[:1]
				}
				if !slices.Equal(seen[jid], wantSeen) {
					t.Errorf("%s handled in %v, want %v", jid, seen[jid], wantSeen)
				}
				if j, err := jobs.NewReader(c).GetJob(context.Background(), jid); err != nil || j.GetLocked() {
					t.Errorf("%s: %v, locked %v; want it free", jid, err, j.GetLocked())
				}
			}
		})
	}
}

func TestPausedReplicaTakesNothingUntilResumed(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	r := startRunner(t, c, Config{Handler: func(context.Context, Job) Outcome { return Next(jobs.Change{}) }})
	r.Pause()
	if !r.Status().GetPaused() {
		t.Fatal("status does not say paused")
	}
	jids := queuetest.SpawnN(t, c, newJobs(1), queue.Estimating)
	waittest.Stays(t, 300*time.Millisecond, func() error {
		if s := queuetest.Status(t, c, jids[0]).GetStatus(); s != queue.Estimating {
			return fmt.Errorf("a paused replica moved the job to %s", queue.JobStateName(s))
		}
		return nil
	})
	r.Resume()
	queuetest.Eventually(t, "job taken after resume", func() bool { s := queuetest.Status(t, c, jids[0]).GetStatus(); return s == queue.Provisioning })
}

func TestDrainFinishesWorkInTimeAndReleasesWhatIsLate(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	jids := queuetest.SpawnN(t, c, newJobs(2), queue.Estimating)
	started := make(chan string, 2)
	finish := make(chan struct{}) // the quick job's step ends when the test says
	r := startRunner(t, c, Config{Concurrency: 2, Handler: func(ctx context.Context, cl Job) Outcome {
		started <- cl.ID()
		if cl.ID() == jids[0] {
			select { // finishes within the drain
			case <-finish:
			case <-ctx.Done():
			}
			return Next(jobs.Change{})
		}
		<-ctx.Done() // too slow: cut off by the drain deadline
		return Next(jobs.Change{})
	}})
	<-started
	<-started
	// The test ends the drain's time itself: after the quick job is done,
	// while the slow one still runs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := make(chan int, 1)
	go func() { left <- r.Drain(ctx) }()
	queuetest.Eventually(t, "the runner draining", func() bool { return r.Status().GetDraining() })
	close(finish)
	queuetest.Eventually(t, "the quick job's step ended", func() bool { return len(r.Status().GetInFlight()) < 2 })
	cancel()
	if n := <-left; n != 1 {
		t.Errorf("Drain left %d jobs running, want 1", n)
	}
	if s := queuetest.Status(t, c, jids[0]).GetStatus(); s != queue.Provisioning {
		t.Errorf("the quick job is %s, want Provisioning", queue.JobStateName(s))
	}
	if s := queuetest.Status(t, c, jids[1]).GetStatus(); s != queue.Estimating {
		t.Errorf("the slow job is %s, want it given back in Estimating", queue.JobStateName(s))
	}
	for _, jid := range jids {
		if job, _ := jobs.NewReader(c).GetJob(context.Background(), jid); job.GetLocked() {
			t.Errorf("%s still locked after the drain", jid)
		}
	}
	<-r.Done()
}

func TestHandlerPastLockLossIsCancelledAndItsCommitRefused(t *testing.T) {
	root := zktest.Root(t)
	proxy, err := zktest.NewProxy(zktest.Servers(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx := context.Background()
	cut, err := session.Connect(ctx, session.Options{Servers: []string{proxy.Addr}, Root: root, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	operator := queuetest.Connect(t, root)
	jids := queuetest.SpawnN(t, operator, newJobs(1), queue.Estimating)
	cancelled := make(chan error, 1)
	var once sync.Once
	r := startRunner(t, cut, Config{Handler: func(ctx context.Context, cl Job) Outcome {
		first := false
		once.Do(func() { first = true })
		if !first {
			return Release() // back on a new session: leave the job to the other replica
		}
		proxy.Block() // the replica is cut off while working
		<-ctx.Done()
		cancelled <- context.Cause(ctx)
		return Next(jobs.Change{Message: "too late"})
	}})
	select {
	case cause := <-cancelled:
		if !errors.Is(cause, queue.ErrNoSession) {
			t.Errorf("cancelled because %v, want the lost session", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context was not cancelled when its session was lost")
	}
	proxy.Unblock()
	queuetest.Eventually(t, "the late commit counted as fenced", func() bool { return r.Status().GetOutcomes()["fenced"] == 1 })
	if st := queuetest.Status(t, operator, jids[0]); st.GetStatus() != queue.Estimating || st.GetMessage() == "too late" {
		t.Errorf("job is %s %q: the lost replica's outcome must not land", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	// Another replica finishes it.
	startRunner(t, operator, Config{Handler: func(context.Context, Job) Outcome { return Next(jobs.Change{}) }})
	queuetest.Eventually(t, "another replica finished the job", func() bool { s := queuetest.Status(t, operator, jids[0]).GetStatus(); return s == queue.Provisioning })
}

func TestRunnerRulesBeforeAndAroundTheHandler(t *testing.T) {
	tests := []struct {
		name    string
		from    queue.JobState
		setup   func(t *testing.T, c *session.Session, jid string)
		handler Handler
		hold    bool
		want    queue.JobState
		message string
	}{
		{name: "a pending job of a held collection goes to Held", from: queue.Pending, hold: true,
			setup: func(t *testing.T, c *session.Session, jid string) {
				if err := admin.New(c).Queue.HoldCollection(context.Background(), "p"); err != nil {
					t.Fatal(err)
				}
			},
			handler: func(context.Context, Job) Outcome { return Next(jobs.Change{}) },
			want:    queue.Held, message: "collection p is held"},
		{name: "a panicking handler fails the job and the runner lives on", from: queue.Estimating,
			handler: func(context.Context, Job) Outcome { panic("boom") },
			want:    queue.Failed, message: "internal error in estimating: boom"},
		{name: "a handler's failure message lands in the status", from: queue.Estimating,
			handler: func(context.Context, Job) Outcome { return Fail("f.txt: HTTP 404") },
			want:    queue.Failed, message: "f.txt: HTTP 404"},
		{name: "malformed JSON planted by another writer fails the job with the path", from: queue.Estimating,
			setup: func(t *testing.T, c *session.Session, jid string) {
				plant(t, c, jid, "configuration", "{broken")
			},
			handler: func(context.Context, Job) Outcome { return Next(jobs.Change{}) },
			want:    queue.Failed, message: "/configuration: unreadable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := zktest.Root(t)
			c := queuetest.Connect(t, root)
			jids := queuetest.SpawnN(t, c, newJobs(2), tt.from)
			if tt.setup != nil {
				tt.setup(t, c, jids[0])
			}
			to := queue.Estimating
			if tt.from == queue.Estimating {
				to = queue.Provisioning
			}
			startRunner(t, c, Config{From: tt.from, To: to, HoldCollections: tt.hold, Handler: tt.handler})
			queuetest.Eventually(t, "job moved", func() bool { s := queuetest.Status(t, c, jids[0]).GetStatus(); return s == tt.want })
			if msg := queuetest.Status(t, c, jids[0]).GetMessage(); !strings.Contains(msg, tt.message) {
				t.Errorf("message %q, want it to contain %q", msg, tt.message)
			}
			// The runner carries on with the next job.
			queuetest.Eventually(t, "second job handled", func() bool { s := queuetest.Status(t, c, jids[1]).GetStatus(); return s != tt.from })
		})
	}
}

func TestObjectLocksOfAnOutcomeAreReleasedWithItsCommitOrAfterIt(t *testing.T) {
	tests := []struct {
		name     string
		outcome  func(lock *jobs.ObjectLock) Outcome
		want     queue.JobState
		inCommit bool // released by the commit's own multi, not a request of its own
	}{
		{name: "a step that goes on releases the lock in its commit",
			outcome: func(l *jobs.ObjectLock) Outcome { return Next(jobs.Change{Unlock: []*jobs.ObjectLock{l}}) },
			want:    queue.Provisioning, inCommit: true},
		{name: "a step that gives the job back releases the lock after it",
			outcome: func(l *jobs.ObjectLock) Outcome {
				return Wait(time.Hour, jobs.Change{Unlock: []*jobs.ObjectLock{l}}) // Estimating cannot stay: released
			},
			want: queue.Estimating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := queuetest.Connect(t, zktest.Root(t))
			jid := queuetest.SpawnN(t, c, newJobs(1), queue.Estimating)[0]
			handled := make(chan struct{})
			startRunner(t, c, Config{Handler: func(ctx context.Context, cl Job) Outcome {
				defer close(handled)
				l, err := jobs.New(c).LockStorage(ctx, "ark:/99999/fk4lock")
				if err != nil {
					t.Error(err)
					return Release()
				}
				return tt.outcome(l)
			}})
			<-handled
			queuetest.Eventually(t, "lock released", func() bool {
				storage, _, err := admin.New(c).Queue.ObjectLocks(context.Background())
				j, jerr := jobs.NewReader(c).GetJob(context.Background(), jid)
				return err == nil && jerr == nil && len(storage) == 0 && !j.GetLocked()
			})
			if got := queuetest.Status(t, c, jid).GetStatus(); got != tt.want {
				t.Errorf("job in %s, want %s", queue.JobStateName(got), queue.JobStateName(tt.want))
			}
			own := int64(0)
			for _, r := range c.Requests() {
				if r.Op == "delete" && r.Node == "locks/storage/*" {
					own += r.Count
				}
			}
			if tt.inCommit && own != 0 {
				t.Errorf("%d deletes of the lock of their own; want it released inside the commit", own)
			}
			if !tt.inCommit && own != 1 {
				t.Errorf("%d deletes of the lock; want 1 after the job was given back", own)
			}
		})
	}
}

func TestOnCommittedRunsOnlyAfterTheOutcomeWasCommitted(t *testing.T) {
	tests := []struct {
		name    string
		outcome Outcome
		want    bool
	}{
		{"a step that goes on", Next(jobs.Change{SpaceNeeded: ptr(int64(1))}), true},
		{"a failure", Fail("no"), true},
		{"a release", Release(), false},
		{"a wait in a state that cannot stay", Wait(time.Hour, jobs.Change{}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := queuetest.Connect(t, zktest.Root(t))
			queuetest.SpawnN(t, c, newJobs(1), queue.Estimating)
			var called atomic.Int64
			r := startRunner(t, c, Config{Handler: func(ctx context.Context, cl Job) Outcome {
				return tt.outcome.OnCommitted(func() { called.Add(1) })
			}})
			// An outcome is counted after its commit and its callback.
			queuetest.Eventually(t, "outcome counted", func() bool {
				n := int64(0)
				for _, v := range r.Status().GetOutcomes() {
					n += v
				}
				return n >= 1
			})
			want := int64(0)
			if tt.want {
				want = 1
			}
			if got := called.Load(); got != want {
				t.Errorf("callback ran %d times, want %d", got, want)
			}
		})
	}
}

func TestWaitLeavesTheJobAndTriesItAgainLater(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	jids := queuetest.SpawnN(t, c, newJobs(1), queue.Provisioning)
	var mu sync.Mutex
	var tries []time.Time
	startRunner(t, c, Config{Name: "provisioning", From: queue.Provisioning, To: queue.Downloading,
		Handler: func(ctx context.Context, cl Job) Outcome {
			mu.Lock()
			defer mu.Unlock()
			tries = append(tries, time.Now())
			switch len(tries) {
			case 1:
				return Wait(200*time.Millisecond, jobs.Change{Message: "waiting for space"})
			case 2:
				return Wait(200*time.Millisecond, jobs.Change{}) // says nothing: released only
			}
			return Next(jobs.Change{})
		}})
	queuetest.Eventually(t, "job provisioned on the third try", func() bool { s := queuetest.Status(t, c, jids[0]).GetStatus(); return s == queue.Downloading })
	// The wait that says why is in the job's history; the other is not.
	var stays []string
	for _, h := range queuetest.Status(t, c, jids[0]).GetHistory() {
		if h.GetFrom() == queue.Provisioning && h.GetTo() == queue.Provisioning {
			stays = append(stays, h.GetMessage())
		}
	}
	if len(stays) != 1 || stays[0] != "waiting for space" {
		t.Errorf("the history's stays in Provisioning: %q, want the one that said why", stays)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(tries); i++ {
		if gap := tries[i].Sub(tries[i-1]); gap < 150*time.Millisecond {
			t.Errorf("try %d came %v after the previous one; Wait asked for 200ms", i, gap)
		}
	}
}

// TestSpansOfTwoStagesOfOneJobShareItsTrace: two runners, each with its own
// tracer provider (two processes), continue the trace stored in the job.
func TestSpansOfTwoStagesOfOneJobShareItsTrace(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	submitter := sdktrace.NewTracerProvider()
	subCtx, sub := submitter.Tracer("test").Start(context.Background(), "submit")
	traceparent := telemetry.Inject(subCtx)
	sub.End()
	jids := queuetest.SpawnN(t, c, []batches.NewJob{{Configuration: &v1.JobConfiguration{ProfileName: "p", Traceparent: traceparent}}}, queue.Pending)
	var exporters []*tracetest.InMemoryExporter
	for _, st := range []struct {
		name     string
		from, to queue.JobState
	}{{"pending", queue.Pending, queue.Estimating}, {"estimating", queue.Estimating, queue.Provisioning}} {
		exp := tracetest.NewInMemoryExporter()
		exporters = append(exporters, exp)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		startRunner(t, queuetest.Connect(t, root), Config{Name: st.name, From: st.from, To: st.to, Tracer: tp.Tracer("stage"),
			Handler: func(context.Context, Job) Outcome { return Next(jobs.Change{}) }})
	}
	queuetest.Eventually(t, "job through both stages", func() bool { s := queuetest.Status(t, c, jids[0]).GetStatus(); return s == queue.Provisioning })
	queuetest.Eventually(t, "both spans exported", func() bool { return len(exporters[0].GetSpans()) == 1 && len(exporters[1].GetSpans()) == 1 })
	want := sub.SpanContext().TraceID()
	for i, exp := range exporters {
		span := exp.GetSpans()[0]
		if span.SpanContext.TraceID() != want {
			t.Errorf("stage %d span trace %s, want the submission's %s", i, span.SpanContext.TraceID(), want)
		}
		if span.Parent.SpanID() != sub.SpanContext().SpanID() {
			t.Errorf("stage %d span's parent is %s, want the submission span", i, span.Parent.SpanID())
		}
	}
}

// plant overwrites a job node the way a careless writer sharing the tree
// would: straight through ZooKeeper, with the spec's path spelled out.
func plant(t *testing.T, c *session.Session, jid, node, data string) {
	t.Helper()
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Set(c.Paths().Root()+"/jobs/"+jid+"/"+node, []byte(data), -1); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
