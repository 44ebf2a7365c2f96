package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/zktest"
)

// pipeline is each working state and the state a successful step leads to.
var pipeline = []struct{ from, to JobState }{
	{Pending, Estimating}, {Estimating, Provisioning}, {Provisioning, Downloading},
	{Downloading, Processing}, {Processing, Storing}, {Storing, Recording}, {Recording, Notify},
	{Notify, Completed},
}

// TestClosedSessionFreesItsJobAndItsLateCommitFails: a consumer whose
// session ends mid-step loses the job to another consumer and cannot commit.
func TestClosedSessionFreesItsJobAndItsLateCommitFails(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := spawn(t, a, 1, DefaultPriority)
	cl, err := a.NewConsumer(Pending, ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case <-cl.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("claim context not cancelled when its session ended")
	}
	clB, err := b.NewConsumer(Pending, ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if clB.ID() != jids[0] {
		t.Fatalf("B took %s, want %s", clB.ID(), jids[0])
	}
	if err := cl.Commit(ctx, Change{To: Estimating}); !errors.Is(err, ErrFenced) {
		t.Fatalf("late commit of the dead consumer: %v, want ErrFenced", err)
	}
	if err := clB.Commit(ctx, Change{To: Estimating}); err != nil {
		t.Fatalf("live consumer's commit: %v", err)
	}
}

// TestExpiredSessionLosesItsJobAndItsLateCommitFails cuts a consumer off from
// ZooKeeper until the server expires its session. Another consumer takes the
// job; when the first one comes back its claim is gone and its commit, even
// one sent on its new session, is refused.
func TestExpiredSessionLosesItsJobAndItsLateCommitFails(t *testing.T) {
	root := zktest.Root(t)
	proxy, err := zktest.NewProxy(zktest.Servers(t)[0])
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ctx := testCtx(t)
	a, err := Connect(ctx, Options{Servers: []string{proxy.Addr}, Root: root, SessionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := newClientAt(t, root)
	_, jids := spawn(t, b, 1, DefaultPriority)
	cl, err := a.NewConsumer(Pending, ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	// B gets the job once the server has expired A's session.
	clB, err := b.NewConsumer(Pending, ConsumerOptions{}).Next(ctx)
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
	if err := cl.Commit(ctx, Change{To: Estimating}); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's late commit: %v, want ErrFenced", err)
	}
	if err := clB.Commit(ctx, Change{To: Estimating}); err != nil {
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
	_, jids := spawn(t, a, 1, DefaultPriority)
	clA, err := a.ClaimJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	// An operator (or the server, on expiry) removes A's lock.
	if err := a.conn.Delete(a.p.jobLock(jids[0]), -1); err != nil {
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
	if err := clA.Commit(ctx, Change{To: Estimating}); !errors.Is(err, ErrFenced) {
		t.Fatalf("former owner's commit: %v, want ErrFenced", err)
	}
	if err := clB.Commit(ctx, Change{To: Held}); err != nil {
		t.Fatal(err)
	}
	if job, _ := b.GetJob(ctx, jids[0]); job.GetStatus().GetStatus() != Held {
		t.Errorf("status %s, want Held", JobStateName(job.GetStatus().GetStatus()))
	}
}
