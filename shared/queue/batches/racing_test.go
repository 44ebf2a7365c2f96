package batches_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestRacingSessionsTakeEachJobOncePerState drives 1,000 jobs through every
// state with 8 sessions, each running consumers for every state: every job
// is taken exactly once per state, in pipeline order, and ends Completed.
func TestRacingSessionsTakeEachJobOncePerState(t *testing.T) {
	if testing.Short() {
		t.Skip("long race test; run without -short")
	}
	const sessions, perState, jobCount = 8, 2, 1000
	// Each working state, the state a successful step leads to after it.
	states := []queue.JobState{queue.Pending, queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
		queue.Storing, queue.Recording, queue.Notify, queue.Completed}
	root := zktest.Root(t)
	owner := queuetest.Connect(t, root)
	news := make([]batches.NewJob, jobCount)
	for i := range news {
		news[i].Priority = queue.DefaultPriority
	}
	jids := queuetest.SpawnN(t, owner, news, queue.Pending)
	first, err := jobs.NewReader(owner).GetJob(testCtx(t), jids[0])
	if err != nil {
		t.Fatal(err)
	}
	bid := first.GetBid()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	taken := map[string][]queue.JobState{} // jid → states it was taken in, in order
	var completed sync.WaitGroup
	completed.Add(jobCount)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for s := 0; s < sessions; s++ {
		c := jobs.New(queuetest.Connect(t, root))
		for i, from := range states[:len(states)-1] {
			to := states[i+1]
			co := c.NewConsumer(from, jobs.ConsumerOptions{})
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
						if err := cl.Commit(ctx, jobs.Change{To: to}); err != nil {
							select {
							case errs <- err:
							default:
							}
							return
						}
						if to == queue.Completed {
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

	want := states[:len(states)-1]
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
	tools := admin.New(owner)
	counts, err := tools.Jobs.Counts(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if counts[queue.Completed] != jobCount {
		t.Errorf("completed = %d, want %d (counts %v)", counts[queue.Completed], jobCount, counts)
	}
	bcounts, _ := batches.New(owner).BatchCounts(testCtx(t), bid)
	if bcounts.GetCompleted() != jobCount || bcounts.GetProcessing() != 0 {
		t.Errorf("batch counts %v", bcounts)
	}
	rep, err := tools.Queue.Fsck(testCtx(t), admin.FsckOptions{Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range rep.Damages {
		t.Errorf("fsck after the race: %s %s: %s", d.Kind, d.Item, d.Detail)
	}
}
