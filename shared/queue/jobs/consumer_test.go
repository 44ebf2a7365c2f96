package jobs_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestConsumerWakesOnANewJobWithoutPolling(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{})
	got := make(chan *jobs.Claim, 1)
	go func() {
		cl, err := co.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- cl
	}()
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	select {
	case cl := <-got:
		if cl.ID() != jids[0] {
			t.Errorf("took %s, want %s", cl.ID(), jids[0])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a waiting consumer did not take the new job")
	}
}

func TestConsumerTakesJobsByPriorityThenAge(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, low := queuetest.SpawnBatch(t, c.s, 2, 9)
	_, high := queuetest.SpawnBatch(t, c.s, 2, 1)
	_, mid := queuetest.SpawnBatch(t, c.s, 1, 5)
	// A peer writer's three-digit priority must sort after 99, not after 1.
	_, peer := queuetest.SpawnBatch(t, c.s, 1, 99)
	if err := c.z.Delete(ctx, c.p.Entry(queue.Pending, 99, peer[0]), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.z.Create(ctx, c.p.StateDir(queue.Pending)+"/150-"+peer[0], nil, 0); err != nil {
		t.Fatal(err)
	}
	want := append(append(append(high, mid...), low...), peer...)
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1})
	for i, w := range want {
		cl, err := co.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cl.ID() != w {
			t.Fatalf("take %d: got %s, want %s (order %v)", i, cl.ID(), w, want)
		}
		if err := cl.Commit(ctx, jobs.Change{To: queue.Held}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPausedQueueGivesNoWorkUntilUnpaused(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	pause(t, c)
	if p, _ := c.Paused(ctx); !p {
		t.Fatal("Paused() = false after Pause")
	}
	queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(short); err == nil {
		t.Fatalf("took %s while paused", cl.ID())
	}
	unpause(t, c)
	if _, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx); err != nil {
		t.Fatalf("after unpause: %v", err)
	}
	// Admin tools may still take work while paused.
	pause(t, c)
	defer unpause(t, c)
	queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	if _, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{IgnorePause: true}).Next(ctx); err != nil {
		t.Fatalf("IgnorePause consumer: %v", err)
	}
}

func TestReleasedJobWakesAWaitingConsumer(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, a.s, 1, queue.DefaultPriority)
	clA, err := a.ClaimJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	co := b.NewConsumer(queue.Pending, jobs.ConsumerOptions{})
	go func() {
		cl, err := co.Next(ctx)
		if err == nil {
			got <- cl.ID()
		}
	}()
	waittest.True(t, 20*time.Second, "B finds the job locked", func() bool { return co.WaitsForLock(jids[0]) })
	if err := clA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		if id != jids[0] {
			t.Errorf("B took %s", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("releasing a job did not wake the consumer waiting for it")
	}
}

func TestAJobReleasedByItsConsumersClaimIsTakenAgainByThatConsumerAfterAPause(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 2, queue.DefaultPriority)
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1})
	var claims []*jobs.Claim
	for range jids {
		cl, err := co.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, cl)
	}
	// The folder never changes, so only the consumer's own bookkeeping can
	// bring them back, not before ReleasedRetryAfter, in queue order.
	released := time.Now()
	for _, cl := range claims {
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range jids {
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cl, err := co.Next(waitCtx)
		cancel()
		if err != nil {
			t.Fatalf("take %d after the release: %v", i, err)
		}
		if cl.ID() != want {
			t.Errorf("take %d after the release: %s, want %s", i, cl.ID(), want)
		}
		if waited := time.Since(released); waited < jobs.ReleasedRetryAfter {
			t.Errorf("take %d came %s after the release, before ReleasedRetryAfter (%s)", i, waited, jobs.ReleasedRetryAfter)
		}
	}
}

