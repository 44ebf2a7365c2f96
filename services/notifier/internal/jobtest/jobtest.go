// Package jobtest puts jobs into a real queue (the test ZooKeeper of
// zktest) in the state a test needs.
package jobtest

import (
	"context"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/zktest"
)

// Connect opens a queue client on root, closed when the test ends.
func Connect(t testing.TB, root string) *queue.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := queue.Connect(ctx, queue.Options{Servers: zktest.Servers(t), Root: root, SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// pipeline is the order of the states a job walks through on success.
var pipeline = []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading,
	queue.Processing, queue.Recording, queue.Notify}

// Spawn creates a batch of one job holding j's data and walks the job to
// state `to` (Pending or one of the pipeline's states).
func Spawn(t testing.TB, c *queue.Client, j queue.NewJob, to queue.JobState) string {
	t.Helper()
	ctx := context.Background()
	if j.Configuration == nil {
		j.Configuration = &v1.JobConfiguration{}
	}
	if j.Configuration.ProfileName == "" {
		j.Configuration.ProfileName = "demo"
	}
	bid, err := c.CreateBatch(ctx, &v1.Submission{ProfileName: j.Configuration.ProfileName, Submitter: "test",
		PayloadUrl: "http://127.0.0.1:1/object.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, queue.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	j.Configuration.BatchId = bid
	jids, err := bc.CreateJobs(ctx, []queue.NewJob{j})
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	jid := jids[0]
	if to == queue.Pending {
		return jid
	}
	for _, s := range pipeline {
		Move(t, c, jid, queue.Change{To: s})
		if s == to {
			return jid
		}
	}
	t.Fatalf("jobtest: cannot walk a job to %s", queue.JobStateName(to))
	return ""
}

// Move claims a job by id and commits ch.
func Move(t testing.TB, c *queue.Client, jid string, ch queue.Change) {
	t.Helper()
	ctx := context.Background()
	cl, err := c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Commit(ctx, ch); err != nil {
		t.Fatal(err)
	}
}

// Claim takes the job as a stage would (parts: all).
func Claim(t testing.TB, c *queue.Client, jid string) *queue.Claim {
	t.Helper()
	cl, err := c.ClaimJob(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Eventually waits up to 30 s for cond.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Status reads a job's status.
func Status(t testing.TB, c *queue.Client, jid string) *v1.JobStatus {
	t.Helper()
	st, err := c.JobStatus(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
