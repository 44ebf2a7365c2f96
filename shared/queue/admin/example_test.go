package admin_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
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

// A stage fails a job with a message saying what failed; an operator
// requeues it, and it resumes at the state after its last successful one.
// A move the state machine does not allow is refused before anything is
// written.
func ExampleTools_RequeueJob() {
	ctx := context.Background()
	q := connect(ctx)
	defer q.Close()
	_, jid := submitOneJob(ctx, q)
	tools := admin.New(q)

	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading} {
		claim, err := q.ClaimJob(ctx, jid)
		if err != nil {
			log.Fatal(err)
		}
		if err := claim.Commit(ctx, queue.Change{To: to}); err != nil {
			log.Fatal(err)
		}
	}
	claim, err := q.ClaimJob(ctx, jid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(claim.Commit(ctx, queue.Change{To: queue.Completed}))
	if err := claim.Commit(ctx, queue.Change{To: queue.Failed, Message: "letter-1.tif: HTTP 404"}); err != nil {
		log.Fatal(err)
	}
	st, err := q.JobStatus(ctx, jid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s (%s), last successful %s\n", jid, queue.JobStateName(st.GetStatus()), st.GetMessage(),
		queue.JobStateName(st.GetLastSuccessfulStatus()))

	job, err := tools.RequeueJob(ctx, jid, v1.JobState_JOB_STATE_UNSPECIFIED, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("requeued: %s, retry %d\n", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetRetryCount())
	// Output:
	// jid0000000001: transition Downloading → Completed is not allowed
	// jid0000000001: Failed (letter-1.tif: HTTP 404), last successful Provisioning
	// requeued: Downloading, retry 1
}

// Another program writing the queue (the Merritt library writes a move as
// several calls) can stop half-way and leave, say, a job its batch does not
// reference. Fsck names the damage; with Repair it mends it under the
// job's lock, so it can run beside the stages.
func ExampleTools_Fsck() {
	ctx := context.Background()
	q := connect(ctx)
	defer q.Close()
	bid, jid := submitOneJob(ctx, q)
	tools := admin.New(q)

	// A writer of its own removes the job's reference from its batch
	// (docs/queue-contract.md spells the path).
	zc, _, err := zk.Connect(strings.Split(os.Getenv(zktest.EnvServers), ","), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		log.Fatal(err)
	}
	defer zc.Close()
	if err := zc.Delete(q.Root()+"/batches/"+bid+"/states/batch-processing/"+jid, -1); err != nil {
		log.Fatal(err)
	}

	rep, err := tools.Fsck(ctx, admin.FsckOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range rep.Damages {
		fmt.Println(d.Kind, d.Item)
	}
	rep, err = tools.Fsck(ctx, admin.FsckOptions{Repair: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("repaired:", rep.Damages[0].Repaired)
	rep, err = tools.Fsck(ctx, admin.FsckOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("clean:", rep.Clean(), "after checking", rep.JobsChecked, "job")
	// Output:
	// batch-ref-missing jid0000000001
	// repaired: true
	// clean: true after checking 1 job
}