// A job its claim gave back goes to another consumer waiting for it, not
// straight back to the consumer that released it (which, taking it again
// at once, would keep it from everyone else).
func TestAReleasedJobGoesToTheOtherWaitingConsumerFirst(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, a.s, 1, queue.DefaultPriority)
	for range 5 {
		coA := a.NewConsumer(queue.Pending, jobs.ConsumerOptions{})
		// A leaves the job it gave back alone for far longer than B needs
		// to take it: which claims first says which was offered it first.
		coA.SetRetryGap(time.Hour)
		clA, err := coA.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		coB := b.NewConsumer(queue.Pending, jobs.ConsumerOptions{})
		got := make(chan *jobs.Claim, 1)
		go func() {
			if cl, err := coB.Next(ctx); err == nil {
				got <- cl
			}
		}()
		queuetest.Eventually(t, "B finds the job locked and waits for it", func() bool { return coB.WaitsForLock(jids[0]) })
		if err := clA.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A asks again at once, racing B.
		raced := make(chan *jobs.Claim, 1)
		raceCtx, cancel := context.WithCancel(ctx)
		go func() {
			if cl, err := coA.Next(raceCtx); err == nil {
				raced <- cl
			}
		}()
		select {
		case clB := <-got:
			if clB.ID() != jids[0] {
				t.Fatalf("B took %s", clB.ID())
			}
			cancel()
			if err := clB.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case cl := <-raced:
			cancel()
			t.Fatalf("the consumer that released %s took it back before the waiting one", cl.ID())
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatal("the waiting consumer never got the released job")
		}
	}
}

func TestObjectLocksAreExclusive(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	l, err := a.LockStorage(ctx, "ark:/99999/fk4x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.LockStorage(ctx, "ark:/99999/fk4x"); err == nil {
		t.Fatal("second storage lock on one ARK was granted")
	}
	if st := storageLocks(t, a); len(st) != 1 || st[0] != "ark_99999_fk4x" {
		t.Errorf("storage locks = %v, want [ark_99999_fk4x]", st)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LockStorage(ctx, "ark:/99999/fk4x"); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
}

// TestBatchFeedReportsEachStepOfABatchesLife follows one batch through the
// feed: pending, then (after its jobs ended) done, then reporting.
func TestBatchFeedReportsEachStepOfABatchesLife(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	feed := c.b.WatchBatches(ctx)
	bid, err := c.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	next := func(want func(batches.BatchWork) bool) batches.BatchWork {
		t.Helper()
		for {
			select {
			case w := <-feed:
				if w.Bid == bid && want(w) {
					return w
				}
			case <-time.After(30 * time.Second):
				t.Fatal("feed said nothing")
			}
		}
	}
	next(func(w batches.BatchWork) bool { return w.Status == queue.BatchPending && w.Spawning })
	bc, err := c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing})
	jids, err := bc.CreateJobs(ctx, []batches.NewJob{{Priority: 5, Configuration: &v1.JobConfiguration{}}})
	if err != nil {
		t.Fatal(err)
	}
	bc.FinishSpawning(ctx)
	for _, p := range pipeline {
		queuetest.Move(t, c.s, jids[0], jobs.Change{To: p.to})
	}
	next(func(w batches.BatchWork) bool { return w.Status == queue.BatchProcessing && w.Done })
	bc, err = c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting}); err != nil {
		t.Fatal(err)
	}
	next(func(w batches.BatchWork) bool { return w.Status == queue.BatchReporting })
}

