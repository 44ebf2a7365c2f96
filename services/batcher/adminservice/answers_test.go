package adminservice

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// asJSON is an answer as grpcurl prints it without -emit-defaults.
func asJSON(t *testing.T, m proto.Message) string {
	t.Helper()
	b, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), " ", "")
}

// TestAnswersSayTheStateTheyProducedEvenWhenItIsZero: the answers a
// script reads a state or a count from carry it in their JSON when it is
// false or 0, without -emit-defaults.
func TestAnswersSayTheStateTheyProducedEvenWhenItIsZero(t *testing.T) {
	f := newFixture(t)
	bid, jids := f.batch("demo", "demo_coll", 1)
	unpaused, err := f.admin.UnpauseQueue(f.ctx, &v1.UnpauseQueueRequest{})
	if err != nil || asJSON(t, unpaused) != `{"paused":false}` {
		t.Errorf("UnpauseQueue: %s %v", asJSON(t, unpaused), err)
	}
	q, err := f.admin.GetQueue(f.ctx, &v1.GetQueueRequest{})
	if err != nil || !strings.Contains(asJSON(t, q), `"paused":false`) {
		t.Errorf("GetQueue: %s %v", asJSON(t, q), err)
	}
	dry, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE,
		Filter: &v1.JobFilter{BatchId: bid}, DryRun: true})
	if got := asJSON(t, dry); err != nil || got != `{"matched":0,"truncated":false,"succeeded":0,"failed":0}` {
		t.Errorf("a dry run matching nothing: %s %v", got, err)
	}
	held, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_HOLD, Filter: &v1.JobFilter{BatchId: bid}})
	if got := asJSON(t, held); err != nil || !strings.Contains(got, `"results":[{"jobId":"`+jids[0]+`","ok":true,"state":"JOB_STATE_HELD","batchId":"`+bid+`"}]`) {
		t.Errorf("a bulk hold: %s %v", got, err)
	}
	again, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_FAIL, Filter: &v1.JobFilter{BatchId: bid}})
	if err != nil || again.GetMatched() != 0 {
		t.Errorf("failing held jobs: %v %v", again, err)
	}
}

// TestAFilterNamingABatchThatDoesNotExistIsNotFound: BulkAction and
// SearchJobs answer a missing batch as ListJobs does, rather than matching
// nothing.
func TestAFilterNamingABatchThatDoesNotExistIsNotFound(t *testing.T) {
	f := newFixture(t)
	const missing = "bid0000099999"
	_, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{BatchId: missing})
	wantStatus(t, err, codes.NotFound, "batch "+missing+" not found")
	_, err = f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE,
		Filter: &v1.JobFilter{BatchId: missing}, DryRun: true})
	wantStatus(t, err, codes.NotFound, "batch "+missing+" not found")
	_, err = f.admin.SearchJobs(f.ctx, &v1.SearchJobsRequest{Filter: &v1.JobFilter{BatchId: missing, Message: "x"}})
	wantStatus(t, err, codes.NotFound, "batch "+missing+" not found")
}

// TestGetQueueTellsEachStagesHealth: batches per state, and per stage the
// jobs waiting and in flight, the workers registered and active, the
// oldest job's entry; a stage with jobs waiting and no active worker is
// stalled, one whose only worker is paused too.
func TestGetQueueTellsEachStagesHealth(t *testing.T) {
	f := newFixture(t)
	_, jids := f.batch("demo", "demo_coll", 4)
	f.heldBatch("demo")
	for _, jid := range jids {
		queuetestMove(t, f, jid, queue.Estimating, queue.Provisioning, queue.Downloading)
	}
	ctx := context.Background()
	reg, err := jobs.New(f.q).RegisterWorker(ctx, &v1.WorkerInfo{Id: "downloader-test-1", Host: "h", Service: "downloader",
		Stage: "Downloading", Paused: true, Heartbeat: timestamppb.Now(),
		InFlight: []*v1.InFlightJob{{JobId: jids[0], Since: timestamppb.Now()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)
	q, err := f.admin.GetQueue(f.ctx, &v1.GetQueueRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if b := q.GetBatchesByState(); b["Held"] != 1 || b["Processing"] != 1 || b["Completed"] != 0 || len(b) != 8 {
		t.Errorf("batches by state %v", b)
	}
	var stages []string
	var downloading *v1.StageHealth
	for _, s := range q.GetStages() {
		stages = append(stages, queue.JobStateName(s.GetState()))
		if s.GetState() == queue.Downloading {
			downloading = s
		}
	}
	if strings.Join(stages, " ") != "Pending Estimating Provisioning Downloading Processing Storing Recording Notify" {
		t.Errorf("stages %v", stages)
	}
	if downloading.GetWaiting() != 3 || downloading.GetInFlight() != 1 || downloading.GetWorkers() != 1 ||
		downloading.GetActiveWorkers() != 0 || !downloading.GetStalled() || downloading.GetOldest() == nil ||
		time.Since(downloading.GetOldest().AsTime()) > time.Minute {
		t.Errorf("Downloading: %v", downloading)
	}
	for _, s := range q.GetStages() {
		if s.GetState() != queue.Downloading && (s.GetStalled() || s.GetWaiting() != 0 || s.GetOldest() != nil) {
			t.Errorf("an empty stage: %v", s)
		}
	}
	if !strings.Contains(asJSON(t, q), `"state":"JOB_STATE_NOTIFY","waiting":0,"inFlight":0,"workers":0,"activeWorkers":0,"stalled":false`) {
		t.Errorf("an empty stage's counts are not all in the JSON: %s", asJSON(t, q))
	}
}

// TestDailyCountsGoBackAsFarAsTheRetention: GetAggregates without days
// counts the days the batcher keeps completed batches, and says how long.
func TestDailyCountsGoBackAsFarAsTheRetention(t *testing.T) {
	f := newFixture(t)
	f.server.Retention = 7 * 24 * time.Hour
	agg, err := f.admin.GetAggregates(f.ctx, &v1.GetAggregatesRequest{})
	if err != nil || len(agg.GetDays()) != 7 || agg.GetRetention().AsDuration() != 7*24*time.Hour {
		t.Errorf("GetAggregates: %d days, retention %v, %v", len(agg.GetDays()), agg.GetRetention(), err)
	}
	if agg, err = f.admin.GetAggregates(f.ctx, &v1.GetAggregatesRequest{Days: 30}); err != nil || len(agg.GetDays()) != 30 {
		t.Errorf("GetAggregates of 30 days: %d days, %v", len(agg.GetDays()), err)
	}
}
