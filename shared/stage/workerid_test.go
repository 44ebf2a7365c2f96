package stage

import (
	"context"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestRunnersOfOneProcessHaveWorkerEntriesOfTheirOwn: the processor runs a
// processing and a storing runner in one process. Each must have its own
// worker id, and so its own entry in the worker registry: two runners on
// one entry overwrite each other's jobs in flight, and the first to stop
// removes the other's entry.
func TestRunnersOfOneProcessHaveWorkerEntriesOfTheirOwn(t *testing.T) {
	c, err := session.Connect(context.Background(), session.Options{Servers: zktest.Servers(t), Root: zktest.Root(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	idle := func(context.Context, Job) Outcome { return Outcome{} }
	// Made one after the other, as a service makes its runners.
	seen := map[string]bool{}
	jc := jobs.New(c)
	for i := range 2000 {
		r, err := New(jc, Config{Service: "processor", Name: "processing", From: queue.Processing, To: queue.Storing, Concurrency: 1, Handler: idle})
		if err != nil {
			t.Fatal(err)
		}
		if seen[r.WorkerID()] {
			t.Fatalf("runner %d has worker id %s, as an earlier runner of this process has", i, r.WorkerID())
		}
		seen[r.WorkerID()] = true
	}
	startRunner(t, c, Config{Service: "processor", Name: "processing", From: queue.Processing, To: queue.Storing, Handler: idle})
	startRunner(t, c, Config{Service: "processor", Name: "storing", From: queue.Storing, To: queue.Recording, Handler: idle})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		ws, err := admin.New(c).Queue.ListWorkers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) == 2 && ws[0].GetId() != ws[1].GetId() && ws[0].GetStage() != ws[1].GetStage() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("worker entries of the two runners: %v", ws)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
