package batches_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// The state machine's tables against a real queue: package queue's tests
// hold the tables to the spec; these hold the claims' commits to the
// tables.

// TestEveryJobTableRowAgainstZooKeeper tries every (from, to) pair on a real
// job: allowed moves commit, refused ones fail naming both states and leave
// the job untouched.
func TestEveryJobTableRowAgainstZooKeeper(t *testing.T) {
	s := connect(t)
	c := jobs.New(s)
	ctx := testCtx(t)
	froms := []queue.JobState{queue.Pending, queue.Held, queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
		queue.Storing, queue.Recording, queue.Notify, queue.Completed, queue.Failed}
	_, jids := queuetest.SpawnBatch(t, s, len(froms)*len(queue.JobStates()), queue.DefaultPriority)
	i := 0
	for _, from := range froms {
		for _, to := range queue.JobStates() {
			jid := jids[i]
			i++
			t.Run(fmt.Sprintf("%s→%s", queue.JobStateName(from), queue.JobStateName(to)), func(t *testing.T) {
				for _, st := range pathTo[from] {
					queuetest.Move(t, s, jid, jobs.Change{To: st})
				}
				status := s.Paths().Job(jid).Status()
				before := queuetest.NodeData(t, s, status)
				cl, err := c.ClaimJob(ctx, jid)
				if err != nil {
					t.Fatal(err)
				}
				err = cl.Commit(ctx, jobs.Change{To: to})
				if queue.CanMoveJob(from, to) {
					if err != nil {
						t.Fatalf("allowed move refused: %v", err)
					}
					if got := queuetest.JSONField(t, queuetest.NodeData(t, s, status), "status"); got != `"`+queue.JobStateName(to)+`"` {
						t.Errorf("status = %s", got)
					}
					return
				}
				var te *queue.TransitionError
				if !errors.As(err, &te) || !errors.Is(err, queue.ErrWrongState) {
					t.Fatalf("refused move: err = %v, want a TransitionError", err)
				}
				if !strings.Contains(err.Error(), queue.JobStateName(from)) || !strings.Contains(err.Error(), queue.JobStateName(to)) {
					t.Errorf("refusal %q does not name both states", err)
				}
				if err := cl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				after := queuetest.NodeData(t, s, status)
				if queuetest.JSONField(t, after, "status") != queuetest.JSONField(t, before, "status") {
					t.Errorf("a refused move changed the status: %s → %s", before, after)
				}
			})
		}
	}
}

func TestStoringJobLeftByAPeerIsReadAndMovable(t *testing.T) {
	s := connect(t)
	raw := zktest.RawConn(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, s, 1, 7)
	jid := jids[0]
	p := s.Paths()
	// A peer writes Storing the way the Merritt library does: status, then entries.
	status := `{"status":"Storing","last_modified":"2026-11-22 03:51:07 +0000","last_successful_status":"Processing","retry_count":0}`
	zktest.WriteNode(t, raw, p.Job(jid).Status(), status)
	if err := raw.Delete(p.Entry(queue.Pending, 7, jid), -1); err != nil {
		t.Fatal(err)
	}
	zktest.WriteNode(t, raw, p.Entry(queue.Storing, 7, jid), "")
	job, err := jobs.NewReader(s).GetJob(ctx, jid)
	if err != nil {
		t.Fatalf("reading a Storing job: %v", err)
	}
	if job.GetStatus().GetStatus() != queue.Storing {
		t.Fatalf("status %s", job.GetStatus().GetStatus())
	}
	if counts := jobCounts(t, s); counts[queue.Storing] != 1 {
		t.Fatalf("counts %v", counts)
	}
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Recording})
	if got := queuetest.JSONField(t, queuetest.NodeData(t, s, p.Job(jid).Status()), "last_successful_status"); got != `"Storing"` {
		t.Errorf("last_successful_status = %s", got)
	}
}

// TestAProcessedJobGoesToRecordingOnlyThroughStoring: as in the peer
// library, a job leaves Processing for Storing; a commit straight to
// Recording is refused and leaves the job where it was.
func TestAProcessedJobGoesToRecordingOnlyThroughStoring(t *testing.T) {
	s := connect(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, s, 1, queue.DefaultPriority)
	jid := jids[0]
	status := s.Paths().Job(jid).Status()
	for _, st := range pathTo[queue.Processing] {
		queuetest.Move(t, s, jid, jobs.Change{To: st})
	}
	cl, err := jobs.New(s).ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	var te *queue.TransitionError
	if err := cl.Commit(ctx, jobs.Change{To: queue.Recording}); !errors.As(err, &te) || te.From != "Processing" || te.To != "Recording" {
		t.Fatalf("Processing → Recording: err = %v, want a TransitionError naming both", err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queuetest.JSONField(t, queuetest.NodeData(t, s, status), "status"); got != `"Processing"` {
		t.Fatalf("after the refusal the job is %s", got)
	}
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Storing})
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Recording})
	st := queuetest.NodeData(t, s, status)
	if got, last := queuetest.JSONField(t, st, "status"), queuetest.JSONField(t, st, "last_successful_status"); got != `"Recording"` || last != `"Storing"` {
		t.Errorf("status %s, last_successful_status %s; want Recording after Storing", got, last)
	}
}

