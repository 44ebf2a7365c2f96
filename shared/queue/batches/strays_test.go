package batches_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// crashAt stands between a batcher's session and the server for its
// multis (multihook) and stops the batcher dead at the
// n-th multi of a kind (see answerCutter.kind), applied first when apply is
// set: from then on no multi of the session reaches the server, and none
// returns until the test ends, as with a process killed at that moment.
type crashAt struct {
	kind    string
	n       int
	apply   bool
	reached chan struct{} // closed at the crash
	ended   chan struct{} // closed when the test ends

	cutter *answerCutter // for kind
	mu     sync.Mutex
	seen   int
	dead   bool
}

func (c *crashAt) send(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
	c.mu.Lock()
	dead, hit := c.dead, false
	if !dead && c.cutter.kind(ops) == c.kind {
		c.seen++
		hit = c.seen == c.n
	}
	c.dead = dead || hit
	c.mu.Unlock()
	if !dead && !hit {
		return send(ops)
	}
	if hit {
		if c.apply {
			send(ops)
		}
		close(c.reached)
	}
	<-c.ended
	return nil, zk.ErrConnectionClosed
}

// TestAFinishedSpawnLeavesNoJobIDACrashedBatcherReservedAndNeverWrote: a
// batcher dies while it creates the jobs of a 1,000-row batch, after it
// reserved their ids and before (or part way through) writing them. The
// batcher that finishes the batch creates each missing row once and
// removes every id the dead one reserved and never wrote: once the batch
// is spawned, one job per row and no job node without a status.
func TestAFinishedSpawnLeavesNoJobIDACrashedBatcherReservedAndNeverWrote(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name  string
		kind  string
		at    int
		apply bool
	}{
		{"after reserving every id, before any job is written", "write", 1, false},
		{"after some jobs are written", "write", 3, false},
		{"while reserving, the reservation applied", "reserve", 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := zktest.Root(t)
			p, err := queue.NewPaths(root)
			if err != nil {
				t.Fatal(err)
			}
			crash := &crashAt{kind: tc.kind, n: tc.at, apply: tc.apply, reached: make(chan struct{}), ended: make(chan struct{}),
				cutter: &answerCutter{p: p}}
			t.Cleanup(func() { close(crash.ended) })
			ctx := testCtx(t)
			cctx, cancel := context.WithTimeout(ctx, queuetest.Wait)
			first, err := session.Connect(multihook.With(cctx, crash.send), session.Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			bc, planned := queuetest.SpawningBatch(t, first, n)
			bid := bc.ID()
			created := make(chan error, 1)
			go func() {
				_, err := bc.CreateJobs(ctx, planned)
				created <- err
			}()
			select {
			case <-crash.reached:
			case err := <-created:
				t.Fatalf("CreateJobs ended (%v) before the crash point", err)
			}
			// Dead: its session goes with it (its lock too).
			first.Close()

			next := queuetest.Connect(t, root)
			var strays int
			for _, j := range jobNodes(t, next) {
				if ok, _, err := next.Nodes().Exists(ctx, next.Paths().Job(j).Status()); err != nil {
					t.Fatal(err)
				} else if !ok {
					strays++
				}
			}
			if strays == 0 {
				t.Fatal("the dead batcher left no job id unwritten: the test does not crash where it means to")
			}
			t.Logf("the dead batcher left %d job ids reserved and unwritten", strays)

			// The next batcher finishes the batch, as the runner does.
			bc, err = batches.New(next).ClaimBatch(ctx, bid)
			if err != nil {
				t.Fatal(err)
			}
			if !bc.Spawning {
				t.Fatal("the batch is not half spawned")
			}
			have, err := bc.SpawnedEntries(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var todo []batches.NewJob
			for _, j := range planned {
				if _, ok := have[j.Configuration.GetBatchEntry()]; !ok {
					todo = append(todo, j)
				}
			}
			if _, err := bc.CreateJobs(ctx, todo); err != nil {
				t.Fatal(err)
			}
			if err := bc.FinishSpawning(ctx); err != nil {
				t.Fatal(err)
			}
			if len(bc.StraysRemoved) != strays {
				t.Errorf("the finishing batcher removed %d ids, want the %d left", len(bc.StraysRemoved), strays)
			}
			jids := checkNoHalfJobs(t, next, bid)
			if len(jids) != n {
				t.Errorf("%d job nodes, want %d", len(jids), n)
			}
			spawned, err := bc.SpawnedEntries(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(spawned) != n {
				t.Errorf("%d rows have a job, want %d", len(spawned), n)
			}
		})
	}
}

// jobNodes lists the job nodes under /jobs.
func jobNodes(t *testing.T, s *session.Session) []string {
	t.Helper()
	names, _, err := s.Nodes().Children(testCtx(t), s.Paths().Jobs())
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(names, func(n string) bool { return !queue.ValidJobID(n) })
}