// TestHalfSpawnedBatchIsFinishedWithoutDuplicates: a batcher dies after
// creating some jobs; the feed reports the batch, and a second batcher
// learns which entries exist.
func TestHalfSpawnedBatchIsFinishedWithoutDuplicates(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	bid, err := a.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	bc, _ := a.b.ClaimBatch(ctx, bid)
	bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing})
	first, err := bc.CreateJobs(ctx, []batches.NewJob{
		{Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 0}},
		{Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a.Close() // dies before entries 2 and 3

	feedCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var work batches.BatchWork
	for w := range b.b.WatchBatches(feedCtx) {
		if w.Bid == bid {
			work = w
			break
		}
	}
	if work.Status != queue.BatchProcessing || !work.Spawning {
		t.Fatalf("feed reported %+v, want a Processing batch still spawning", work)
	}
	bc2, err := b.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if !bc2.Spawning {
		t.Fatal("claim does not say the batch is half spawned")
	}
	have, err := bc2.SpawnedEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(have) != 2 || have[0].ID != first[0] || have[1].ID != first[1] {
		t.Fatalf("SpawnedEntries = %v, want entries 0 and 1", have)
	}
	if _, err := bc2.CreateJobs(ctx, []batches.NewJob{
		{Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 2}},
		{Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 3}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := bc2.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.b.BatchCounts(ctx, bid); n.GetProcessing() != 4 {
		t.Errorf("batch has %d live jobs, want 4", n.GetProcessing())
	}
}

// TestAPayloadRecordWrittenWithTheTakeIsReadByTheNextClaimAndKeepsWhySpawningStopped:
// the record of the payload's reading is written with the move to
// Processing, before any job; a batcher that finishes the half-spawned
// batch reads it with its claim. Stopping the spawning keeps the digest,
// adds the reason, releases the batch (no job can be created after) and
// lets the feed treat it as a batch waiting for its jobs; a record is
// refused on any other move, and the batch's deletion removes it.
func TestAPayloadRecordWrittenWithTheTakeIsReadByTheNextClaimAndKeepsWhySpawningStopped(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	bid, err := a.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	rec := &queue.PayloadRecord{SHA256: strings.Repeat("ab", 32), Size: 1234}
	bc, err := a.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if bc.Payload != nil {
		t.Fatalf("a pending batch has a payload record %+v", bc.Payload)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing, Payload: rec}); err != nil {
		t.Fatal(err)
	}
	if got := queuetest.NodeData(t, a.s, a.p.Batch(bid).Node(queue.NodePayload)); got != `{"sha256":"`+rec.SHA256+`","size":1234}` {
		t.Errorf("payload node %s", got)
	}
	if _, err := bc.CreateJobs(ctx, []batches.NewJob{{Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 0}}}); err != nil {
		t.Fatal(err)
	}
	a.Close()

	bc2, err := b.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if !bc2.Spawning || bc2.Payload == nil || *bc2.Payload != *rec {
		t.Fatalf("claim of the half-spawned batch: spawning %v, payload %+v, want %+v", bc2.Spawning, bc2.Payload, rec)
	}
	if err := bc2.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Payload: rec}); !errors.Is(err, queue.ErrInvalid) {
		t.Errorf("a record with Processing → Failed: %v, want ErrInvalid", err)
	}
	if err := bc2.StopSpawning(ctx, "", "no reason"); !errors.Is(err, queue.ErrInvalid) {
		t.Errorf("stopping without a reason: %v, want ErrInvalid", err)
	}
	if err := bc2.StopSpawning(ctx, "the payload changed", "the payload changed; 1 job goes on"); err != nil {
		t.Fatal(err)
	}
	if _, err := bc2.CreateJobs(ctx, []batches.NewJob{{Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 1}}}); err == nil {
		t.Error("a job was created after the spawning stopped")
	}
	got, err := b.b.GetBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetLocked() || got.GetStatus().GetStatus() != queue.BatchProcessing || got.GetStatus().GetMessage() != "the payload changed; 1 job goes on" ||
		got.GetCounts().GetProcessing() != 1 {
		t.Errorf("after stopping: %v, locked %v, counts %v", got.GetStatus(), got.GetLocked(), got.GetCounts())
	}

	bc3, err := b.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	want := queue.PayloadRecord{SHA256: rec.SHA256, Size: rec.Size, SpawnStopped: "the payload changed"}
	if bc3.Spawning || bc3.Payload == nil || *bc3.Payload != want {
		t.Fatalf("claim after stopping: spawning %v, payload %+v, want %+v", bc3.Spawning, bc3.Payload, want)
	}
	if err := bc3.StopSpawning(ctx, "again", "again"); !errors.Is(err, queue.ErrWrongState) {
		t.Errorf("stopping a batch no longer spawning: %v, want ErrWrongState", err)
	}
	if err := bc3.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Message: "failed"}); err != nil {
		t.Fatal(err)
	}
	jids, err := b.BatchJobIDs(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := b.ClaimJob(ctx, jids["batch-processing"][0])
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: "given up"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.New(b.s).Batches.Delete(ctx, bid); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := b.z.Exists(ctx, b.p.Batch(bid).Dir()); err != nil || ok {
		t.Errorf("the batch's tree is still there after its deletion (%v)", err)
	}
}

