package admin

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestFsckThatReclaimsRepairsOnlyGarbage: with Reclaim set, fsck repairs
// only what no writer will finish (a job node without status, an entry
// whose job is gone); a job with a status, whose damage an operator
// decides, is left as it was, and not even read.
func TestFsckThatReclaimsRepairsOnlyGarbage(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 2, 5)
	mustCreate(t, a, paths(a).Entry(queue.Estimating, 5, jids[0])) // job-in-two-states
	mustCreate(t, a, paths(a).Job("jid9999999996").Dir())          // job-without-status
	mustCreate(t, a, paths(a).Entry(queue.Pending, 5, "jid9999999999"))
	var asked []string
	rep, err := a.Queue.Fsck(ctx, FsckOptions{Repair: true, Now: time.Now().Add(time.Hour), Reclaim: func(d Damage) bool {
		asked = append(asked, d.Kind)
		return true
	}})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range rep.Damages {
		found = append(found, d.Kind)
		if !d.Reclaimable || !d.Repaired {
			t.Errorf("%+v: want it reclaimable and repaired", d)
		}
	}
	slices.Sort(found)
	slices.Sort(asked)
	if want := []string{DamageEntryNoJob, DamageJobNoStatus}; !slices.Equal(found, want) || !slices.Equal(asked, want) {
		t.Errorf("reported %v, Reclaim asked about %v; want %v", found, asked, want)
	}
	rep, err = a.Queue.Fsck(ctx, FsckOptions{Grace: time.Nanosecond})
	if err != nil || len(rep.Damages) != 1 || rep.Damages[0].Kind != DamageJobInTwoStates || rep.Damages[0].Reclaimable {
		t.Errorf("after: %+v (%v), want the job in two states alone, for an operator", rep.Damages, err)
	}
}

// TestFsckLeavesABatchMerrittsLibraryIsCreatingAlone: the library writes a
// batch's node, its /batch-uuids entry, its submission and then its
// status, one call each. Caught in between, the batch is no remnant and
// its uuid does not dangle, until nothing has changed for the grace.
func TestFsckLeavesABatchMerrittsLibraryIsCreatingAlone(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	a := New(q)
	ctx := testCtx(t)
	peer := merrittzk.Connect(t, zktest.Servers(t), root)
	if err := peer.InitNodes(); err != nil {
		t.Fatal(err)
	}
	created, err := nodes(a).Create(ctx, paths(a).Batches()+"/bid", nil, zk.FlagSequence)
	if err != nil {
		t.Fatal(err)
	}
	bid := created[strings.LastIndex(created, "/")+1:]
	if _, err := nodes(a).Create(ctx, paths(a).BatchUUID("uuid-being-made"), []byte(bid), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes(a).Create(ctx, paths(a).Batch(bid).Node(queue.NodeSubmission), []byte(`{"batchID":"uuid-being-made"}`), 0); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Queue.Fsck(ctx, FsckOptions{Repair: true})
	if err != nil || !rep.Clean() {
		t.Fatalf("a batch being created: %+v (%v), want nothing", rep.Damages, err)
	}
	// Left so past the grace, it is a remnant; its uuid waits for it.
	rep, err = a.Queue.Fsck(ctx, FsckOptions{Now: time.Now().Add(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Damages) != 1 || rep.Damages[0].Kind != DamageBatchRemnant || !rep.Damages[0].Reclaimable ||
		!strings.Contains(rep.Damages[0].Detail, "submission") {
		t.Errorf("past the grace: %+v, want the batch a remnant (naming its children), and nothing else", rep.Damages)
	}
}

// TestAJobIDReservedForABatchBeingSpawnedIsNotDamageHoweverOld: an id
// reserved for a batch whose spawning a batcher holds is that batcher's
// to write or remove; once no batcher holds it, it is reported, saying
// the batch's next batcher removes it.
func TestAJobIDReservedForABatchBeingSpawnedIsNotDamageHoweverOld(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	bc, _ := queuetest.SpawningBatch(t, c, 1)
	if _, err := nodes(a).Create(ctx, paths(a).Job("jid9999999990").Dir(), queue.EncodeJobReservation(bc.ID(), "m1"), 0); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(24 * time.Hour)
	if rep, err := a.Queue.Fsck(ctx, FsckOptions{Repair: true, Now: later}); err != nil || !rep.Clean() {
		t.Fatalf("while the batch is being spawned: %+v (%v), want nothing", rep.Damages, err)
	}
	if err := bc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Queue.Fsck(ctx, FsckOptions{Now: later})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Damages) != 1 || rep.Damages[0].Kind != DamageJobNoStatus || !strings.Contains(rep.Damages[0].Detail, "reserved for batch "+bc.ID()) ||
		!strings.Contains(rep.Damages[0].Detail, "the batcher that finishes the batch removes it") {
		t.Errorf("once no batcher holds the batch: %+v", rep.Damages)
	}
}
