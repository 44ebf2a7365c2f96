package admin

import (
	"slices"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestBatchDeletionAndCleanup covers "Batch: Completed --> Automatic
// Cleanup" (package jobs' tests cover "Batch: Failed/Held --> Deleted").
func TestBatchDeletionAndCleanup(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)

	t.Run("completed batch cleaned up after retention", func(t *testing.T) {
		bid, jids := spawn(t, c, 3, 5)
		for _, jid := range jids {
			for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
				queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
				queuetest.Move(t, c, jid, queuetest.WithProducts(jobs.Change{To: s}))
			}
		}
		queuetest.CompleteBatch(t, c, bid)
		res, err := a.Batches.Cleanup(ctx, 24*3600e9, 0)
		if err != nil || len(res.Batches) != 0 {
			t.Fatalf("cleanup within retention removed %v (%v)", res.Batches, err)
		}
		res, err = a.Batches.Cleanup(ctx, -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(res.Batches, bid) || len(res.Jobs) != 3 {
			t.Fatalf("cleanup removed %v and %d jobs", res.Batches, len(res.Jobs))
		}
		for _, p := range tree(t, a) {
			if strings.Contains(p, bid) || slices.ContainsFunc(jids, func(j string) bool { return strings.Contains(p, j) }) {
				t.Errorf("left behind: %s", p)
			}
		}
	})
}
