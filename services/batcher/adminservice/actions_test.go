package adminservice

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// batchAction is the answer's word on one action of a batch (nil: the
// batch's state does not take it).
func batchAction(t *testing.T, f *fixture, bid string, a v1.BatchAction) *v1.BatchActionState {
	t.Helper()
	b, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range b.GetActions() {
		if s.GetAction() == a {
			return s
		}
	}
	return nil
}

// jobAction is the answer's word on one action of a job.
func jobAction(t *testing.T, f *fixture, jid string, verb v1.BulkVerb) *v1.JobActionState {
	t.Helper()
	j, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jid})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range j.GetActions() {
		if s.GetVerb() == verb {
			return s
		}
	}
	return nil
}

// TestActionsTheAnswersWithholdAreThoseTheMethodsRefuse: GetBatch and
// GetJob say, for each action their item's state takes, whether the
// method would take it now and, when not, why: a held collection keeps a
// held batch and a held job from being released, a batch that never had
// a job and one with nothing new since its report from an update report.
// Each withheld action is refused by its method with FailedPrecondition,
// and each one offered is taken.
func TestActionsTheAnswersWithholdAreThoseTheMethodsRefuse(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	heldBatch := f.heldBatch("demo")
	_, jids := f.batch("demo", "demo_coll", 1)
	if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jids[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}

	// A failed batch whose report is sent and nothing moved since.
	reported, failed := f.batch("other", "other_coll", 1)
	f.fail(failed[0])
	bc, err := batches.New(f.q).ClaimBatch(ctx, reported)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true},
		{To: queue.BatchFailed, Report: &v1.StatusReport{LastModified: timestamppb.Now(), FailedJobs: failed}}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	// A failed batch that never had a job.
	jobless, err := batches.New(f.q).CreateBatch(ctx, &v1.Submission{ProfileName: "other", Submitter: "jdoe",
		PayloadUrl: "http://127.0.0.1/gone.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST})
	if err != nil {
		t.Fatal(err)
	}
	bc, err = batches.New(f.q).ClaimBatch(ctx, jobless)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchProcessing, KeepLock: true}, {To: queue.BatchReporting, KeepLock: true},
		{To: queue.BatchFailed, Message: "fetching payload: 404 Not Found"}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}

	withheld := []struct {
		what  string
		state interface {
			GetApplies() bool
			GetReason() string
		}
		reason string
		call   func() error
	}{
		{"release a held batch of a held collection", batchAction(t, f, heldBatch, v1.BatchAction_BATCH_ACTION_RELEASE),
			"its collection demo_coll is held: release the collection first", func() error {
				_, err := f.admin.ReleaseBatch(f.ctx, &v1.ReleaseBatchRequest{BatchId: heldBatch})
				return err
			}},
		{"release a held job of a held collection", jobAction(t, f, jids[0], v1.BulkVerb_BULK_VERB_RELEASE),
			"its collection demo_coll is held: release the collection first", func() error {
				_, err := f.admin.ReleaseJob(f.ctx, &v1.ReleaseJobRequest{JobId: jids[0]})
				return err
			}},
		{"update-report a batch with nothing new", batchAction(t, f, reported, v1.BatchAction_BATCH_ACTION_UPDATE_REPORT),
			"has nothing new to report", func() error {
				_, err := f.admin.UpdateReportBatch(f.ctx, &v1.UpdateReportBatchRequest{BatchId: reported})
				return err
			}},
		{"update-report a batch that never had a job", batchAction(t, f, jobless, v1.BatchAction_BATCH_ACTION_UPDATE_REPORT),
			"has no job (fetching payload: 404 Not Found)", func() error {
				_, err := f.admin.UpdateReportBatch(f.ctx, &v1.UpdateReportBatchRequest{BatchId: jobless})
				return err
			}},
	}
	for _, w := range withheld {
		if w.state == nil || w.state.GetApplies() || !strings.Contains(w.state.GetReason(), w.reason) {
			t.Errorf("%s: the answer says %v; want it withheld, saying %q", w.what, w.state, w.reason)
		}
		if err := w.call(); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s: the method answers %v; want FailedPrecondition", w.what, err)
		}
	}

	// A bulk release's count says the same of the held job, which the
	// release then refuses.
	filter := &v1.JobFilter{State: queue.Held, Collection: "demo_coll"}
	dry, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_RELEASE, Filter: filter, DryRun: true})
	if err != nil || len(dry.GetResults()) != 1 || dry.GetResults()[0].GetCode() != "FailedPrecondition" ||
		!strings.Contains(dry.GetResults()[0].GetError(), "its collection demo_coll is held") {
		t.Errorf("bulk release's count: %v (%v); want the held job marked as refused, saying why", dry.GetResults(), err)
	}
	done, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_RELEASE, Filter: filter})
	if err != nil || done.GetFailed() != 1 || done.GetResults()[0].GetCode() != "FailedPrecondition" {
		t.Errorf("bulk release: %v (%v); want the held job refused", done.GetResults(), err)
	}

	// Offered: deleting the held batch and the held job, requeueing the
	// failed job (to the states it got that far), and, the collection
	// released, releasing.
	if a := batchAction(t, f, heldBatch, v1.BatchAction_BATCH_ACTION_DELETE); !a.GetApplies() || a.GetReason() != "" {
		t.Errorf("delete a held batch: %v", a)
	}
	if a := batchAction(t, f, reported, v1.BatchAction_BATCH_ACTION_RELEASE); a != nil {
		t.Errorf("a failed batch's answer speaks of releasing it: %v", a)
	}
	j, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: failed[0]})
	if err != nil {
		t.Fatal(err)
	}
	if got := j.GetRequeueStates(); !slices.Equal(got, []queue.JobState{queue.Pending, queue.Estimating}) {
		t.Errorf("a job failed in Estimating may be requeued to %v; want Pending and Estimating", got)
	}
	var verbs []string
	for _, a := range j.GetActions() {
		verbs = append(verbs, strings.TrimPrefix(a.GetVerb().String(), "BULK_VERB_"))
		if !a.GetApplies() {
			t.Errorf("failed job: %v withheld: %s", a.GetVerb(), a.GetReason())
		}
	}
	if strings.Join(verbs, " ") != "REQUEUE DELETE" {
		t.Errorf("a failed job's actions: %v", verbs)
	}
	if _, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: failed[0], State: queue.Pending}); err != nil {
		t.Errorf("requeue as offered: %v", err)
	}
	if _, err := f.admin.ReleaseCollection(f.ctx, &v1.ReleaseCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	if a := batchAction(t, f, heldBatch, v1.BatchAction_BATCH_ACTION_RELEASE); a != nil {
		t.Errorf("the batch released with its collection is still offered a release: %v", a)
	}
	if a := batchAction(t, f, reported, v1.BatchAction_BATCH_ACTION_UPDATE_REPORT); a.GetApplies() ||
		!strings.Contains(a.GetReason(), "still has 1 live job(s)") {
		t.Errorf("update-report with the requeued job live: %v", a)
	}
	if a := batchAction(t, f, reported, v1.BatchAction_BATCH_ACTION_DELETE); a.GetApplies() ||
		!strings.Contains(a.GetReason(), "1 of its jobs are live") {
		t.Errorf("delete with the requeued job live: %v", a)
	}
}

