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
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// A stage fails a job with a message saying what failed; an operator
// requeues it, and it resumes at the state after its last successful one.
// A move the state machine does not allow is refused before anything is
// written.
func ExampleJobs_Requeue() {
	ctx := context.Background()
	q, err := queuetest.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	// A batch of one job, submitted as the batcher submits one.
	_, jids, err := queuetest.Submit(ctx, q, []batches.NewJob{{Priority: 5}})
	if err != nil {
		log.Fatal(err)
	}
	jid := jids[0]
	tools := admin.New(q)
	stages := jobs.New(q)

	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading} {
		claim, err := stages.ClaimJob(ctx, jid)
		if err != nil {
			log.Fatal(err)
		}
		if err := claim.Commit(ctx, jobs.Change{To: to}); err != nil {
			log.Fatal(err)
		}
	}
	claim, err := stages.ClaimJob(ctx, jid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(claim.Commit(ctx, jobs.Change{To: queue.Completed}))
	if err := claim.Commit(ctx, jobs.Change{To: queue.Failed, Message: "letter-1.tif: HTTP 404"}); err != nil {
		log.Fatal(err)
	}
	st, err := jobs.NewReader(q).JobStatus(ctx, jid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s (%s), last successful %s\n", jid, queue.JobStateName(st.GetStatus()), st.GetMessage(),
		queue.JobStateName(st.GetLastSuccessfulStatus()))

	job, err := tools.Jobs.Requeue(ctx, jid, v1.JobState_JOB_STATE_UNSPECIFIED, "")
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
func ExampleQueue_Fsck() {
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
	tools := admin.New(q)

	// A writer of its own removes the job's reference from its batch
	// (docs/queue-contract.md spells the path).
	zc, _, err := zk.Connect(strings.Split(os.Getenv(zktest.EnvServers), ","), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		log.Fatal(err)
	}
	defer zc.Close()
	if err := zc.Delete(q.Paths().Root()+"/batches/"+bid+"/states/batch-processing/"+jid, -1); err != nil {
		log.Fatal(err)
	}

	rep, err := tools.Queue.Fsck(ctx, admin.FsckOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range rep.Damages {
		fmt.Println(d.Kind, d.Item)
	}
	rep, err = tools.Queue.Fsck(ctx, admin.FsckOptions{Repair: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("repaired:", rep.Damages[0].Repaired)
	rep, err = tools.Queue.Fsck(ctx, admin.FsckOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("clean:", rep.Clean(), "after checking", rep.JobsChecked, "job")
	// Output:
	// batch-ref-missing jid0000000001
	// repaired: true
	// clean: true after checking 1 job
}