// TestEveryBatchTableRowAgainstZooKeeper does the same for batches.
func TestEveryBatchTableRowAgainstZooKeeper(t *testing.T) {
	c := batches.New(connect(t))
	ctx := testCtx(t)
	batchStates := []queue.BatchState{queue.BatchPending, queue.BatchHeld, queue.BatchProcessing, queue.BatchReporting,
		queue.BatchUpdateReporting, queue.BatchCompleted, queue.BatchFailed, queue.BatchDeleted}
	reach := map[queue.BatchState][]queue.BatchState{
		queue.BatchPending:         nil,
		queue.BatchHeld:            {queue.BatchHeld},
		queue.BatchProcessing:      {queue.BatchProcessing},
		queue.BatchReporting:       {queue.BatchProcessing, queue.BatchReporting},
		queue.BatchFailed:          {queue.BatchProcessing, queue.BatchFailed},
		queue.BatchUpdateReporting: {queue.BatchProcessing, queue.BatchFailed, queue.BatchUpdateReporting},
		queue.BatchCompleted:       {queue.BatchProcessing, queue.BatchReporting, queue.BatchCompleted},
	}
	for _, from := range []queue.BatchState{queue.BatchPending, queue.BatchHeld, queue.BatchProcessing, queue.BatchReporting,
		queue.BatchUpdateReporting, queue.BatchCompleted, queue.BatchFailed} {
		for _, to := range batchStates {
			t.Run(fmt.Sprintf("%s→%s", queue.BatchStateName(from), queue.BatchStateName(to)), func(t *testing.T) {
				bid, err := c.CreateBatch(ctx, queuetest.SampleSubmission())
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range reach[from] {
					bc, err := c.ClaimBatch(ctx, bid)
					if err != nil {
						t.Fatal(err)
					}
					if err := bc.Commit(ctx, batches.BatchChange{To: st}); err != nil {
						t.Fatal(err)
					}
					if st == queue.BatchProcessing {
						if err := bc.FinishSpawning(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				bc, err := c.ClaimBatch(ctx, bid)
				if err != nil {
					t.Fatal(err)
				}
				defer bc.Release(context.WithoutCancel(ctx))
				err = bc.Commit(ctx, batches.BatchChange{To: to})
				if queue.CanMoveBatch(from, to) {
					if err != nil {
						t.Fatalf("allowed move refused: %v", err)
					}
					return
				}
				if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), queue.BatchStateName(from)) ||
					!strings.Contains(err.Error(), queue.BatchStateName(to)) {
					t.Fatalf("refused move: err = %v, want a refusal naming both states", err)
				}
			})
		}
	}
}

// TestABatchWhoseJobsAreAllCreatedSaysSo: once a batch's jobs exist, its
// status no longer says they are being created: it says what the batch
// waits for, written with the release of its lock.
func TestABatchWhoseJobsAreAllCreatedSaysSo(t *testing.T) {
	s := connect(t)
	bid, _ := queuetest.SpawnBatch(t, s, 2, queue.DefaultPriority)
	b, err := batches.New(s).GetBatch(testCtx(t), bid)
	if err != nil {
		t.Fatal(err)
	}
	if b.GetStatus().GetStatus() != queue.BatchProcessing || b.GetStatus().GetMessage() != batches.SpawnedMessage || b.GetLocked() {
		t.Errorf("batch after its jobs were created: %v, locked %v; want Processing, %q, free", b.GetStatus(), b.GetLocked(), batches.SpawnedMessage)
	}
}

// TestAClaimForOtherStatesLeavesTheBatchUnlocked: a claim given the states
// it works on answers ErrWrongState for a batch in another one and never
// takes its lock, so that an operator's claim of that batch meets none.
func TestAClaimForOtherStatesLeavesTheBatchUnlocked(t *testing.T) {
	s := connect(t)
	c := batches.New(s)
	ctx := testCtx(t)
	bid, _ := queuetest.SpawnBatch(t, s, 1, queue.DefaultPriority)
	bc, err := c.ClaimBatch(ctx, bid, queue.BatchProcessing)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Message: "failed by the test"}); err != nil {
		t.Fatal(err)
	}
	// The batch node's children version changes with every lock taken
	// and given back.
	lockVersion := func() int32 {
		_, st, err := s.Nodes().Exists(ctx, s.Paths().Batch(bid).Dir())
		if err != nil {
			t.Fatal(err)
		}
		return st.Cversion
	}
	before := lockVersion()
	if _, err := c.ClaimBatch(ctx, bid, queue.BatchPending, queue.BatchProcessing, queue.BatchReporting); !errors.Is(err, queue.ErrWrongState) ||
		!strings.Contains(err.Error(), "Failed") {
		t.Fatalf("claim of a Failed batch for other states: %v, want ErrWrongState naming Failed", err)
	}
	if after := lockVersion(); after != before {
		t.Errorf("the batch's lock was taken and given back (children version %d → %d), want it never taken", before, after)
	}
	bc, err = c.ClaimBatch(ctx, bid, queue.BatchFailed)
	if err != nil {
		t.Fatalf("claim of the Failed batch for Failed: %v", err)
	}
	bc.Release(ctx)
}
