package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestReleaseDuringAConnectionLossFreesTheJobOnceReconnected: a consumer
// gives a job back while its connection is down but its session lives on
// (as during a ZooKeeper leader election). The release must go through
// once the connection is back: a lock left behind would hold the job for as
// long as the consumer lives, with nobody working on it.
func TestReleaseDuringAConnectionLossFreesTheJobOnceReconnected(t *testing.T) {
	root := zktest.Root(t)
	a, proxy := proxiedClient(t, root, 20*time.Second)
	b := newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, b.s, 1, queue.DefaultPriority)
	cl, err := a.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sess := a.s.ID()
	releases := func() int64 { return requestCount(a, "multi.delete", "jobs/*/lock") }
	before := releases()
	proxy.Block()
	released := make(chan error, 1)
	go func() { released <- cl.Release(context.WithoutCancel(ctx)) }()
	// The connection comes back once the release has been tried without
	// it, well inside the session timeout.
	waittest.True(t, 10*time.Second, "the release tried while the connection is down", func() bool { return releases() > before })
	proxy.Unblock()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release across the connection loss: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Release never returned")
	}
	if a.s.ID() != sess {
		t.Fatalf("the session changed (0x%x → 0x%x): the test needs it to survive the cut", sess, a.s.ID())
	}
	j, err := b.GetJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.GetLocked() {
		t.Fatalf("job %s still locked after its release", jids[0])
	}
	clB, _, err := b.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).TryNext(ctx)
	if err != nil || clB == nil || clB.ID() != jids[0] {
		t.Fatalf("another consumer could not take the released job: %v, %v", clB, err)
	}
}

// TestObjectUnlockAfterItsSessionEndedLeavesTheNextHoldersLock: a process
// that lost its session (frozen, cut off) while it held an object's lock,
// and comes back to unlock it, must not remove the lock another process
// has taken since: that would let a third store the object at the same
// time.
func TestObjectUnlockAfterItsSessionEndedLeavesTheNextHoldersLock(t *testing.T) {
	root := zktest.Root(t)
	a, proxy := proxiedClient(t, root, 2*time.Second)
	b := newClientAt(t, root)
	ctx := testCtx(t)
	const ark = "ark:/99999/fk4unlock"
	lockA, err := a.LockStorage(ctx, ark)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Block()
	// B gets the lock once the server has expired A's session.
	var lockB *jobs.ObjectLock
	waittest.Until(t, 30*time.Second, func() error {
		lockB, err = b.LockStorage(ctx, ark)
		return err
	})
	proxy.Unblock()
	unlockCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := lockA.Unlock(unlockCtx); err != nil {
		t.Fatalf("A's late unlock: %v", err)
	}
	storage := storageLocks(t, b)
	if len(storage) != 1 || storage[0] != queue.LockName(ark) {
		t.Fatalf("storage locks after A's late unlock: %v; B's lock must stay", storage)
	}
	if err := lockB.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if storage := storageLocks(t, b); len(storage) != 0 {
		t.Fatalf("B's unlock left %v", storage)
	}
}

// TestMintingWhoseAnswerIsLostGivesOneIdentifier: the connection drops
// while the minting multi is with the server (a ZooKeeper server goes
// away), before or after the server applied it. Minting must not fail the
// job: it learns from the job's identifiers whether its number was taken,
// mints again if not, and never uses two numbers for one job.
func TestMintingWhoseAnswerIsLostGivesOneIdentifier(t *testing.T) {
	cases := []struct {
		name    string
		applied bool // the server applied the multi before its answer was lost
	}{
		{"lost before the server applied it", false},
		{"answer lost after the server applied it", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := zktest.Root(t)
			c := newClientAt(t, root)
			ctx := testCtx(t)
			queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cut := false
			c.cutMultis(func(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
				// The write that records the minted id in the job.
				minting := writes(ops, c.p.Job(cl.ID()).Node(queue.NodeIdentifiers))
				if !minting || cut {
					return send(ops)
				}
				cut = true
				if tc.applied {
					send(ops)
				}
				return nil, zk.ErrConnectionClosed
			})
			id, err := cl.MintFromCounter(ctx, "shoulder", func(n int64) string { return fmt.Sprintf("ark:/99999/fk4%d", n) })
			if err != nil {
				t.Fatalf("MintFromCounter: %v", err)
			}
			if !cut {
				t.Fatal("the minting multi was never sent")
			}
			if id != "ark:/99999/fk41" {
				t.Errorf("minted %s, want ark:/99999/fk41: one number per job", id)
			}
			j, err := c.GetJob(ctx, cl.ID())
			if err != nil {
				t.Fatal(err)
			}
			if got := j.GetIdentifiers().GetPrimaryId(); got != id {
				t.Errorf("the job's identifiers say %q, minting said %q", got, id)
			}
			// The next job gets the next number: the lost answer used none.
			queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			next, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if id, err := next.MintFromCounter(ctx, "shoulder", func(n int64) string { return fmt.Sprintf("ark:/99999/fk4%d", n) }); err != nil || id != "ark:/99999/fk42" {
				t.Errorf("the next job minted %s, %v; want ark:/99999/fk42", id, err)
			}
		})
	}
}

