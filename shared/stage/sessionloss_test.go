package stage

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// firstTimeBlocks is a handler that works on a job it meets for the first
// time until its context ends (the job lost), reporting it on working, and
// moves on a job it meets again.
func firstTimeBlocks(working chan<- string) Handler {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(ctx context.Context, cl Job) Outcome {
		mu.Lock()
		again := seen[cl.ID()]
		seen[cl.ID()] = true
		mu.Unlock()
		if !again {
			working <- cl.ID()
			<-ctx.Done()
		}
		return Next(jobs.Change{})
	}
}

// waitWorking waits until the handler works on n jobs.
func waitWorking(t *testing.T, working <-chan string, n int) {
	t.Helper()
	for range n {
		select {
		case <-working:
		case <-time.After(queuetest.Wait):
			t.Fatalf("the replica never took all %d jobs", n)
		}
	}
}

func unlocked(q *session.Session, jids []string) bool {
	for _, jid := range jids {
		if j, err := jobs.NewReader(q).GetJob(context.Background(), jid); err != nil || j.GetLocked() {
			return false
		}
	}
	return true
}

// TestJobsOfASessionBackAfterAQuorumLossAreUnlockedAndTakenAgain: two of
// three ZooKeeper servers stop for longer than the replica's session
// timeout. Its client presumes the session lost, its jobs' contexts end and
// their releases fail (there is no server to send them to); but servers
// without a quorum expire no session, and the same session comes back with
// the job locks still its own. The replica must remove them and take the
// jobs again, without a restart.
func TestJobsOfASessionBackAfterAQuorumLossAreUnlockedAndTakenAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ens, err := zktest.StartEnsemble(ctx, filepath.Join(t.TempDir(), "zookeeper"), 3, zktest.Options{NoSync: true, JVMHeap: "256m"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ens.Stop)
	connect := func() *session.Session {
		q, err := session.Connect(ctx, session.Options{Servers: ens.Addrs(), Root: "/quorum", SessionTimeout: 4 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Close)
		return q
	}
	q, operator := connect(), connect()
	jids := queuetest.SpawnN(t, operator, newJobs(2), queue.Estimating)
	working := make(chan string, 2)
	r := startRunner(t, q, Config{Concurrency: 4, Handler: firstTimeBlocks(working)})
	waitWorking(t, working, 2)
	sess := q.ID()

	ens.Servers[0].Stop()
	ens.Servers[1].Stop()
	// The client presumes the session lost after a session timeout
	// without a server: the jobs' steps end and are not committed.
	queuetest.Eventually(t, "both steps ended as lost", func() bool { return r.Status().GetOutcomes()["fenced"] == 2 })
	for _, s := range ens.Servers[:2] {
		if err := s.Restart(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, jid := range jids {
		queuetest.WaitState(t, operator, jid, queue.Provisioning)
	}
	if got := q.ID(); got != sess {
		t.Fatalf("the replica's session changed (0x%x → 0x%x): the test needs the same session back", sess, got)
	}
	if !unlocked(operator, jids) {
		t.Error("a job is still locked after it moved on")
	}
}

// envReplicaRoot, when set, makes the test binary run a replica (see
// runReplica) on that root instead of the tests.
const envReplicaRoot = "INGESTQ_STAGE_REPLICA_ROOT"

// runReplica is a replica of a stage from Estimating to Provisioning, on
// the test ZooKeeper, with a session timeout of 2 s: a process a test can
// freeze. It prints "working <jid>" when it starts on a job.
func runReplica(root string) int {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	q, err := session.Connect(ctx, session.Options{Servers: strings.Split(os.Getenv(zktest.EnvServers), ","), Root: root,
		SessionTimeout: 2 * time.Second, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer q.Close()
	working := make(chan string)
	go func() {
		for jid := range working {
			fmt.Printf("working %s\n", jid)
		}
	}()
	r, err := New(jobs.New(q), Config{Service: "test", Name: "estimating", From: queue.Estimating, To: queue.Provisioning,
		Logger: log, Handler: firstTimeBlocks(working)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestTheOnlyReplicaFrozenPastItsSessionTimeoutTakesItsJobsBack: the only
// replica of a stage is frozen (SIGSTOP) while it works on two jobs, for
// longer than its session timeout: the server expires its session and the
// jobs are free. Thawed, it gets a new session and must take the two jobs
// again by itself: nothing else changes in the queue to wake it.
func TestTheOnlyReplicaFrozenPastItsSessionTimeoutTakesItsJobsBack(t *testing.T) {
	root := zktest.Root(t)
	operator := queuetest.Connect(t, root)
	jids := queuetest.SpawnN(t, operator, newJobs(2), queue.Estimating)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envReplicaRoot+"="+root)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	working := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if jid, ok := strings.CutPrefix(sc.Text(), "working "); ok {
				working <- jid
			}
		}
	}()
	waitWorking(t, working, 2)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Unlocked by the server: its session expired, the replica frozen past
	// its timeout.
	queuetest.Eventually(t, "the frozen replica's jobs unlocked by the server", func() bool { return unlocked(operator, jids) })
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, jid := range jids {
		queuetest.WaitState(t, operator, jid, queue.Provisioning)
	}
}

// TestAStepFencedByAStatusWrittenWithoutTheLockRemovesItsLock: while a
// stage works on a job, a writer that ignores locks (a peer's admin
// failing the job) changes its status. The step's commit is refused, and
// the stage must remove its own lock node at once: left there it would
// keep the job locked (and an operator's requeue refused) for as long as
// the stage's session lives.
func TestAStepFencedByAStatusWrittenWithoutTheLockRemovesItsLock(t *testing.T) {
	root := zktest.Root(t)
	c := queuetest.Connect(t, root)
	jid := queuetest.SpawnN(t, c, newJobs(1), queue.Estimating)[0]
	working, failed := make(chan string, 1), make(chan struct{})
	var once sync.Once
	r := startRunner(t, c, Config{Handler: func(ctx context.Context, cl Job) Outcome {
		first := false
		once.Do(func() { first = true })
		if first {
			working <- cl.ID()
			<-failed
		}
		return Next(jobs.Change{Message: "estimated"})
	}})
	waitWorking(t, working, 1)
	// The peer fails the job the way the Merritt library writes a
	// transition: the status, then the state entry, without the lock.
	peer, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	job := root + "/jobs/" + jid
	status := `{"status":"Failed","last_modified":"2026-11-22 03:51:07 +0000","message":"failed by an administrator","last_successful_status":"Pending","retry_count":0}`
	if _, err := peer.Set(job+"/status", []byte(status), -1); err != nil {
		t.Fatal(err)
	}
	if err := peer.Delete(root+"/jobs/states/estimating/05-"+jid, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Create(root+"/jobs/states/failed/05-"+jid, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	close(failed)
	queuetest.Eventually(t, "the step's commit refused", func() bool { return r.Status().GetOutcomes()["fenced"] == 1 })
	if locked, _, err := peer.Exists(job + "/lock"); err != nil || locked {
		t.Fatalf("the job's lock node is still there after the fenced commit (%v)", err)
	}
	if st := queuetest.Status(t, c, jid); st.GetStatus() != queue.Failed || st.GetMessage() != "failed by an administrator" {
		t.Errorf("job is %s %q: the peer's write must stand", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	// An operator requeues the job: it is not locked, and the stage takes it.
	if _, err := admin.New(c).Jobs.Requeue(context.Background(), jid, queue.Estimating, ""); err != nil {
		t.Fatalf("requeue after the fenced commit: %v", err)
	}
	queuetest.WaitState(t, c, jid, queue.Provisioning)
}
