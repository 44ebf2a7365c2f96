package batches_test

import (
	"context"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestJobsEndingTogetherCostTheFeedAFewLooks: a batch's jobs ending one
// after another within a moment cost the batch feed a few looks at the
// batch's folder, not one each; once the last has ended, the batch is
// reported Done.
func TestJobsEndingTogetherCostTheFeedAFewLooks(t *testing.T) {
	root := zktest.Root(t)
	s := queuetest.Connect(t, root)
	feedSession := queuetest.Connect(t, root)
	const n = 30
	bid, jids := queuetest.SpawnBatch(t, s, n, queue.DefaultPriority)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	feed := batches.New(feedSession).WatchBatches(ctx)
	looks := func() int64 {
		counts, _ := queuetest.RequestCounts(feedSession)
		return counts["exists batches/*/states/*"]
	}
	queuetest.Eventually(t, "the feed looking at the batch's folder", func() bool { return looks() > 0 })
	before := looks()
	for _, jid := range jids {
		queuetest.Move(t, s, jid, jobs.Change{To: queue.Failed, Message: "failed by the test"})
	}
	done := false
	for w := range feed {
		if done = w.Bid == bid && w.Done; done {
			break
		}
	}
	if !done {
		t.Fatal("the feed never reported the batch Done")
	}
	if got := looks() - before; got > n/5 {
		t.Errorf("the feed looked at the folder %d times as %d jobs ended, want a few", got, n)
	}
}
