package adminservice

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func (f *fixture) state(jid string) queue.JobState {
	f.t.Helper()
	st, err := jobs.NewReader(f.q).JobStatus(f.ctx, jid)
	if err != nil {
		f.t.Fatal(err)
	}
	return st.GetStatus()
}

// TestBulkRequeueCountsFirstThenMovesEachJobSafeToRepeat: a dry run counts
// and lists the failed jobs a filter (collection and message text) takes
// and moves none; the action then requeues each through RequeueJob,
// answering per job (one held by a consumer is Aborted, alone); called
// again it takes only what is left, and then nothing.
func TestBulkRequeueCountsFirstThenMovesEachJobSafeToRepeat(t *testing.T) {
	f := newFixture(t)
	_, demo := f.batch("demo", "demo_coll", 4)
	_, other := f.batch("other", "other_coll", 1)
	for _, jid := range []string{demo[0], demo[1], demo[2], other[0]} {
		f.fail(jid)
	}
	filter := &v1.JobFilter{Collection: "demo_coll", Message: "BROKE on purpose"}
	dry, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE, Filter: filter, DryRun: true})
	if err != nil || dry.GetMatched() != 3 || !slices.Equal(dry.GetJobIds(), demo[:3]) || len(dry.GetResults()) != 3 || dry.GetTruncated() {
		t.Fatalf("dry run: %v %v, want %v and a result each", dry, err, demo[:3])
	}
	// A dry run's results say which jobs matched, as they are: no outcome.
	for i, r := range dry.GetResults() {
		if r.GetJobId() != demo[i] || r.Ok != nil || r.GetState() != queue.Failed || r.GetBatchId() == "" {
			t.Errorf("dry run result %v, want %s as it matched (Failed, its batch, no ok)", r, demo[i])
		}
	}
	for _, jid := range demo[:3] {
		if st := f.state(jid); st != queue.Failed {
			t.Fatalf("after the dry run %s is %s", jid, queue.JobStateName(st))
		}
	}

	// A consumer holds one of them.
	other2, err := session.Connect(f.ctx, session.Options{Servers: zktest.Servers(t), Root: f.zkRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close()
	held, err := jobs.New(other2).ClaimJob(f.ctx, demo[1])
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE, Filter: filter, Message: "retry all"})
	if err != nil || resp.GetMatched() != 3 || resp.GetSucceeded() != 2 || resp.GetFailed() != 1 {
		t.Fatalf("requeue: %v %v, want 2 moved and 1 refused", resp, err)
	}
	for _, r := range resp.GetResults() {
		wantOK := r.GetJobId() != demo[1]
		if r.GetOk() != wantOK || (!wantOK && r.GetCode() != codes.Aborted.String()) {
			t.Errorf("result %v, want ok %v (Aborted when not)", r, wantOK)
		}
	}
	for _, jid := range []string{demo[0], demo[2]} {
		if st := f.state(jid); st != queue.Estimating {
			t.Errorf("%s is %s after the requeue, want Estimating", jid, queue.JobStateName(st))
		}
	}
	if st := f.state(other[0]); st != queue.Failed {
		t.Errorf("the other collection's job is %s, want Failed (untouched)", queue.JobStateName(st))
	}
	held.Release(f.ctx)

	again, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE, Filter: filter})
	if err != nil || again.GetMatched() != 1 || again.GetSucceeded() != 1 || again.GetJobIds()[0] != demo[1] {
		t.Fatalf("repeated: %v %v, want the one left", again, err)
	}
	last, err := f.admin.BulkAction(f.ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE, Filter: filter})
	if err != nil || last.GetMatched() != 0 {
		t.Fatalf("repeated once more: %v %v, want nothing matched", last, err)
	}
}

