package adminservice

import (
	"context"
	"errors"
	"math/rand/v2"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// failedBatch makes a batch of n jobs, fails every job and reports the
// batch Failed, as the batcher would.
func (f *fixture) failedBatch(n int) (string, []string) {
	f.t.Helper()
	ctx := context.Background()
	bid, jids := f.batch("demo", "demo_coll", n)
	for _, jid := range jids {
		f.fail(jid)
	}
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Report: &v1.StatusReport{FailedJobs: jids}}); err != nil {
		f.t.Fatal(err)
	}
	return bid, jids
}

// answeredClearly reports whether err is a success or a refusal that tells
// the operator what to do: try again (Aborted), or the item is not in a
// state for it (FailedPrecondition) or gone (NotFound).
func answeredClearly(err error) bool {
	switch status.Code(err) {
	case codes.OK, codes.Aborted, codes.FailedPrecondition, codes.NotFound:
		return true
	}
	return false
}

// TestARequeueRacingTheDeletionOfItsBatchNeverLeavesAJobWithoutItsBatch
// sends RequeueJob for every job of a failed batch and DeleteBatch at the
// same moment, race after race, over the real RPCs. Whoever wins, the
// other answers a clear refusal: no job outlives its batch, no lock is
// left behind, and fsck finds nothing.
func TestARequeueRacingTheDeletionOfItsBatchNeverLeavesAJobWithoutItsBatch(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Minute)
	defer cancel()
	const races = 50
	var deleted, requeued int
	answers := map[string]int{}
	for race := range races {
		bid, jids := f.failedBatch(3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, len(jids)+1)
		// Each call starts after its own small delay, so that races
		// differ in who comes first; odd races give the deletion a head
		// start.
		jitter := func(head bool) {
			d := rand.IntN(4000)
			if !head {
				d += 2000 * (race % 2)
			}
			time.Sleep(time.Duration(d) * time.Microsecond) // only time varies who comes first among real requests
		}
		for i, jid := range jids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				jitter(false)
				_, errs[i] = f.admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: jid})
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			jitter(true)
			_, errs[len(jids)] = f.admin.DeleteBatch(ctx, &v1.DeleteBatchRequest{BatchId: bid})
		}()
		close(start)
		wg.Wait()
		for i, err := range errs {
			if !answeredClearly(err) {
				t.Errorf("race %d: call %d answered %s %q", race, i, status.Code(err), status.Convert(err).Message())
			}
			if err == nil && i < len(jids) {
				requeued++
			}
			call := "RequeueJob"
			if i == len(jids) {
				call = "DeleteBatch"
			}
			answers[call+" "+status.Code(err).String()]++
		}
		if status.Code(errs[len(jids)]) == codes.Aborted {
			// Told to try again, the operator does: with nothing racing
			// now, the batch goes, or stays for its live jobs.
			_, err := f.admin.DeleteBatch(ctx, &v1.DeleteBatchRequest{BatchId: bid})
			if c := status.Code(err); c != codes.OK && c != codes.FailedPrecondition {
				t.Errorf("race %d: DeleteBatch tried again answered %s %q", race, c, status.Convert(err).Message())
			}
			errs[len(jids)] = err
		}
		if errs[len(jids)] == nil {
			deleted++
		}
	}
	t.Logf("%d races: %d batches deleted, %d jobs requeued; answers %v", races, deleted, requeued, answers)

	// No live job without its batch, no lock left behind.
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jids, _, err := conn.Children(f.zkRoot + "/jobs")
	if err != nil {
		t.Fatal(err)
	}
	for _, jid := range jids {
		if !queue.ValidJobID(jid) {
			continue
		}
		bid, _, err := conn.Get(path.Join(f.zkRoot, "jobs", jid, "bid"))
		if err != nil {
			t.Errorf("job %s: reading its bid: %v", jid, err)
			continue
		}
		if ok, _, err := conn.Exists(path.Join(f.zkRoot, "batches", string(bid), "status")); err != nil || !ok {
			j, _ := jobs.NewReader(f.q).GetJob(ctx, jid)
			t.Errorf("job %s (%s) lives on without its batch %s", jid, queue.JobStateName(j.GetStatus().GetStatus()), bid)
		}
		if ok, _, _ := conn.Exists(path.Join(f.zkRoot, "jobs", jid, "lock")); ok {
			t.Errorf("job %s is left locked", jid)
		}
	}
	batches, _, err := conn.Children(f.zkRoot + "/batches")
	if err != nil {
		t.Fatal(err)
	}
	for _, bid := range batches {
		if ok, _, _ := conn.Exists(path.Join(f.zkRoot, "batches", bid, "lock")); ok {
			t.Errorf("batch %s is left locked", bid)
		}
	}
	r, err := f.admin.Fsck(ctx, &v1.FsckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range r.GetDamages() {
		t.Errorf("fsck: %s %s: %s", d.GetKind(), d.GetItem(), d.GetDetail())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the races ran out of time")
	}
}

// TestAJobWithAGarbledPriorityIsStillReadAndFailedByAnOperator: another
// writer left "abc" in a job's priority. GetJob and ListJobs read the job
// (at its entry's priority), Fsck names the node, FailJob fails the job and
// writes the priority anew.
func TestAJobWithAGarbledPriorityIsStillReadAndFailedByAnOperator(t *testing.T) {
	f := newFixture(t)
	_, jids := f.batch("demo", "demo_coll", 1)
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prio := path.Join(f.zkRoot, "jobs", jids[0], "priority")
	if _, err := conn.Set(prio, []byte("abc"), -1); err != nil {
		t.Fatal(err)
	}
	g, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0]})
	if err != nil || g.GetJob().GetPriority() != 5 {
		t.Fatalf("GetJob: %v %v", g, err)
	}
	if l, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{State: queue.Pending}); err != nil || len(l.GetJobs()) != 1 {
		t.Errorf("ListJobs: %v %v", l, err)
	}
	r, err := f.admin.Fsck(f.ctx, &v1.FsckRequest{})
	if err != nil || len(r.GetDamages()) != 1 || r.GetDamages()[0].GetKind() != admin.DamagePriorityUnreadable {
		t.Errorf("Fsck: %v %v", r, err)
	}
	fj, err := f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[0], Message: "given up"})
	if err != nil || fj.GetJob().GetStatus().GetStatus() != queue.Failed {
		t.Fatalf("FailJob: %v %v", fj, err)
	}
	if data, _, err := conn.Get(prio); err != nil || string(data) != "5" {
		t.Errorf("priority after FailJob: %q %v", data, err)
	}
	if r, err := f.admin.Fsck(f.ctx, &v1.FsckRequest{}); err != nil || !r.GetClean() {
		t.Errorf("Fsck after: %v %v", r, err)
	}
}
