package adminservice

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestStateRulesSayWhatEachActionAccepts: GetStateRules lists every job
// state in pipeline order and every batch state, each with the actions
// the methods accept for an item in it, and each rule holds: an action
// the rules offer is not refused for its state, one they do not offer is.
func TestStateRulesSayWhatEachActionAccepts(t *testing.T) {
	f := newFixture(t)
	rules, err := f.admin.GetStateRules(f.ctx, &v1.GetStateRulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, r := range rules.GetJobs() {
		var actions []string
		for _, a := range r.GetActions() {
			actions = append(actions, strings.ToLower(strings.TrimPrefix(a.String(), "BULK_VERB_")))
		}
		jobs = append(jobs, fmt.Sprintf("%s:%s:%t:%t:%t", queue.JobStateName(r.GetState()), strings.Join(actions, ","),
			r.GetRequeueTarget(), r.GetFailingStage(), r.GetLive()))
	}
	want := []string{
		"Pending:hold,fail,reprioritize:true:true:true",
		"Held:release,delete,reprioritize:false:false:true",
		"Estimating:fail,reprioritize:true:true:true",
		"Provisioning:fail,reprioritize:true:true:true",
		"Downloading:fail,reprioritize:true:true:true",
		"Processing:fail,reprioritize:true:true:true",
		"Storing:fail,reprioritize:true:true:true",
		"Recording:fail,reprioritize:true:true:true",
		"Notify:fail,reprioritize:true:true:true",
		"Completed::false:false:false",
		"Failed:requeue,delete:false:false:false",
		"Deleted::false:false:false",
	}
	if strings.Join(jobs, " ") != strings.Join(want, " ") {
		t.Errorf("job rules:\n got %v\nwant %v", jobs, want)
	}
	var batches []string
	for _, r := range rules.GetBatches() {
		var actions []string
		for _, a := range r.GetActions() {
			actions = append(actions, strings.ToLower(strings.TrimPrefix(a.String(), "BATCH_ACTION_")))
		}
		batches = append(batches, fmt.Sprintf("%s:%s:%t", queue.BatchStateName(r.GetState()), strings.Join(actions, ","), r.GetOpen()))
	}
	wantBatches := []string{"Pending::true", "Held:release,delete:true", "Processing::true", "Reporting::true",
		"UpdateReporting::true", "Completed::false", "Failed:update_report,delete:false", "Deleted::false"}
	if strings.Join(batches, " ") != strings.Join(wantBatches, " ") {
		t.Errorf("batch rules:\n got %v\nwant %v", batches, wantBatches)
	}

	// The rules hold: a pending job is held (offered) but not released
	// (not offered); a failed job is requeued at a target, not held.
	_, jids := f.batch("demo", "demo_coll", 2)
	if _, err := f.admin.ReleaseJob(f.ctx, &v1.ReleaseJobRequest{JobId: jids[0]}); err == nil {
		t.Error("ReleaseJob took a pending job, which the rules say it does not")
	}
	if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jids[0]}); err != nil {
		t.Errorf("HoldJob refused a pending job, which the rules say it takes: %v", err)
	}
	f.fail(jids[1])
	if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jids[1]}); err == nil {
		t.Error("HoldJob took a failed job, which the rules say it does not")
	}
	if _, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: jids[1], State: queue.Estimating}); err != nil {
		t.Errorf("RequeueJob refused a requeue target: %v", err)
	}
}

// TestAnsweredJobsSayWhereTheyFailedAndWhereARequeueResumes: every failed
// job an answer carries names the state it failed in; GetJob names where
// a requeue without a state resumes it.
func TestAnsweredJobsSayWhereTheyFailedAndWhereARequeueResumes(t *testing.T) {
	f := newFixture(t)
	bid, jids := f.batch("demo", "demo_coll", 2)
	queuetestMove(t, f, jids[0], queue.Estimating, queue.Provisioning, queue.Downloading, queue.Failed)
	got, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetJob().GetFailingStage() != queue.Downloading || got.GetResumeState() != queue.Downloading {
		t.Errorf("GetJob: failing_stage %v, resume_state %v; want Downloading for both", got.GetJob().GetFailingStage(), got.GetResumeState())
	}
	list, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{BatchId: bid})
	if err != nil || len(list.GetJobs()) != 2 {
		t.Fatalf("ListJobs: %v %v", list, err)
	}
	if a, b := list.GetJobs()[0].GetFailingStage(), list.GetJobs()[1].GetFailingStage(); a != queue.Downloading || b != v1.JobState_JOB_STATE_UNSPECIFIED {
		t.Errorf("ListJobs: failing stages %v, %v; want Downloading and none (the pending job)", a, b)
	}
	found, err := f.admin.SearchJobs(f.ctx, &v1.SearchJobsRequest{Filter: &v1.JobFilter{FailingStage: queue.Downloading}})
	if err != nil || len(found.GetJobs()) != 1 || found.GetJobs()[0].GetFailingStage() != queue.Downloading {
		t.Errorf("SearchJobs: %v %v", found, err)
	}
	pending, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[1]})
	if err != nil || pending.GetResumeState() != queue.Estimating || pending.GetJob().GetFailingStage() != v1.JobState_JOB_STATE_UNSPECIFIED {
		t.Errorf("GetJob of a pending job: %v %v", pending, err)
	}
}

