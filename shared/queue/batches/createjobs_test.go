package batches_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// checkNoHalfJobs fails the test if a job node has no status or a job of
// the batch is missing a place, and returns the batch's jobs.
func checkNoHalfJobs(t *testing.T, s *session.Session, bid string) []string {
	t.Helper()
	ctx := testCtx(t)
	rep, err := admin.New(s).Queue.Fsck(ctx, admin.FsckOptions{Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range rep.Damages {
		if i == 5 {
			t.Errorf("fsck: %d damages in all", len(rep.Damages))
			break
		}
		t.Errorf("fsck: %s %s: %s", d.Kind, d.Item, d.Detail)
	}
	names, _, err := s.Nodes().Children(ctx, s.Paths().Jobs())
	if err != nil {
		t.Fatal(err)
	}
	var jobNodes []string
	for _, n := range names {
		if strings.HasPrefix(n, "jid") {
			jobNodes = append(jobNodes, n)
		}
	}
	refs, err := jobs.NewReader(s).BatchJobIDs(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if got := refs["batch-processing"]; len(got) != len(jobNodes) {
		t.Errorf("%d job nodes, %d referenced by the batch", len(jobNodes), len(got))
	}
	return jobNodes
}

// TestJobCreationWhoseAnswersAreLostCreatesEachJobOnce: the connection
// drops under the batcher while it creates a batch's jobs (a ZooKeeper
// leader is lost), with id reservations and job writes with the server,
// some applied, some not. Creation must go on, each job made once, and no
// job node left without a status.
func TestJobCreationWhoseAnswersAreLostCreatesEachJobOnce(t *testing.T) {
	c, cutter := connectCutting(t, zktest.Root(t))
	ctx := testCtx(t)
	const n = 1500
	bc, jobs := queuetest.SpawningBatch(t, c, n)
	lost, _ := cutter.loseAnswers(func(kind string, i int) (bool, bool) {
		switch {
		case kind == "reserve" && i == 2, kind == "write" && i == 3:
			return true, true
		case kind == "reserve" && i == 4, kind == "write" && i == 5:
			return true, false
		}
		return false, false
	})
	ids, err := bc.CreateJobs(ctx, jobs)
	if err != nil {
		t.Fatalf("CreateJobs across lost answers: %v", err)
	}
	if lost() != 4 {
		t.Fatalf("%d answers lost, want 4: the test no longer cuts what it means to", lost())
	}
	if len(ids) != n || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != n {
		t.Fatalf("CreateJobs returned %d ids, want %d distinct", len(ids), n)
	}
	jids := checkNoHalfJobs(t, c, bc.ID())
	if len(jids) != n {
		t.Errorf("%d jobs exist, want %d", len(jids), n)
	}
	spawned, err := bc.SpawnedEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(spawned) != n {
		t.Errorf("%d distinct batch entries, want %d", len(spawned), n)
	}
}

// TestJobCreationThatFailsLeavesNoJobWithoutStatus: when creating a batch's
// jobs fails for good (ZooKeeper stays away, or the batcher lost the
// batch), the ids it reserved and did not write are removed: every job
// node left is a whole job of the batch, and fsck finds nothing.
func TestJobCreationThatFailsLeavesNoJobWithoutStatus(t *testing.T) {
	cases := []struct {
		name string
		lose func(c *session.Session, bc *batches.BatchClaim) func(kind string, i int) (bool, bool)
	}{
		{"id reservations lost from the third on", func(*session.Session, *batches.BatchClaim) func(string, int) (bool, bool) {
			return func(kind string, i int) (bool, bool) { return kind == "reserve" && i >= 3, false }
		}},
		{"job writes lost from the third on", func(*session.Session, *batches.BatchClaim) func(string, int) (bool, bool) {
			return func(kind string, i int) (bool, bool) { return kind == "write" && i >= 3, false }
		}},
		{"the batch's lock lost while its jobs are written", func(c *session.Session, bc *batches.BatchClaim) func(string, int) (bool, bool) {
			return func(kind string, i int) (bool, bool) {
				if kind == "write" && i == 3 {
					// Another batcher's session expired this one's lock.
					if err := c.Nodes().Delete(testCtx(t), c.Paths().Batch(bc.ID()).Lock(), -1); err != nil {
						t.Errorf("removing the batch lock: %v", err)
					}
				}
				return false, false
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, cutter := connectCutting(t, zktest.Root(t))
			ctx := testCtx(t)
			bc, jobs := queuetest.SpawningBatch(t, c, 1500)
			_, stop := cutter.loseAnswers(tc.lose(c, bc))
			if _, err := bc.CreateJobs(ctx, jobs); err == nil {
				t.Fatal("CreateJobs succeeded; the test means it to fail")
			}
			stop()
			checkNoHalfJobs(t, c, bc.ID())
		})
	}
}