func TestWorkerEntryLivesAndDiesWithItsSession(t *testing.T) {
	root := zktest.Root(t)
	a, admin := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	reg, err := a.RegisterWorker(ctx, &v1.WorkerInfo{Id: "estimator-host-1", Service: "estimator", Stage: "Estimating"})
	if err != nil {
		t.Fatal(err)
	}
	reg.Update(func(w *v1.WorkerInfo) {
		w.InFlight = append(w.InFlight, &v1.InFlightJob{JobId: "jid0000000001"})
	})
	queuetest.Eventually(t, "the worker's entry says its job in flight", func() bool {
		ws := workerEntries(t, admin)
		return len(ws) == 1 && len(ws[0].GetInFlight()) == 1 && ws[0].GetService() == "estimator"
	})
	if _, err := a.RegisterWorker(ctx, &v1.WorkerInfo{Id: "bad/id"}); err == nil {
		t.Error("a worker id with '/' was accepted")
	}
	a.Close() // the replica dies: its entry goes with its session
	queuetest.Eventually(t, "the dead replica's entry gone", func() bool { return len(workerEntries(t, admin)) == 0 })
}

func TestMintFromCounterRecordsTheIDAtomicallyAndOnce(t *testing.T) {
	root := zktest.Root(t)
	a, b := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, a.s, 2, 5)
	mk := func(n int64) string { return "ark:/99999/fk4" + strconv.FormatInt(n, 10) }
	cl1, _ := a.ClaimJob(ctx, jids[0])
	cl2, _ := b.ClaimJob(ctx, jids[1])
	id1, err := cl1.MintFromCounter(ctx, "ark:/99999/fk4", mk)
	if err != nil {
		t.Fatal(err)
	}
	id2, err := cl2.MintFromCounter(ctx, "ark:/99999/fk4", mk)
	if err != nil {
		t.Fatal(err)
	}
	if id1 == id2 {
		t.Fatalf("two jobs got the same id %s", id1)
	}
	// The id is in ZooKeeper already: a restarted step reuses it.
	cl1.Release(ctx)
	again, _ := a.ClaimJob(ctx, jids[0])
	id1b, err := again.MintFromCounter(ctx, "ark:/99999/fk4", mk)
	if err != nil || id1b != id1 {
		t.Fatalf("after restart: %s, %v; want %s", id1b, err, id1)
	}
	if got, err := a.BindLocalID(ctx, "demo", "loc001", id1); err != nil || got != id1 {
		t.Fatalf("bind: %s, %v", got, err)
	}
	if got, _ := b.BindLocalID(ctx, "demo", "loc001", id2); got != id1 {
		t.Errorf("rebinding returned %s, want the first binding %s", got, id1)
	}
	if got, err := b.LookupLocalID(ctx, "demo", "loc001"); err != nil || got != id1 {
		t.Errorf("lookup: %s, %v", got, err)
	}
	if _, err := b.LookupLocalID(ctx, "demo", "nope"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("lookup of an unbound id: %v", err)
	}
}

func TestAConsumerDoesNotTryTheJobsItsOwnClaimsHold(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, held := queuetest.SpawnBatch(t, c.s, 2, queue.DefaultPriority)
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1})
	for range held {
		if _, err := co.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	statusReads := func() int64 {
		for _, r := range c.Requests() {
			if r.ReadsNode() && r.Node == "jobs/*/status" {
				return r.Count
			}
		}
		return 0
	}
	before := statusReads()
	// A new job relists the folder; the two held jobs come first in it.
	_, fresh := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	cl, err := co.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cl.ID() != fresh[0] {
		t.Errorf("took %s, want the new job %s", cl.ID(), fresh[0])
	}
	if n := statusReads() - before; n != 1 {
		t.Errorf("%d status reads to take one job, want 1: the held jobs were tried", n)
	}
}

