package queue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/zktest"
)

// connect opens a client on the ZooKeeper this test binary's TestMain
// started (zktest.Main), under a root of its own: ids count from zero there
// whatever else the server holds. A service connects the same way with its
// INGESTQ_ZK_SERVERS and INGESTQ_ZK_ROOT.
func connect(ctx context.Context) *queue.Client {
	q, err := queue.Connect(ctx, queue.Options{
		Servers: strings.Split(os.Getenv(zktest.EnvServers), ","),
		Root:    fmt.Sprintf("/examples/%d", time.Now().UnixNano()),
	})
	if err != nil {
		log.Fatal(err)
	}
	return q
}

// submitOneJob does what the batcher does with a submission: the batch is
// created Pending, claimed, moved to Processing, given its jobs, and let go.
func submitOneJob(ctx context.Context, q *queue.Client) (bid, jid string) {
	bid, err := q.CreateBatch(ctx, &v1.Submission{
		ProfileName: "demo", Collection: "demo", Submitter: "jdoe",
		PayloadUrl: "https://example.org/deposit/letters.checkm",
		Type:       v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
	})
	if err != nil {
		log.Fatal(err)
	}
	bc, err := q.ClaimBatch(ctx, bid)
	if err != nil {
		log.Fatal(err)
	}
	if err := bc.Commit(ctx, queue.BatchChange{To: queue.BatchProcessing}); err != nil {
		log.Fatal(err)
	}
	// Each job lands in /jobs, in its Pending entry and in its batch's
	// references in one atomic operation.
	jids, err := bc.CreateJobs(ctx, []queue.NewJob{{
		Priority: 5,
		Configuration: &v1.JobConfiguration{ProfileName: "demo", Collection: "demo", Submitter: "jdoe",
			PayloadUrl: "https://example.org/deposit/letters.checkm", BatchEntry: 0},
	}})
	if err != nil {
		log.Fatal(err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		log.Fatal(err)
	}
	return bid, jids[0]
}

// A batch is submitted with one job, and the job is taken from state to
// state as the stages take it: a consumer of each state claims it (the lock
// node, with the job's data read in the same request) and commits the
// step's outcome as one atomic change of status, state entry and batch
// reference.
func Example() {
	ctx := context.Background()
	q := connect(ctx)
	defer q.Close()

	bid, jid := submitOneJob(ctx, q)
	fmt.Println("submitted", bid, "with job", jid)

	from := queue.Pending
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading,
		queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
		// A stage runs one consumer of its state; Next waits (on a watch)
		// until a job is there and returns it claimed.
		claim, err := q.NewConsumer(from, queue.ConsumerOptions{}).Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := claim.Commit(ctx, queue.Change{To: to}); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s -> %s\n", claim.ID(), queue.JobStateName(from), queue.JobStateName(to))
		from = to
	}

	st, err := q.JobStatus(ctx, jid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job status:", queue.JobStateName(st.GetStatus()), "after", queue.JobStateName(st.GetLastSuccessfulStatus()))
	b, err := q.GetBatch(ctx, bid)
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