// queuetestMove takes a job through states, one claim each.
func queuetestMove(t *testing.T, f *fixture, jid string, states ...queue.JobState) {
	t.Helper()
	for _, to := range states {
		cl, err := jobs.New(f.q).ClaimJob(context.Background(), jid)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Commit(context.Background(), jobs.Change{To: to}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBatchAnswersCarryTheirTraceAndReportTotals: GetBatch gives the
// batch's trace id and link, and its report's totals when its lists are
// whole.
func TestBatchAnswersCarryTheirTraceAndReportTotals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	bid, err := batches.New(f.q).CreateBatch(ctx, &v1.Submission{ProfileName: "demo", Submitter: "jdoe", PayloadUrl: "http://127.0.0.1/a.pdf",
		Type: v1.PayloadType_PAYLOAD_TYPE_FILE, Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := batches.New(f.q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []queue.BatchState{queue.BatchProcessing, queue.BatchReporting} {
		if err := bc.Commit(ctx, batches.BatchChange{To: to, KeepLock: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed,
		Report: &v1.StatusReport{LastModified: timestamppb.Now(), FailedJobs: []string{"jid0000000001", "jid0000000002"}}}); err != nil {
		t.Fatal(err)
	}
	got, err := f.admin.GetBatch(f.ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetTraceId() != "4bf92f3577b34da6a3ce929d0e0e4736" || got.GetTraceUrl() != "https://tracing.example/trace/4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace %q %q", got.GetTraceId(), got.GetTraceUrl())
	}
	if r := got.GetBatch().GetStatusReport(); r.GetFailedJobsTotal() != 2 || r.GetSuccessfulJobsTotal() != 0 {
		t.Errorf("report totals %d failed, %d successful; want 2, 0", r.GetFailedJobsTotal(), r.GetSuccessfulJobsTotal())
	}
}

// TestConsoleSignInsLiveUntilEndedOrExpired: a sign-in created is live
// until it is ended or expires; ending one twice is no error; bad ids and
// expiries are refused, naming the field.
func TestConsoleSignInsLiveUntilEndedOrExpired(t *testing.T) {
	f := newFixture(t)
	live := func(id string) bool {
		t.Helper()
		got, err := f.admin.GetConsoleSession(f.ctx, &v1.GetConsoleSessionRequest{SessionId: id})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetLive()
	}
	created, err := f.admin.CreateConsoleSession(f.ctx, &v1.CreateConsoleSessionRequest{Ttl: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSessionId()
	if len(id) != 32 || !live(id) {
		t.Fatalf("a new sign-in %q (%d characters) is not live", id, len(id))
	}
	if live("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA") {
		t.Error("an unknown sign-in is live")
	}
	for range 2 {
		if _, err := f.admin.EndConsoleSession(f.ctx, &v1.EndConsoleSessionRequest{SessionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if live(id) {
		t.Error("a sign-in ended is still live")
	}
	soon, err := f.admin.CreateConsoleSession(f.ctx, &v1.CreateConsoleSessionRequest{Ttl: durationpb.New(1500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	waittest.True(t, 10*time.Second, "a sign-in past its expiry no longer live", func() bool { return !live(soon.GetSessionId()) })
	if live(soon.GetSessionId()) {
		t.Error("a sign-in past its expiry is still live")
	}

	_, err = f.admin.CreateConsoleSession(f.ctx, &v1.CreateConsoleSessionRequest{})
	wantStatus(t, err, codes.InvalidArgument, "ttl is required")
	_, err = f.admin.CreateConsoleSession(f.ctx, &v1.CreateConsoleSessionRequest{Ttl: durationpb.New(-time.Minute)})
	wantStatus(t, err, codes.InvalidArgument, "ttl")
	_, err = f.admin.GetConsoleSession(f.ctx, &v1.GetConsoleSessionRequest{SessionId: "../x"})
	wantStatus(t, err, codes.InvalidArgument, "session_id")
}
