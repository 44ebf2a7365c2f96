package admin

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestRequeueRefusesAStatePastTheJobsProgress fails a job that never got
// past Pending, and one that failed in Storing without the store processing
// writes: neither may be requeued to a state whose step before it never
// ran; the refusal names the states it may take, and those work.
func TestRequeueRefusesAStatePastTheJobsProgress(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 2, queue.DefaultPriority)

	fresh := jids[0]
	queuetest.Move(t, c, fresh, jobs.Change{To: queue.Failed, Message: "its manifest is corrupt"})
	_, err := a.Jobs.Requeue(ctx, fresh, queue.Downloading, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "it may be requeued to Pending, Estimating") ||
		strings.Contains(err.Error(), "Provisioning") {
		t.Fatalf("a job that never left Pending requeued to Downloading: %v, want a refusal naming Pending and Estimating", err)
	}
	if st, err := jobs.NewReader(c).JobStatus(ctx, fresh); err != nil || st.GetStatus() != queue.Failed {
		t.Fatalf("after the refusal the job is %v (%v), want Failed", st, err)
	}
	if _, err := a.Jobs.Requeue(ctx, fresh, queue.Estimating, ""); err != nil {
		t.Fatalf("requeue to Estimating: %v", err)
	}

	// Last successful Processing, but no store: Storing would find nothing to store.
	noStore := jids[1]
	for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Failed} {
		queuetest.Move(t, c, noStore, jobs.Change{To: s})
	}
	_, err = a.Jobs.Requeue(ctx, noStore, 0, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "it has no store, which Storing needs") ||
		!strings.HasSuffix(err.Error(), "it may be requeued to Pending, Estimating, Provisioning, Downloading, Processing") {
		t.Fatalf("requeue to Storing without a store: %v", err)
	}
	if _, err := a.Jobs.Requeue(ctx, noStore, queue.Processing, ""); err != nil {
		t.Fatalf("requeue to Processing: %v", err)
	}
}

// TestRequeueWaitsUntilTheBatchsJobsAreAllCreated: an operator requeues a
// failed job while its batch's jobs are still being created. The batcher
// learns which rows have jobs by listing the batch's folders one after the
// other; a job moving from batch-failed to batch-processing between two of
// those lists is missed and its row made a job again. The requeue is
// refused (FailedPrecondition) until spawning is over, and then goes through.
func TestRequeueWaitsUntilTheBatchsJobsAreAllCreated(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	bc, news := queuetest.SpawningBatch(t, c, 3)
	ids, err := bc.CreateJobs(ctx, news)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Jobs.Fail(ctx, ids[0], "bad row"); err != nil {
		t.Fatal(err)
	}
	_, err = a.Jobs.Requeue(ctx, ids[0], 0, "")
	if !errors.Is(err, queue.ErrWrongState) {
		t.Fatalf("requeue while the batch's jobs are being created: %v, want ErrWrongState", err)
	}
	if st, err := jobs.NewReader(c).JobStatus(ctx, ids[0]); err != nil || st.GetStatus() != queue.Failed {
		t.Fatalf("the refused requeue moved the job: %v, %v", st.GetStatus(), err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Jobs.Requeue(ctx, ids[0], 0, ""); err != nil {
		t.Fatalf("requeue once the batch's jobs are all created: %v", err)
	}
}

// TestARequeueDropsTheFileListOnlyWhereTheManifestIsReadAgain: a job
// whose payload is an object manifest loses its file list when requeued to
// Pending or Estimating (their stage reads the manifest again) and keeps
// it when requeued further on; a job whose payload is a file keeps its
// list wherever it goes.
func TestARequeueDropsTheFileListOnlyWhereTheManifestIsReadAgain(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	list := &v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://127.0.0.1:1/a.txt", Name: "a.txt", Size: 1}}}
	newJob := func(t v1.PayloadType, url string) batches.NewJob {
		return batches.NewJob{Configuration: &v1.JobConfiguration{PayloadType: t, PayloadUrl: url}, Manifest: list}
	}
	for _, tc := range []struct {
		job  batches.NewJob
		to   queue.JobState
		kept bool
	}{
		{newJob(v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, "http://127.0.0.1:1/o.checkm"), queue.Pending, false},
		{newJob(v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, "http://127.0.0.1:1/o.checkm"), queue.Estimating, false},
		{newJob(v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, "http://127.0.0.1:1/o.checkm"), queue.Downloading, true},
		{newJob(v1.PayloadType_PAYLOAD_TYPE_FILE, "http://127.0.0.1:1/a.txt"), queue.Pending, true},
	} {
		jid := queuetest.Spawn(t, c, tc.job, queue.Downloading)
		queuetest.Move(t, c, jid, jobs.Change{To: queue.Failed, Message: "a.txt: md5 digest mismatch"})
		j, err := a.Jobs.Requeue(ctx, jid, tc.to, "")
		if err != nil {
			t.Fatal(err)
		}
		m, err := jobs.NewReader(c).GetManifest(ctx, jid)
		if err != nil {
			t.Fatal(err)
		}
		dropped := strings.Contains(j.GetStatus().GetMessage(), "its file list is dropped")
		if kept := len(m.GetFiles()) == 1; kept != tc.kept || dropped == tc.kept {
			t.Errorf("%s job requeued to %s: file list %v, message %q; want it kept: %v",
				queue.PayloadTypeName(tc.job.Configuration.GetPayloadType()), queue.JobStateName(tc.to), m, j.GetStatus().GetMessage(), tc.kept)
		}
	}
}
