package admin

import (
	"slices"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
)

// TestPauseAndUnpauseAreWhatTheQueueReads: the operators' pause is the node
// every consumer looks at, and unpausing twice is no error.
func TestPauseAndUnpauseAreWhatTheQueueReads(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	stages := jobs.New(c)
	if err := a.Queue.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := stages.Paused(ctx); err != nil || !p {
		t.Fatalf("Paused() = %v (%v) after Pause", p, err)
	}
	for range 2 {
		if err := a.Queue.Unpause(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := stages.Paused(ctx); err != nil || p {
		t.Fatalf("Paused() = %v (%v) after Unpause", p, err)
	}
}

// TestListingsShowLiveWorkersAndHeldObjectLocks: the worker entries and the
// object locks the queue's clients hold are listed, sorted, and go when
// they are let go.
func TestListingsShowLiveWorkersAndHeldObjectLocks(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	stages := jobs.New(c)
	var regs []*jobs.WorkerRegistration
	for _, w := range []*v1.WorkerInfo{{Id: "store-b", Service: "storer"}, {Id: "est-1", Service: "estimator"}, {Id: "store-a", Service: "storer"}} {
		reg, err := stages.RegisterWorker(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	ws, err := a.Queue.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.GetService()+"/"+w.GetId())
	}
	if want := []string{"estimator/est-1", "storer/store-a", "storer/store-b"}; !slices.Equal(ids, want) {
		t.Errorf("workers %v, want %v", ids, want)
	}
	for _, r := range regs {
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ws, err := a.Queue.ListWorkers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers after their entries closed: %v (%v)", ws, err)
	}

	var locks []*jobs.ObjectLock
	for _, lock := range []func() (*jobs.ObjectLock, error){
		func() (*jobs.ObjectLock, error) { return stages.LockStorage(ctx, "ark:/99999/fk4b") },
		func() (*jobs.ObjectLock, error) { return stages.LockStorage(ctx, "ark:/99999/fk4a") },
		func() (*jobs.ObjectLock, error) { return stages.LockInventory(ctx, "ark:/99999/fk4c") },
	} {
		l, err := lock()
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	storage, inventory, err := a.Queue.ObjectLocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{queue.LockName("ark:/99999/fk4a"), queue.LockName("ark:/99999/fk4b")}; !slices.Equal(storage, want) ||
		!slices.Equal(inventory, []string{queue.LockName("ark:/99999/fk4c")}) {
		t.Errorf("object locks: storage %v, inventory %v", storage, inventory)
	}
	for _, l := range locks {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if storage, inventory, err := a.Queue.ObjectLocks(ctx); err != nil || len(storage)+len(inventory) != 0 {
		t.Errorf("object locks after unlocking: %v, %v (%v)", storage, inventory, err)
	}
}