func TestConcurrentMintsOfTwoClientsNeverShareANumberAndWriteTheCounterPerBlock(t *testing.T) {
	root := zktest.Root(t)
	ctx := testCtx(t)
	clients := []*client{newClientAt(t, root), newClientAt(t, root)}
	const perClient = 40
	_, jids := queuetest.SpawnBatch(t, clients[0].s, 2*perClient, queue.DefaultPriority)
	var mu sync.Mutex
	minted := map[string]string{} // id → jid
	var wg sync.WaitGroup
	for i, jid := range jids {
		c := clients[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl, err := c.ClaimJob(ctx, jid)
			if err != nil {
				t.Error(err)
				return
			}
			id, err := cl.MintFromCounter(ctx, "ark:/99999/fk4", func(n int64) string { return "ark:/99999/fk4" + strconv.FormatInt(n, 10) })
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := minted[id]; dup {
				t.Errorf("%s minted for both %s and %s", id, other, jid)
			}
			minted[id] = jid
		}()
	}
	wg.Wait()
	if len(minted) != len(jids) {
		t.Fatalf("%d ids minted for %d jobs", len(minted), len(jids))
	}
	for id, jid := range minted {
		j, err := clients[0].GetJob(ctx, jid)
		if err != nil {
			t.Fatal(err)
		}
		if got := j.GetIdentifiers().GetPrimaryId(); got != id {
			t.Errorf("job %s records %q, minting said %q", jid, got, id)
		}
	}
	// One counter write per block of numbers, not one per job (a write
	// refused because the other client reserved first counts too).
	writes := int64(0)
	for _, c := range clients {
		for _, r := range c.Requests() {
			if r.Op == "set" && r.Node == "counters/*" {
				writes += r.Count
			}
		}
	}
	if max := int64(2 * (perClient/jobs.MintBlock + 1) * 2); writes == 0 || writes > max {
		t.Errorf("%d counter writes for %d mints; want 1..%d", writes, len(jids), max)
	}
}

func TestTakeOverMovesAJobToTheNextStateKeepingItsLock(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	pending := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration})
	estimating := c.NewConsumer(queue.Estimating, jobs.ConsumerOptions{Parts: queue.PartConfiguration | queue.PartSpaceNeeded})
	cl, err := pending.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := estimating.TakeOver(ctx, cl, jobs.Change{To: queue.Estimating, Message: "estimating"})
	if err != nil || !kept {
		t.Fatalf("TakeOver: %v, %v; want the job kept", kept, err)
	}
	j, err := c.GetJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.GetStatus().GetStatus() != queue.Estimating || !j.GetLocked() {
		t.Errorf("job is %s, locked %v; want Estimating, locked", queue.JobStateName(j.GetStatus().GetStatus()), j.GetLocked())
	}
	if cl.State() != queue.Estimating || !cl.Loaded(queue.NodeSpaceNeeded) {
		t.Errorf("claim in %s, space_needed read %v; want Estimating with the next consumer's parts", queue.JobStateName(cl.State()), cl.Loaded(queue.NodeSpaceNeeded))
	}
	// The next consumer does not try the job it holds already.
	if other, _, err := estimating.TryNext(ctx); err != nil || other != nil {
		t.Errorf("TryNext: %v, %v; want nothing to take", other, err)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Provisioning}); err != nil {
		t.Fatalf("committing the kept claim: %v", err)
	}
	j, err = c.GetJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.GetStatus().GetStatus() != queue.Provisioning || j.GetLocked() || j.GetStatus().GetLastSuccessfulStatus() != queue.Estimating {
		t.Errorf("after the commit: %v, locked %v; want Provisioning after Estimating, unlocked", j.GetStatus(), j.GetLocked())
	}
}

func TestTakeOverCommitsWithoutKeepingWhileTheQueueIsPaused(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	pending := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{})
	cl, err := pending.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pause(t, c)
	queuetest.Eventually(t, "the client sees the queue paused", func() bool { return c.PausedNow() })
	kept, err := c.NewConsumer(queue.Estimating, jobs.ConsumerOptions{}).TakeOver(ctx, cl, jobs.Change{To: queue.Estimating})
	if err != nil || kept {
		t.Fatalf("TakeOver while paused: %v, %v; want committed, not kept", kept, err)
	}
	j, err := c.GetJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.GetStatus().GetStatus() != queue.Estimating || j.GetLocked() {
		t.Errorf("job is %s, locked %v; want Estimating, free", queue.JobStateName(j.GetStatus().GetStatus()), j.GetLocked())
	}
}