// TestClaimWhoseAnswerIsLostAfterItWasAppliedIsKept: the connection drops
// after the server applied a claim (the lock created, the status version
// taken) but before its answer came. The claim is this session's: the
// consumer must hold it as a claim, not report an error and leave a lock
// that nobody works under for as long as the process lives.
func TestClaimWhoseAnswerIsLostAfterItWasAppliedIsKept(t *testing.T) {
	root := zktest.Root(t)
	c := newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	cut := false
	c.cutMultis(func(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
		claiming := writes(ops, c.p.Job(jids[0]).Lock())
		if !claiming || cut {
			return send(ops)
		}
		cut = true
		send(ops)
		return nil, zk.ErrConnectionClosed
	})
	cl, _, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).TryNext(ctx)
	if !cut {
		t.Fatal("the claim was never sent")
	}
	if err != nil || cl == nil {
		t.Fatalf("TryNext after the claim's answer was lost: %v, %v; want the claim", cl, err)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
		t.Fatalf("committing the kept claim: %v", err)
	}
	j, err := c.GetJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.GetLocked() || j.GetStatus().GetStatus() != queue.Estimating {
		t.Errorf("job %s is %s, locked %v; want Estimating, unlocked", jids[0], queue.JobStateName(j.GetStatus().GetStatus()), j.GetLocked())
	}
}

// TestADeletionWhoseAnswerIsLostAfterItWasAppliedIsDone: the connection
// drops after the server applied an operator's deletion of a job but
// before its answer came. The status went with the job, which tells the
// deletion's Txn it was applied: the deletion is done, not an error of an
// unknown outcome.
func TestADeletionWhoseAnswerIsLostAfterItWasAppliedIsDone(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	jid := jids[0]
	if _, err := operatorMove(ctx, c, jid, queue.Pending, queue.Held, "held to be deleted"); err != nil {
		t.Fatal(err)
	}
	cl, err := c.ClaimForOperator(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	cut := false
	c.cutMultis(func(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
		deleting := slices.ContainsFunc(ops, func(op any) bool {
			d, ok := op.(*zk.DeleteRequest)
			return ok && d.Path == c.p.Job(jid).Status()
		})
		if !deleting || cut {
			return send(ops)
		}
		cut = true
		if res, err := send(ops); err != nil {
			return res, err
		}
		return nil, zk.ErrConnectionClosed
	})
	err = cl.Delete(ctx)
	if !cut {
		t.Fatal("the deletion was never sent")
	}
	if err != nil {
		t.Fatalf("a deletion applied, its answer lost: %v; want it done", err)
	}
	if _, err := c.GetJob(ctx, jid); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("reading the deleted job: %v, want %v", err, queue.ErrNotFound)
	}
}