// TestAJobWaitingInAStageNoOneWorksSaysWhy: a job in Downloading that no
// stage takes says why: no replica registered, every one paused, the
// queue paused; it says nothing while a replica takes jobs.
func TestAJobWaitingInAStageNoOneWorksSaysWhy(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, jids := f.batch("demo", "demo_coll", 1)
	queuetestMove(t, f, jids[0], queue.Estimating, queue.Provisioning, queue.Downloading)
	waiting := func() string {
		t.Helper()
		j, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0]})
		if err != nil {
			t.Fatal(err)
		}
		return j.GetWaiting()
	}
	if w := waiting(); !strings.Contains(w, "no replica taking jobs from Downloading is registered") {
		t.Errorf("with no downloader: %q", w)
	}
	paused, err := jobs.New(f.q).RegisterWorker(ctx, &v1.WorkerInfo{Id: "downloader-test-1", Host: "h", Service: "downloader",
		Stage: "Downloading", Concurrency: 2, Paused: true, Heartbeat: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close(ctx)
	if w := waiting(); !strings.Contains(w, "every replica taking jobs from Downloading is paused or draining (downloader-test-1 paused)") {
		t.Errorf("with the one downloader paused: %q", w)
	}
	working, err := jobs.New(f.q).RegisterWorker(ctx, &v1.WorkerInfo{Id: "downloader-test-2", Host: "h", Service: "downloader",
		Stage: "Downloading", Concurrency: 2, Heartbeat: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer working.Close(ctx)
	if w := waiting(); w != "" {
		t.Errorf("with a downloader working: %q", w)
	}
	if _, err := f.admin.PauseQueue(f.ctx, &v1.PauseQueueRequest{}); err != nil {
		t.Fatal(err)
	}
	if w := waiting(); !strings.Contains(w, "the queue is paused") {
		t.Errorf("with the queue paused: %q", w)
	}
}

// TestRecordingIsStalledWhenNoInventoryLeases: jobs waiting in Recording
// for a recorder that hands them over only when an inventory asks (the
// built-in recorder off) make the stage stalled once the oldest has
// waited longer than the lease interval with none leased, saying why;
// not before, not while one is leased, and not with the built-in
// recorder taking them.
func TestRecordingIsStalledWhenNoInventoryLeases(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, jids := f.batch("demo", "demo_coll", 2)
	for _, jid := range jids {
		queuetestMove(t, f, jid, queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording)
	}
	later := time.Now()
	f.server.Now = func() time.Time { return later }
	recording := func() *v1.StageHealth {
		t.Helper()
		q, err := f.admin.GetQueue(f.ctx, &v1.GetQueueRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range q.GetStages() {
			if s.GetState() == queue.Recording {
				return s
			}
		}
		t.Fatal("no Recording stage")
		return nil
	}
	info := &v1.WorkerInfo{Id: "recorder-test-1", Host: "h", Service: "recorder", Stage: "Recording", Heartbeat: timestamppb.Now()}
	reg, err := jobs.New(f.q).RegisterWorker(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)
	if s := recording(); s.GetStalled() {
		t.Errorf("stalled as soon as jobs wait: %v", s)
	}
	later = time.Now().Add(v1.LeaseInterval + time.Second)
	s := recording()
	if !s.GetStalled() || !strings.Contains(s.GetReason(), "2 job(s) wait in Recording and none has been leased for over 1m0s: no inventory is leasing them") {
		t.Errorf("with none leased past the lease interval: %v", s)
	}
	waiting, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0]})
	if err != nil || !strings.Contains(waiting.GetWaiting(), "It waits for an inventory to lease it") {
		t.Errorf("the job's answer says it waits %q (%v)", waiting.GetWaiting(), err)
	}
	reg.Update(func(w *v1.WorkerInfo) { w.InFlight = []*v1.InFlightJob{{JobId: jids[0], Since: timestamppb.Now()}} })
	waittest.True(t, 10*time.Second, "the leased job in flight", func() bool { return recording().GetInFlight() == 1 })
	if s := recording(); s.GetStalled() {
		t.Errorf("stalled with a job leased: %v", s)
	}
	builtin, err := jobs.New(f.q).RegisterWorker(ctx, &v1.WorkerInfo{Id: "recorder-test-2", Host: "h", Service: "recorder", Stage: "Recording",
		Concurrency: 4, Heartbeat: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer builtin.Close(ctx)
	reg.Update(func(w *v1.WorkerInfo) { w.InFlight = nil })
	waittest.True(t, 10*time.Second, "no job in flight", func() bool { return recording().GetInFlight() == 0 })
	if s := recording(); s.GetStalled() {
		t.Errorf("stalled with the built-in recorder taking jobs: %v", s)
	}
}