// TestBulkVerbsTakeOnlyTheStatesTheirActionAccepts: hold takes the pending
// jobs of a batch and leaves its others; release, re-prioritise, fail and
// delete (with force for an open batch) follow, each refused per job where
// the single action would be; failing_stage selects failed jobs by where
// they failed; max_jobs truncates; bad requests are refused whole.
func TestBulkVerbsTakeOnlyTheStatesTheirActionAccepts(t *testing.T) {
	f := newFixture(t)
	bid, jids := f.batch("demo", "demo_coll", 3)
	f.fail(jids[0])
	batch := &v1.JobFilter{BatchId: bid}
	do := func(req *v1.BulkActionRequest) *v1.BulkActionResponse {
		t.Helper()
		resp, err := f.admin.BulkAction(f.ctx, req)
		if err != nil {
			t.Fatalf("%v: %v", req, err)
		}
		return resp
	}
	if r := do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_HOLD, Filter: batch}); r.GetSucceeded() != 2 || !slices.Equal(r.GetJobIds(), jids[1:]) {
		t.Fatalf("hold: %v", r)
	}
	if r := do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_RELEASE, Filter: batch, MaxJobs: 1}); r.GetSucceeded() != 1 || !r.GetTruncated() {
		t.Fatalf("release of at most 1: %v", r)
	}
	if r := do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REPRIORITIZE, Filter: batch, Priority: proto.Int32(1)}); r.GetSucceeded() != 2 {
		t.Fatalf("reprioritize: %v", r)
	}
	if r := do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_FAIL, Filter: &v1.JobFilter{BatchId: bid, State: queue.Pending}, Message: "withdrawn"}); r.GetSucceeded() != 1 {
		t.Fatalf("fail: %v", r)
	}
	// jids[0] failed in Estimating, jids[1] or [2] while Pending (in no stage).
	est := do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_DELETE, Filter: &v1.JobFilter{FailingStage: queue.Estimating}, DryRun: true})
	if !slices.Equal(est.GetJobIds(), jids[:1]) {
		t.Errorf("failing_stage Estimating: %v, want %v", est.GetJobIds(), jids[:1])
	}
	del := do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_DELETE, Filter: &v1.JobFilter{FailingStage: queue.Estimating}})
	if del.GetFailed() != 1 || del.GetResults()[0].GetCode() != codes.FailedPrecondition.String() {
		t.Errorf("delete of an open batch's job without force: %v, want FailedPrecondition", del)
	}
	del = do(&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_DELETE, Filter: &v1.JobFilter{FailingStage: queue.Estimating}, Force: true})
	if del.GetSucceeded() != 1 {
		t.Errorf("delete with force: %v", del)
	}
	if _, err := jobs.NewReader(f.q).JobStatus(f.ctx, jids[0]); err == nil {
		t.Errorf("%s is still there after the delete", jids[0])
	}

	for _, c := range []struct {
		req  *v1.BulkActionRequest
		want string
	}{
		{&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_DELETE, Filter: &v1.JobFilter{}}, "filter is empty"},
		{&v1.BulkActionRequest{Filter: batch}, "verb is required"},
		{&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_HOLD, Filter: &v1.JobFilter{State: queue.Failed}}, "hold takes jobs that are Pending"},
		{&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REPRIORITIZE, Filter: batch}, "priority is required"},
		{&v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_HOLD, Filter: batch, Force: true}, "force goes with BULK_VERB_DELETE only"},
	} {
		_, err := f.admin.BulkAction(f.ctx, c.req)
		wantStatus(t, err, codes.InvalidArgument, c.want)
	}
}