func TestTakeOverOfAJobChangedByAnotherWriterIsRefused(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Another writer moves the status on (an operator's repair, say).
	if _, err := c.z.Set(ctx, c.p.Job(jids[0]).Status(), queue.EncodeJobStatus(&v1.JobStatus{Status: queue.Pending, Message: "edited"}), -1); err != nil {
		t.Fatal(err)
	}
	kept, err := c.NewConsumer(queue.Estimating, jobs.ConsumerOptions{}).TakeOver(ctx, cl, jobs.Change{To: queue.Estimating})
	if kept || !errors.Is(err, queue.ErrFenced) {
		t.Errorf("TakeOver after the status changed: %v, %v; want ErrFenced", kept, err)
	}
}

func TestInOrderTurnsFollowPicksAndAFailedPickPassesItsTurn(t *testing.T) {
	root := zktest.Root(t)
	c, other := newClientAt(t, root), newClientAt(t, root)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 3, queue.DefaultPriority)
	// The first job is another consumer's: picking it fails.
	if _, err := other.ClaimJob(ctx, jids[0]); err != nil {
		t.Fatal(err)
	}
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1, InOrder: true})
	second, err := co.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	third, err := co.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID() != jids[1] || third.ID() != jids[2] {
		t.Fatalf("took %s then %s, want %s then %s", second.ID(), third.ID(), jids[1], jids[2])
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := co.WaitTurn(short, third); err == nil {
		t.Error("the third job's turn came before the second's passed")
	}
	if err := co.WaitTurn(ctx, second); err != nil {
		t.Errorf("the second job waits for its turn: %v (the failed pick before it never passed?)", err)
	}
	co.PassTurn(second)
	if err := co.WaitTurn(ctx, third); err != nil {
		t.Errorf("the third job's turn after the second's: %v", err)
	}
	co.PassTurn(third)
}

func TestClaimLoadReadsOnlyWhatItHasNotReadOrWritten(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Update(ctx, jobs.Change{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4load"}}); err != nil {
		t.Fatal(err)
	}
	reads := func() int64 {
		n := int64(0)
		for _, r := range c.Requests() {
			if r.ReadsNode() && strings.HasPrefix(r.Node, "jobs/*/") {
				n += r.Count
			}
		}
		return n
	}
	before := reads()
	if err := cl.Load(ctx, queue.PartConfiguration|queue.PartIdentifiers|queue.PartSpaceNeeded); err != nil {
		t.Fatal(err)
	}
	if n := reads() - before; n != 1 {
		t.Errorf("%d reads; want 1 (space_needed: the configuration was read, the identifiers written)", n)
	}
	if cl.Job.GetIdentifiers().GetPrimaryId() != "ark:/99999/fk4load" || cl.Job.GetConfiguration() == nil {
		t.Errorf("job after Load: %v", cl.Job)
	}
}

func TestAManifestReadWithTheClaimIsNotReadAgainAndABrokenOneIsTheStagesToReport(t *testing.T) {
	cases := []struct {
		name      string
		node      []byte // the manifest node; nil: none
		wantFiles int
		wantErr   error
	}{
		{"a file list", queue.EncodeManifest(&v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://127.0.0.1:1/a", Name: "a"}}}), 1, nil},
		{"no file list", nil, 0, nil},
		{"a broken file list", []byte(`{"files":"nope"}`), 0, queue.ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t)
			ctx := testCtx(t)
			_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			if tc.node != nil {
				if _, err := c.z.Create(ctx, c.p.Job(jids[0]).Node(queue.NodeManifest), tc.node, 0); err != nil {
					t.Fatal(err)
				}
			}
			cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration | queue.PartManifest}).Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if cl.LoadErr != nil {
				t.Errorf("LoadErr %v: the file list is the stage's to report", cl.LoadErr)
			}
			manifestReads := func() (n int64) {
				for _, r := range c.Requests() {
					if r.ReadsNode() && r.Node == "jobs/*/manifest" {
						n += r.Count
					}
				}
				return n
			}
			before := manifestReads()
			m, err := cl.LoadManifest(ctx)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("LoadManifest: %v, want %v", err, tc.wantErr)
			}
			if len(m.GetFiles()) != tc.wantFiles {
				t.Errorf("LoadManifest: %d files, want %d", len(m.GetFiles()), tc.wantFiles)
			}
			if n := manifestReads() - before; n != 0 {
				t.Errorf("LoadManifest read the manifest %d more times; it came with the claim", n)
			}
		})
	}
}
