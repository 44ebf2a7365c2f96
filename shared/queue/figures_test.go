package queue

import (
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

func TestFiguresCountJobsBatchesAndWorkersAndAgeTheOldestJobOfEachState(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, first := spawnWithUUID(t, c, "figures-1")
	step(t, c, first, Change{To: Estimating})
	entered := time.Now()
	_, second := spawnWithUUID(t, c, "figures-2")
	step(t, c, second, Change{To: Estimating})
	_, third := spawnWithUUID(t, c, "figures-3")
	if _, err := c.RegisterWorker(ctx, &v1.WorkerInfo{Id: "estimator-test-1", Service: "estimator", Stage: "Estimating"}); err != nil {
		t.Fatal(err)
	}

	r := c.NewFigureReader()
	f, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Jobs[Estimating] != 2 || f.Jobs[Pending] != 1 || f.Batches[BatchProcessing] != 3 {
		t.Errorf("jobs %v, batches %v", f.Jobs, f.Batches)
	}
	if f.Workers[Estimating] != 1 || f.Workers[Downloading] != 0 {
		t.Errorf("workers %v, want one estimator and no downloader", f.Workers)
	}
	if _, ok := f.Workers[Downloading]; !ok {
		t.Error("a stage without a worker is left out, not 0")
	}
	// The first job entered Estimating before the second: it is the oldest.
	if o := f.Oldest[Estimating]; o.IsZero() || o.After(entered.Add(time.Second)) {
		t.Errorf("oldest in Estimating entered at %v, the first job before %v", o, entered)
	}
	if _, ok := f.Oldest[Completed]; ok {
		t.Error("Completed has an oldest job's age")
	}

	// A second read asks only about entries it has not seen.
	reads := func() int64 {
		var n int64
		for _, rc := range c.Requests() {
			if rc.Node == "jobs/states/*/*" {
				n += rc.Count
			}
		}
		return n
	}
	before := reads()
	if _, err = r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads() - before; n != 0 {
		t.Errorf("a second read read %d state entries again", n)
	}
	step(t, c, third, Change{To: Estimating})
	before = reads()
	if f, err = r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads() - before; n != 1 || f.Jobs[Estimating] != 3 {
		t.Errorf("after one more job: %d entries read, %d jobs in Estimating; want 1 and 3", n, f.Jobs[Estimating])
	}
}