// TestSearchJobsByWhatTheyHold finds jobs by collection, message (their
// status's or one of their history's), profile, state and time, pages
// through them, and refuses a malformed filter.
func TestSearchJobsByWhatTheyHold(t *testing.T) {
	f := newFixture(t)
	_, demo := f.batch("demo", "demo_coll", 5)
	_, other := f.batch("other", "other_coll", 2)
	f.fail(demo[3])
	search := func(req *v1.SearchJobsRequest) []string {
		t.Helper()
		var ids []string
		for {
			resp, err := f.admin.SearchJobs(f.ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range resp.GetJobs() {
				ids = append(ids, j.GetId())
			}
			if resp.GetNextPageToken() == "" {
				return ids
			}
			req = proto.CloneOf(req)
			req.PageToken = resp.GetNextPageToken()
		}
	}
	if got := search(&v1.SearchJobsRequest{Filter: &v1.JobFilter{Collection: "demo_coll"}, PageSize: 2}); !slices.Equal(got, demo) {
		t.Errorf("by collection, 2 a page: %v, want %v", got, demo)
	}
	if got := search(&v1.SearchJobsRequest{Filter: &v1.JobFilter{Profile: "other"}}); !slices.Equal(got, other) {
		t.Errorf("by profile: %v, want %v", got, other)
	}
	if got := search(&v1.SearchJobsRequest{Filter: &v1.JobFilter{Message: "ESTIMATING broke"}}); !slices.Equal(got, demo[3:4]) {
		t.Errorf("by message: %v, want %v", got, demo[3:4])
	}
	if got := search(&v1.SearchJobsRequest{Filter: &v1.JobFilter{State: queue.Pending, Collection: "other_coll"}}); !slices.Equal(got, other) {
		t.Errorf("by state and collection: %v, want %v", got, other)
	}
	failed, err := jobs.NewReader(f.q).JobStatus(f.ctx, demo[3])
	if err != nil {
		t.Fatal(err)
	}
	if got := search(&v1.SearchJobsRequest{Filter: &v1.JobFilter{ModifiedAfter: failed.GetLastModified()}}); len(got) != 0 {
		t.Errorf("changed after the last change: %v, want none", got)
	}
	// Requeued, the job's status says something else; the failure it was
	// requeued from is in its history, and finds it.
	if _, err := f.admin.RequeueJob(f.ctx, &v1.RequeueJobRequest{JobId: demo[3], Message: "the host is back"}); err != nil {
		t.Fatal(err)
	}
	if got := search(&v1.SearchJobsRequest{Filter: &v1.JobFilter{Message: "estimating BROKE"}}); !slices.Equal(got, demo[3:4]) {
		t.Errorf("by a message of its history: %v, want %v", got, demo[3:4])
	}
	scan, err := f.admin.SearchJobs(f.ctx, &v1.SearchJobsRequest{Filter: &v1.JobFilter{Collection: "nope"}, MaxScan: 3})
	if err != nil || scan.GetScanned() != 3 || scan.GetNextPageToken() == "" || len(scan.GetJobs()) != 0 {
		t.Errorf("a scan of at most 3: %v %v, want 3 read and a token", scan, err)
	}
	_, err = f.admin.SearchJobs(f.ctx, &v1.SearchJobsRequest{Filter: &v1.JobFilter{BatchId: "nope"}})
	wantStatus(t, err, codes.InvalidArgument, "filter.batch_id")
}

// TestAggregatesCountByCollectionStateAndBatchAndEndedPerHour: two
// collections' jobs by state with their space, one collection's by batch,
// and the jobs that completed and failed this hour and today.
func TestAggregatesCountByCollectionStateAndBatchAndEndedPerHour(t *testing.T) {
	f := newFixture(t)
	bid1, demo1 := f.batch("demo", "demo_coll", 2)
	bid2, demo2 := f.batch("demo", "demo_coll", 1)
	_, other := f.batch("other", "other_coll", 2)
	f.fail(demo1[0])
	f.complete(bid2, demo2)
	cl, err := jobs.New(f.q).ClaimJob(f.ctx, other[0])
	if err != nil {
		t.Fatal(err)
	}
	space := int64(5000)
	if err := cl.Commit(f.ctx, jobs.Change{To: queue.Estimating, SpaceNeeded: &space}); err != nil {
		t.Fatal(err)
	}

	resp, err := f.admin.GetAggregates(f.ctx, &v1.GetAggregatesRequest{Hours: 3, Days: 2})
	if err != nil {
		t.Fatal(err)
	}
	tallies := func(states []*v1.StateTally) map[string][2]int64 {
		out := map[string][2]int64{}
		for _, s := range states {
			out[s.GetState()] = [2]int64{int64(s.GetJobs()), s.GetSpaceNeeded()}
		}
		return out
	}
	if len(resp.GetCollections()) != 2 || resp.GetJobsRead() != 5 {
		t.Fatalf("aggregates: %v", resp)
	}
	demo, oth := resp.GetCollections()[0], resp.GetCollections()[1]
	if got := tallies(demo.GetStates()); demo.GetCollection() != "demo_coll" || demo.GetJobs() != 3 ||
		got["Failed"][0] != 1 || got["Pending"][0] != 1 || got["Completed"][0] != 1 {
		t.Errorf("demo_coll: %v", demo)
	}
	if got := tallies(oth.GetStates()); oth.GetSpaceNeeded() != 5000 || got["Estimating"] != [2]int64{1, 5000} || got["Pending"][0] != 1 {
		t.Errorf("other_coll: %v", oth)
	}
	if b := demo.GetBatches(); len(b) != 2 || b[0].GetBatchId() != bid2 || b[1].GetBatchId() != bid1 || b[1].GetJobs() != 2 {
		t.Errorf("demo_coll's batches, newest first: %v", b)
	}
	// Each ended job counts in the hour and the day its status last
	// changed in (an hour may have turned since: the slot is looked up).
	ended := map[string]time.Time{}
	for _, jid := range []string{demo1[0], demo2[0]} {
		st, err := jobs.NewReader(f.q).JobStatus(f.ctx, jid)
		if err != nil {
			t.Fatal(err)
		}
		ended[queue.JobStateName(st.GetStatus())] = st.GetLastModified().AsTime()
	}
	for _, span := range []struct {
		name  string
		slots []*v1.EndedTally
		width time.Duration
	}{{"hour", resp.GetHours(), time.Hour}, {"day", resp.GetDays(), 24 * time.Hour}} {
		var completed, failed int32
		for _, sl := range span.slots {
			start := sl.GetStart().AsTime()
			in := func(at time.Time) bool { return !at.Before(start) && at.Before(start.Add(span.width)) }
			if in(ended["Completed"]) != (sl.GetCompleted() == 1) || in(ended["Failed"]) != (sl.GetFailed() == 1) {
				t.Errorf("per %s: %v holds %d completed, %d failed; the jobs ended at %v", span.name, start, sl.GetCompleted(), sl.GetFailed(), ended)
			}
			completed += sl.GetCompleted()
			failed += sl.GetFailed()
		}
		if completed != 1 || failed != 1 {
			t.Errorf("per %s: %d completed, %d failed in all, want 1 and 1", span.name, completed, failed)
		}
	}
	_, err = f.admin.GetAggregates(f.ctx, &v1.GetAggregatesRequest{Hours: 1000})
	wantStatus(t, err, codes.InvalidArgument, "hours 1000 is outside 0..336")
}
