package queue

import (
	"context"
	"errors"
	"sync"
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

// TestRacingSessionsTakeEachJobOncePerState drives 1,000 jobs through every
// state with 8 sessions, each running consumers for every state: every job
// is taken exactly once per state, in pipeline order, and ends Completed.
func TestRacingSessionsTakeEachJobOncePerState(t *testing.T) {
	if testing.Short() {
		t.Skip("long race test; run without -short")
	}
	const sessions, perState, jobs = 8, 2, 1000
	root := zktest.Root(t)
	admin := newClientAt(t, root)
	bid, jids := spawn(t, admin, jobs, DefaultPriority)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	taken := map[string][]JobState{} // jid → states it was taken in, in order
	var completed sync.WaitGroup
	completed.Add(jobs)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for s := 0; s < sessions; s++ {
		c := newClientAt(t, root)
		for _, p := range pipeline {
			co := c.NewConsumer(p.from, ConsumerOptions{})
			for g := 0; g < perState; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						cl, err := co.Next(ctx)
						if err != nil {
							if ctx.Err() == nil {
								select {
								case errs <- err:
								default:
								}
							}
							return
						}
						mu.Lock()
						taken[cl.ID()] = append(taken[cl.ID()], cl.State())
						mu.Unlock()
						if err := cl.Commit(ctx, Change{To: p.to}); err != nil {
							select {
							case errs <- err:
							default:
							}
							return
						}
						if p.to == Completed {
							completed.Done()
						}
					}
				}()
			}
		}
	}
	done := make(chan struct{})
	go func() { completed.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errs:
		t.Fatalf("consumer failed: %v", err)
	case <-ctx.Done():
		t.Fatalf("not all jobs completed: %v", ctx.Err())
	}
	cancel()
	wg.Wait()

	want := []JobState{Pending, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify}
	for _, jid := range jids {
		got := taken[jid]
		if len(got) != len(want) {
			t.Fatalf("%s taken %d times (%v), want once per state", jid, len(got), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s taken in %v, want %v", jid, got, want)
			}
		}
	}
	counts := jobCounts(t, admin)
	if counts[Completed] != jobs {
		t.Errorf("completed = %d, want %d (counts %v)", counts[Completed], jobs, counts)
	}
	bcounts, _ := admin.BatchCounts(testCtx(t), bid)
	if bcounts.GetCompleted() != jobs || bcounts.GetProcessing() != 0 {
		t.Errorf("batch counts %v", bcounts)
	}
	damages, err := fsckDamages(testCtx(t), admin, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(damages) > 0 {
		t.Errorf("fsck after the race: %v", damages)
	}
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
