package admin

import (
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

func TestFiguresCountJobsBatchesAndWorkersAndAgeTheOldestJobOfEachState(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	first := queuetest.Spawn(t, c, batches.NewJob{Priority: 5}, queue.Pending)
	queuetest.Move(t, c, first, jobs.Change{To: queue.Estimating})
	entered := time.Now()
	second := queuetest.Spawn(t, c, batches.NewJob{Priority: 5}, queue.Pending)
	queuetest.Move(t, c, second, jobs.Change{To: queue.Estimating})
	third := queuetest.Spawn(t, c, batches.NewJob{Priority: 5}, queue.Pending)
	if _, err := jobs.New(c).RegisterWorker(ctx, &v1.WorkerInfo{Id: "estimator-test-1", Service: "estimator", Stage: "Estimating"}); err != nil {
		t.Fatal(err)
	}

	r := a.Queue.NewFigureReader()
	f, err := r.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f.Jobs[queue.Estimating] != 2 || f.Jobs[queue.Pending] != 1 || f.Batches[queue.BatchProcessing] != 3 {
		t.Errorf("jobs %v, batches %v", f.Jobs, f.Batches)
	}
	if f.Workers[queue.Estimating] != 1 || f.Workers[queue.Downloading] != 0 {
		t.Errorf("workers %v, want one estimator and no downloader", f.Workers)
	}
	if _, ok := f.Workers[queue.Downloading]; !ok {
		t.Error("a stage without a worker is left out, not 0")
	}
	// The first job entered queue.Estimating before the second: it is the oldest.
	if o := f.Oldest[queue.Estimating]; o.IsZero() || o.After(entered.Add(time.Second)) {
		t.Errorf("oldest in Estimating entered at %v, the first job before %v", o, entered)
	}
	if _, ok := f.Oldest[queue.Completed]; ok {
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
	queuetest.Move(t, c, third, jobs.Change{To: queue.Estimating})
	before = reads()
	if f, err = r.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if n := reads() - before; n != 1 || f.Jobs[queue.Estimating] != 3 {
		t.Errorf("after one more job: %d entries read, %d jobs in Estimating; want 1 and 3", n, f.Jobs[queue.Estimating])
	}
}