// TestABatchRemovalWhoseAnswerIsLostAfterItWasAppliedIsDone: the
// connection drops after the server applied the last multi of a completed
// batch's removal (its tree and its lock) but before its answer came. The
// multi is fenced by the batch's claim and deletes its status, which tells
// it was applied: the removal is done.
func TestABatchRemovalWhoseAnswerIsLostAfterItWasAppliedIsDone(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	bid, jids := queuetest.SpawnBatch(t, c.s, 2, queue.DefaultPriority)
	completeBatch(t, c, bid, jids)
	bc, err := c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	cut := false
	c.cutMultis(func(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
		removing := slices.ContainsFunc(ops, func(op any) bool {
			d, ok := op.(*zk.DeleteRequest)
			return ok && d.Path == c.p.Batch(bid).Status()
		})
		if !removing || cut {
			return send(ops)
		}
		cut = true
		if res, err := send(ops); err != nil {
			return res, err
		}
		return nil, zk.ErrConnectionClosed
	})
	removed, err := bc.Remove(ctx)
	if !cut {
		t.Fatal("the batch's removal was never sent")
	}
	if err != nil || len(removed) != 2 {
		t.Fatalf("a removal applied, its answer lost: %d jobs removed, %v; want 2, done", len(removed), err)
	}
	if _, err := c.b.GetBatch(ctx, bid); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("reading the removed batch: %v, want %v", err, queue.ErrNotFound)
	}
}

// TestClaimTakesTheDataAsItIsWhenTheLockIsTaken: the claim reads a job's
// data before it takes the lock. A writer that changes a data node in
// between (leaving the status alone) must not leave the claim holding what
// it read before: the claim checks the versions it read and reads again.
func TestClaimTakesTheDataAsItIsWhenTheLockIsTaken(t *testing.T) {
	root := zktest.Root(t)
	c, other := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	changed := false
	c.cutMultis(func(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
		claiming := writes(ops, c.p.Job(jids[0]).Lock())
		if claiming && !changed {
			changed = true
			if _, err := other.z.Set(ctx, c.p.Job(jids[0]).Node(queue.NodeSpaceNeeded), queue.EncodeInt(4096), -1); err != nil {
				t.Errorf("changing space_needed: %v", err)
			}
		}
		return send(ops)
	})
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartSpaceNeeded}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Fatal("the claim was never sent")
	}
	if got := cl.Job.GetSpaceNeeded(); got != 4096 {
		t.Errorf("claimed with space_needed %d, want 4096: the value written before the lock was taken", got)
	}
}

// TestRegisterWorkerWaitsForZooKeeperAtStart: a service starts while its
// ZooKeeper connection is down (the ensemble electing a leader). Its worker
// registration must wait for ZooKeeper and go through once it answers, not
// fail the start.
func TestRegisterWorkerWaitsForZooKeeperAtStart(t *testing.T) {
	root := zktest.Root(t)
	a, proxy := proxiedClient(t, root, 20*time.Second)
	b := newClientAt(t, root)
	ctx := testCtx(t)
	// The registration's first write reaches the server; its answer is
	// held, and the connection cut before it arrives. The connection
	// comes back once the registration has been tried again without it.
	proxy.SetDelay(zktest.Delay{}, zktest.Delay{Min: 2 * time.Second})
	id := a.NewWorkerID("estimator")
	type registered struct {
		reg *jobs.WorkerRegistration
		err error
	}
	done := make(chan registered, 1)
	go func() {
		reg, err := a.RegisterWorker(ctx, &v1.WorkerInfo{Id: id, Service: "estimator", Stage: "Estimating"})
		done <- registered{reg, err}
	}()
	writes := func() int64 {
		return requestCount(a, "set", "workers/*") + requestCount(a, "multi.create", "workers/*")
	}
	waittest.True(t, 10*time.Second, "the registration's first write sent", func() bool { return writes() > 0 })
	before := writes()
	proxy.Block()
	proxy.SetDelay(zktest.Delay{}, zktest.Delay{})
	waittest.True(t, 10*time.Second, "the registration tried again while the connection is down", func() bool { return writes() > before })
	proxy.Unblock()
	r := <-done
	reg, err := r.reg, r.err
	if err != nil {
		t.Fatalf("RegisterWorker while ZooKeeper is away: %v", err)
	}
	defer reg.Close(ctx)
	if ws := workerEntries(t, b); len(ws) != 1 || ws[0].GetId() != id {
		t.Fatalf("worker entries %v, want %s's", ws, id)
	}
}

// TestWorkerIDsOfOneClientNeverRepeat: every runner of a process gets an
// id of its own (the processor makes two in the same instant).
func TestWorkerIDsOfOneClientNeverRepeat(t *testing.T) {
	c := newClient(t)
	seen := map[string]bool{}
	for range 10000 {
		id := c.NewWorkerID("processor")
		if seen[id] || !queue.ValidWorkerID(id) {
			t.Fatalf("worker id %s: repeated or not a valid id", id)
		}
		seen[id] = true
	}
}
