package jobs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// pipeline is each working state and the state a successful step leads to.
var pipeline = []struct{ from, to queue.JobState }{
	{queue.Pending, queue.Estimating}, {queue.Estimating, queue.Provisioning}, {queue.Provisioning, queue.Downloading},
	{queue.Downloading, queue.Processing}, {queue.Processing, queue.Storing}, {queue.Storing, queue.Recording}, {queue.Recording, queue.Notify},
	{queue.Notify, queue.Completed},
}

// TestClosedSessionFreesItsJobAndItsLateCommitFails: a consumer whose
// session ends mid-step loses the job to another consumer and cannot commit.
func TestClosedSessionFreesItsJobAndItsLateCommitFails(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, a.s, 1, queue.DefaultPriority)
	cl, err := a.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case <-cl.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("claim context not cancelled when its session ended")
	}
	clB, err := b.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if clB.ID() != jids[0] {
		t.Fatalf("B took %s, want %s", clB.ID(), jids[0])
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); !errors.Is(err, queue.ErrFenced) {
		t.Fatalf("late commit of the dead consumer: %v, want ErrFenced", err)
	}
	if err := clB.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
		t.Fatalf("live consumer's commit: %v", err)
	}
}

// TestExpiredSessionLosesItsJobAndItsLateCommitFails cuts a consumer off from
// ZooKeeper until the server expires its session. Another consumer takes the
// job; when the first one comes back its claim is gone and its commit, even
// one sent on its new session, is refused.
func TestExpiredSessionLosesItsJobAndItsLateCommitFails(t *testing.T) {
	root := zktest.Root(t)
	a, proxy := proxiedClient(t, root, 2*time.Second)
	ctx := testCtx(t)
	b := newClientAt(t, root)
	_, jids := queuetest.SpawnBatch(t, b.s, 1, queue.DefaultPriority)
	cl, err := a.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	// B gets the job once the server has expired A's session.
	clB, err := b.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if clB.ID() != jids[0] {
		t.Fatalf("B took %s", clB.ID())
	}
	proxy.Unblock()
	select {
	case <-cl.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("A's claim context was not cancelled after its session expired")
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); !errors.Is(err, queue.ErrFenced) {
		t.Fatalf("A's late commit: %v, want ErrFenced", err)
	}
	if err := clB.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
		t.Fatalf("B's commit: %v", err)
	}
}

// TestStolenLockFencesTheFormerOwner: even if the old owner's client never
// noticed (it still has a session), the new owner's claim changed the status
// version, so the old owner's commit is refused by ZooKeeper itself.
func TestStolenLockFencesTheFormerOwner(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, a.s, 1, queue.DefaultPriority)
	clA, err := a.ClaimJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	// An operator (or the server, on expiry) removes A's lock.
	if err := a.z.Delete(ctx, a.p.Job(jids[0]).Lock(), -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-clA.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A's claim context not cancelled when its lock was removed")
	}
	clB, err := b.ClaimJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	// A's client still has its session; only ZooKeeper can refuse it now.
	if err := clA.Commit(ctx, jobs.Change{To: queue.Estimating}); !errors.Is(err, queue.ErrFenced) {
		t.Fatalf("former owner's commit: %v, want ErrFenced", err)
	}
	if err := clB.Commit(ctx, jobs.Change{To: queue.Held}); err != nil {
		t.Fatal(err)
	}
	if job, _ := b.GetJob(ctx, jids[0]); job.GetStatus().GetStatus() != queue.Held {
		t.Errorf("status %s, want Held", queue.JobStateName(job.GetStatus().GetStatus()))
	}
}
