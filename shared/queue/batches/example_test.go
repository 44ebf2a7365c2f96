package batches_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// A batch is submitted with one job, and the job is taken from state to
// state as the stages take it: a consumer of each state claims it (the lock
// node, with the job's data read in the same request) and commits the
// step's outcome as one atomic change of status, state entry and batch
// reference.
func Example() {
	ctx := context.Background()
	q, err := queuetest.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	// A batch of one job, submitted as the batcher submits one.
	bid, jids, err := queuetest.Submit(ctx, q, []batches.NewJob{{Priority: 5}})
	if err != nil {
		log.Fatal(err)
	}
	jid := jids[0]
	fmt.Println("submitted", bid, "with job", jid)
	// The stages' side of the queue over the same session.
	stages := jobs.New(q)

	from := queue.Pending
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading,
		queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
		// A stage runs one consumer of its state; Next waits (on a watch)
		// until a job is there and returns it claimed.
		claim, err := stages.NewConsumer(from, jobs.ConsumerOptions{}).Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := claim.Commit(ctx, jobs.Change{To: to}); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s -> %s\n", claim.ID(), queue.JobStateName(from), queue.JobStateName(to))
		from = to
	}

	st, err := jobs.NewReader(q).JobStatus(ctx, jid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job status:", queue.JobStateName(st.GetStatus()), "after", queue.JobStateName(st.GetLastSuccessfulStatus()))
	b, err := batches.New(q).GetBatch(ctx, bid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("batch %s: %s, %d completed, %d failed\n", b.GetId(), queue.BatchStateName(b.GetStatus().GetStatus()),
		b.GetCounts().GetCompleted(), b.GetCounts().GetFailed())
	// Output:
	// submitted bid0000000000 with job jid0000000001
	// jid0000000001: Pending -> Estimating
	// jid0000000001: Estimating -> Provisioning
	// jid0000000001: Provisioning -> Downloading
	// jid0000000001: Downloading -> Processing
	// jid0000000001: Processing -> Storing
	// jid0000000001: Storing -> Recording
	// jid0000000001: Recording -> Notify
	// jid0000000001: Notify -> Completed
	// job status: Completed after Notify
	// batch bid0000000000: Processing, 1 completed, 0 failed
}
