package jobs_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// jobWant is what the tree must hold for one job after a transition, as the
// contract (docs/queue-contract.md, "Job states") has it.
type jobWant struct {
	status         string // "Estimating"
	lastSuccessful string // JSON: null or "Pending"
	retry          string // JSON number
	entry          string // "estimating/05" (state folder / priority)
	refFolder      string // "batch-processing"
	priority       string // priority node text
	spaceNeeded    string // space_needed node text ("" = don't check)
}

func assertJob(t *testing.T, c *client, bid, jid string, w jobWant) {
	t.Helper()
	tr := tree(t, c)
	st, ok := tr["/jobs/"+jid+"/status"]
	if !ok {
		t.Fatalf("%s: no status node", jid)
	}
	if got := queuetest.JSONField(t, st, "status"); got != `"`+w.status+`"` {
		t.Errorf("%s status = %s, want %q", jid, got, w.status)
	}
	if got := queuetest.JSONField(t, st, "last_successful_status"); got != w.lastSuccessful {
		t.Errorf("%s last_successful_status = %s, want %s", jid, got, w.lastSuccessful)
	}
	if got := queuetest.JSONField(t, st, "retry_count"); got != w.retry {
		t.Errorf("%s retry_count = %s, want %s", jid, got, w.retry)
	}
	for _, f := range []string{"last_modified", "message"} {
		queuetest.JSONField(t, st, f) // present
	}
	// Exactly one state entry, the expected one.
	var entries []string
	for p := range tr {
		if strings.HasPrefix(p, "/jobs/states/") && strings.HasSuffix(p, "-"+jid) {
			entries = append(entries, strings.TrimPrefix(p, "/jobs/states/"))
		}
	}
	if want := []string{w.entry + "-" + jid}; !slices.Equal(entries, want) {
		t.Errorf("%s state entries = %v, want %v", jid, entries, want)
	}
	// Exactly one batch reference, in the expected folder.
	var refs []string
	for p := range tr {
		if strings.HasPrefix(p, "/batches/"+bid+"/states/") && strings.HasSuffix(p, "/"+jid) {
			refs = append(refs, strings.TrimPrefix(p, "/batches/"+bid+"/states/"))
		}
	}
	if want := []string{w.refFolder + "/" + jid}; !slices.Equal(refs, want) {
		t.Errorf("%s batch refs = %v, want %v", jid, refs, want)
	}
	if _, locked := tr["/jobs/"+jid+"/lock"]; locked {
		t.Errorf("%s: lock left behind", jid)
	}
	if got := tr["/jobs/"+jid+"/priority"]; got != w.priority {
		t.Errorf("%s priority = %q, want %q", jid, got, w.priority)
	}
	if w.spaceNeeded != "" && tr["/jobs/"+jid+"/space_needed"] != w.spaceNeeded {
		t.Errorf("%s space_needed = %q, want %q", jid, tr["/jobs/"+jid+"/space_needed"], w.spaceNeeded)
	}
}

func ptr[T any](v T) *T { return &v }

// TestJobTransitionsWriteTheContractTree walks every job transition of the
// contract and checks the resulting nodes one by one.
func TestJobTransitionsWriteTheContractTree(t *testing.T) {
	type move struct {
		ch    jobs.Change
		admin queue.JobState // set: an admin requeue to this state instead of ch
	}
	tests := []struct {
		name  string
		setup []jobs.Change // from Pending
		move  move
		want  jobWant
	}{
		// The spec's rule (and the Merritt library) write the old status as
		// last_successful_status here, not null.
		{"Pending → Estimating", nil, move{ch: jobs.Change{To: queue.Estimating}},
			jobWant{"Estimating", `"Pending"`, "0", "estimating/05", "batch-processing", "5", "0"}},
		{"Pending → Held", nil, move{ch: jobs.Change{To: queue.Held}},
			jobWant{"Held", `"Pending"`, "0", "held/05", "batch-processing", "5", ""}},
		{"Pending → Failed (corrupt manifest)", nil, move{ch: jobs.Change{To: queue.Failed, Message: "manifest is corrupt"}},
			jobWant{"Failed", "null", "0", "failed/05", "batch-failed", "5", ""}},
		{"Held → Pending (admin release)", []jobs.Change{{To: queue.Held}}, move{ch: jobs.Change{To: queue.Pending}},
			jobWant{"Pending", `"Held"`, "0", "pending/05", "batch-processing", "5", ""}},
		{"Estimating → Provisioning with space and priority", []jobs.Change{{To: queue.Estimating}},
			move{ch: jobs.Change{To: queue.Provisioning, SpaceNeeded: ptr(int64(1000000000)), Priority: ptr(int32(10))}},
			jobWant{"Provisioning", `"Estimating"`, "0", "provisioning/10", "batch-processing", "10", "1000000000"}},
		{"Provisioning → Downloading", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning, Priority: ptr(int32(10))}},
			move{ch: jobs.Change{To: queue.Downloading}},
			jobWant{"Downloading", `"Provisioning"`, "0", "downloading/10", "batch-processing", "10", ""}},
		{"Downloading → Processing with new space", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}},
			move{ch: jobs.Change{To: queue.Processing, SpaceNeeded: ptr(int64(42))}},
			jobWant{"Processing", `"Downloading"`, "0", "processing/05", "batch-processing", "5", "42"}},
		{"Downloading → Failed keeps Provisioning", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}},
			move{ch: jobs.Change{To: queue.Failed, Message: "f.txt: 404"}},
			jobWant{"Failed", `"Provisioning"`, "0", "failed/05", "batch-failed", "5", ""}},
		{"Processing → Storing", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}},
			move{ch: jobs.Change{To: queue.Storing, Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4555", LocalId: []string{"loc002"}}}},
			jobWant{"Storing", `"Processing"`, "0", "storing/05", "batch-processing", "5", ""}},
		{"Processing → Failed keeps Downloading", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}},
			move{ch: jobs.Change{To: queue.Failed, Message: "minting failed"}},
			jobWant{"Failed", `"Downloading"`, "0", "failed/05", "batch-failed", "5", ""}},
		{"Storing → Recording", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}},
			move{ch: jobs.Change{To: queue.Recording}},
			jobWant{"Recording", `"Storing"`, "0", "recording/05", "batch-processing", "5", ""}},
		{"Storing → Failed keeps Processing", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}},
			move{ch: jobs.Change{To: queue.Failed, Message: "store full"}},
			jobWant{"Failed", `"Processing"`, "0", "failed/05", "batch-failed", "5", ""}},
		{"Recording → Notify", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Recording}},
			move{ch: jobs.Change{To: queue.Notify}},
			jobWant{"Notify", `"Recording"`, "0", "notify/05", "batch-processing", "5", ""}},
		{"Recording → Failed keeps Storing", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Recording}},
			move{ch: jobs.Change{To: queue.Failed}},
			jobWant{"Failed", `"Storing"`, "0", "failed/05", "batch-failed", "5", ""}},
		{"Notify → Completed", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Recording}, {To: queue.Notify}},
			move{ch: jobs.Change{To: queue.Completed}},
			jobWant{"Completed", `"Notify"`, "0", "completed/05", "batch-completed", "5", ""}},
		{"Notify → Failed keeps Recording", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Recording}, {To: queue.Notify}},
			move{ch: jobs.Change{To: queue.Failed, Message: "callback: 500"}},
			jobWant{"Failed", `"Recording"`, "0", "failed/05", "batch-failed", "5", ""}},
		{"Failed → Downloading (admin resume)", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Failed}},
			move{admin: queue.Downloading},
			jobWant{"Downloading", `"Provisioning"`, "1", "downloading/05", "batch-processing", "5", ""}},
		{"Failed → Processing (admin resume)", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Failed}},
			move{admin: queue.Processing},
			jobWant{"Processing", `"Downloading"`, "1", "processing/05", "batch-processing", "5", ""}},
		{"Failed → Storing (admin resume)", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Failed}},
			move{admin: queue.Storing},
			jobWant{"Storing", `"Processing"`, "1", "storing/05", "batch-processing", "5", ""}},
		{"Failed → Recording (admin resume)", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Recording}, {To: queue.Failed}},
			move{admin: queue.Recording},
			jobWant{"Recording", `"Storing"`, "1", "recording/05", "batch-processing", "5", ""}},
		{"Failed → Notify (admin resume)", []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning}, {To: queue.Downloading}, {To: queue.Processing}, {To: queue.Storing}, {To: queue.Recording}, {To: queue.Notify}, {To: queue.Failed}},
			move{admin: queue.Notify},
			jobWant{"Notify", `"Recording"`, "1", "notify/05", "batch-processing", "5", ""}},
	}
	c := newClient(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bid, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			jid := jids[0]
			for _, ch := range tt.setup {
				queuetest.Move(t, c.s, jid, queuetest.WithProducts(ch))
			}
			if tt.move.admin != 0 {
				// Resume with no named state: the state after last_successful_status.
				if _, err := requeue(testCtx(t), c, jid, ""); err != nil {
					t.Fatalf("requeue: %v", err)
				}
				job, _ := c.GetJob(testCtx(t), jid)
				if job.GetStatus().GetStatus() != tt.move.admin {
					t.Fatalf("resumed to %s, want %s", queue.JobStateName(job.GetStatus().GetStatus()), queue.JobStateName(tt.move.admin))
				}
			} else {
				queuetest.Move(t, c.s, jid, tt.move.ch)
			}
			assertJob(t, c, bid, jid, tt.want)
			if tt.move.ch.Message != "" {
				st := tree(t, c)["/jobs/"+jid+"/status"]
				if got := queuetest.JSONField(t, st, "message"); got != fmt.Sprintf("%q", tt.move.ch.Message) {
					t.Errorf("message = %s, want %q", got, tt.move.ch.Message)
				}
			}
		})
	}
}

// TestJobCreationWritesThreePlaces checks "Batch: Pending --> Processing":
// every job in /jobs/JID, /jobs/states/pending/PP-JID and the batch's
// batch-processing folder, with the spec's data.
func TestJobCreationWritesThreePlaces(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	bid, err := c.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if got := tree(t, c)["/batches/"+bid+"/lock"]; got != "" {
		t.Errorf("lock data = %q, want empty", got)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	jids, err := bc.CreateJobs(ctx, []batches.NewJob{
		{Priority: 5, Configuration: &v1.JobConfiguration{PayloadUrl: "file1.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, BatchEntry: 0},
			Identifiers: &v1.Identifiers{LocalId: []string{"loc001"}}},
		{Priority: 5, Configuration: &v1.JobConfiguration{PayloadUrl: "file3.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, BatchEntry: 1},
			Identifiers: &v1.Identifiers{PrimaryId: "ark123", LocalId: []string{"loc003"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	tr := tree(t, c)
	if got := queuetest.JSONField(t, tr["/batches/"+bid+"/status"], "status"); got != `"Processing"` {
		t.Errorf("batch status = %s", got)
	}
	for _, p := range []string{"/batches/" + bid + "/lock", "/batches/" + bid + "/spawning"} {
		if _, ok := tr[p]; ok {
			t.Errorf("%s left behind", p)
		}
	}
	for i, jid := range jids {
		assertJob(t, c, bid, jid, jobWant{"Pending", "null", "0", "pending/05", "batch-processing", "5", "0"})
		if got := tr["/jobs/"+jid+"/bid"]; got != bid {
			t.Errorf("bid node = %q", got)
		}
		conf := tr["/jobs/"+jid+"/configuration"]
		if got := queuetest.JSONField(t, conf, "payload_type"); got != `"object_manifest"` {
			t.Errorf("payload_type = %s", got)
		}
		if got := queuetest.JSONField(t, conf, "batch_id"); got != `"`+bid+`"` {
			t.Errorf("batch_id = %s", got)
		}
		ids := tr["/jobs/"+jid+"/identifiers"]
		wantPrimary := []string{`""`, `"ark123"`}[i]
		if got := queuetest.JSONField(t, ids, "primary_id"); got != wantPrimary {
			t.Errorf("primary_id = %s, want %s", got, wantPrimary)
		}
	}
}

// TestBatchTransitionsWriteTheContractTree covers the contract's batch states.
func TestBatchTransitionsWriteTheContractTree(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)

	t.Run("submission writes submission, Pending status and uuid", func(t *testing.T) {
		sub := queuetest.SampleSubmission()
		sub.BatchId = "6b1e6c8e-0a0e-4e54-9a8b-1f2e3d4c5b6a"
		bid, err := c.b.CreateBatch(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		tr := tree(t, c)
		s := tr["/batches/"+bid+"/submission"]
		for field, want := range map[string]string{"profile_name": `"demo_profile"`, "submitter": `"dana"`,
			"erc_what": `"Letters"`, "erc_who": `"Dana"`, "erc_when": `"1921"`, "erc_where": `""`,
			"type": `"manifest_of_manifests"`, "submission_mode": `"add"`} {
			if got := queuetest.JSONField(t, s, field); got != want {
				t.Errorf("submission %s = %s, want %s", field, got, want)
			}
		}
		if got := queuetest.JSONField(t, tr["/batches/"+bid+"/status"], "status"); got != `"Pending"` {
			t.Errorf("status = %s", got)
		}
		if got := tr["/batch-uuids/"+sub.BatchId]; got != bid {
			t.Errorf("batch-uuids = %q, want %q", got, bid)
		}
		if _, ok := tr["/batches/"+bid+"/states"]; ok {
			t.Error("a new batch must not have states (that marks it taken)")
		}
		if got, err := c.b.BatchByUUID(ctx, sub.BatchId); err != nil || got != bid {
			t.Errorf("BatchByUUID = %q, %v", got, err)
		}
		if _, err := c.b.CreateBatch(ctx, sub); !errors.Is(err, queue.ErrExists) {
			t.Errorf("resubmitting the same batch id: %v, want ErrExists", err)
		}
	})

	t.Run("Pending → Held → Pending", func(t *testing.T) {
		bid, _ := c.b.CreateBatch(ctx, queuetest.SampleSubmission())
		bc, err := c.b.ClaimBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchHeld, Message: "collection demo is held"}); err != nil {
			t.Fatal(err)
		}
		tr := tree(t, c)
		if got := queuetest.JSONField(t, tr["/batches/"+bid+"/status"], "status"); got != `"Held"` {
			t.Errorf("status = %s", got)
		}
		if _, ok := tr["/batches/"+bid+"/lock"]; ok {
			t.Error("lock left")
		}
		if _, err := admin.New(c.s).Batches.Release(ctx, bid); err != nil {
			t.Fatal(err)
		}
		if got := queuetest.JSONField(t, tree(t, c)["/batches/"+bid+"/status"], "status"); got != `"Pending"` {
			t.Errorf("status after release = %s", got)
		}
	})

	t.Run("Processing → Reporting → Failed → UpdateReporting → Completed", func(t *testing.T) {
		bid, jids := queuetest.SpawnBatch(t, c.s, 2, 5)
		for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			queuetest.Move(t, c.s, jids[0], jobs.Change{To: to})
		}
		queuetest.Move(t, c.s, jids[1], jobs.Change{To: queue.Failed, Message: "bad digest"})
		tr := tree(t, c)
		if n := len(under(tr, "/batches/"+bid+"/states/batch-processing")); n != 0 {
			t.Fatalf("batch-processing still has %d refs", n)
		}
		bc, err := c.b.ClaimBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
			t.Fatal(err)
		}
		if _, ok := tree(t, c)["/batches/"+bid+"/lock"]; !ok {
			t.Error("reporting must keep the lock")
		}
		report := &v1.StatusReport{LastModified: queue.NowStamp(), FailedJobs: []string{jids[1]}, SuccessfulJobs: []string{jids[0]}}
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Report: report}); err != nil {
			t.Fatal(err)
		}
		tr = tree(t, c)
		if got := queuetest.JSONField(t, tr["/batches/"+bid+"/status-report"], "failed_jobs"); got != `["`+jids[1]+`"]` {
			t.Errorf("failed_jobs = %s", got)
		}
		if got := queuetest.JSONField(t, tr["/batches/"+bid+"/status-report"], "successful_jobs"); got != `["`+jids[0]+`"]` {
			t.Errorf("successful_jobs = %s", got)
		}
		if got := queuetest.JSONField(t, tr["/batches/"+bid+"/status"], "status"); got != `"Failed"` {
			t.Errorf("status = %s", got)
		}
		if _, ok := tr["/batches/"+bid+"/lock"]; ok {
			t.Error("lock left after Failed")
		}
		// Troubleshooting: the failed job requeued, completed since the report.
		if _, err := admin.New(c.s).Jobs.Requeue(ctx, jids[1], 0, ""); err != nil {
			t.Fatal(err)
		}
		for _, to := range []queue.JobState{queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			queuetest.Move(t, c.s, jids[1], queuetest.WithProducts(jobs.Change{To: to}))
		}
		if _, err := admin.New(c.s).Batches.UpdateReport(ctx, bid); err != nil {
			t.Fatal(err)
		}
		if got := queuetest.JSONField(t, tree(t, c)["/batches/"+bid+"/status"], "status"); got != `"UpdateReporting"` {
			t.Errorf("status = %s, want \"UpdateReporting\"", got)
		}
		bc, err = c.b.ClaimBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchCompleted, Report: &v1.StatusReport{LastModified: queue.NowStamp(), SuccessfulJobs: jids}}); err != nil {
			t.Fatal(err)
		}
		if got := queuetest.JSONField(t, tree(t, c)["/batches/"+bid+"/status"], "status"); got != `"Completed"` {
			t.Errorf("status = %s", got)
		}
	})
}

// TestJobDeletionRemovesNodes covers "Job: Failed --> DELETED" and "Job:
// Held --> DELETED": the job's nodes and entry go, its reference moves to
// batch-deleted; an open batch needs force.
func TestJobDeletionRemovesNodes(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	for _, from := range []queue.JobState{queue.Failed, queue.Held} {
		t.Run(queue.JobStateName(from), func(t *testing.T) {
			bid, jids := queuetest.SpawnBatch(t, c.s, 1, 5)
			jid := jids[0]
			queuetest.Move(t, c.s, jid, jobs.Change{To: from})
			if _, err := admin.New(c.s).Jobs.Delete(ctx, jid, false); !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "Processing") {
				t.Fatalf("delete without force in an open batch: %v, want a refusal naming the batch state", err)
			}
			if _, err := admin.New(c.s).Jobs.Delete(ctx, jid, true); err != nil {
				t.Fatal(err)
			}
			tr := tree(t, c)
			if left := under(tr, "/jobs/"+jid); len(left) != 0 {
				t.Errorf("job nodes left: %v", left)
			}
			if _, ok := tr["/jobs/"+jid]; ok {
				t.Error("job node left")
			}
			for p := range tr {
				if strings.HasPrefix(p, "/jobs/states/") && strings.HasSuffix(p, jid) {
					t.Errorf("entry left: %s", p)
				}
			}
			refs := under(tr, "/batches/"+bid+"/states/batch-deleted")
			if !slices.Equal(refs, []string{"/batches/" + bid + "/states/batch-deleted/" + jid}) {
				t.Errorf("batch-deleted = %v", refs)
			}
			if n := len(under(tr, "/batches/"+bid+"/states/batch-processing")) + len(under(tr, "/batches/"+bid+"/states/batch-failed")); n != 0 {
				t.Errorf("%d refs left in processing/failed", n)
			}
		})
	}
	t.Run("a completed job cannot be deleted", func(t *testing.T) {
		_, jids := queuetest.SpawnBatch(t, c.s, 1, 5)
		for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			queuetest.Move(t, c.s, jids[0], jobs.Change{To: to})
		}
		if _, err := admin.New(c.s).Jobs.Delete(ctx, jids[0], true); !errors.Is(err, queue.ErrWrongState) {
			t.Errorf("delete completed job: %v, want ErrWrongState", err)
		}
	})
}

// TestBatchDeletionAndCleanup covers "Batch: Failed/Held --> Deleted"
// (package admin's tests cover "Batch: Completed --> Automatic Cleanup").
func TestBatchDeletionAndCleanup(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)

	t.Run("failed batch deleted with its jobs", func(t *testing.T) {
		sub := queuetest.SampleSubmission()
		sub.BatchId = "del-1"
		bid, err := c.b.CreateBatch(ctx, sub)
		if err != nil {
			t.Fatal(err)
		}
		bc, _ := c.b.ClaimBatch(ctx, bid)
		bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing})
		jids, _ := bc.CreateJobs(ctx, []batches.NewJob{{Priority: 5, Configuration: &v1.JobConfiguration{}}, {Priority: 5, Configuration: &v1.JobConfiguration{BatchEntry: 1}}})
		bc.FinishSpawning(ctx)
		queuetest.Move(t, c.s, jids[0], jobs.Change{To: queue.Failed})
		if _, err := admin.New(c.s).Batches.Delete(ctx, bid); !errors.Is(err, queue.ErrWrongState) {
			t.Fatalf("delete a Processing batch: %v, want ErrWrongState", err)
		}
		queuetest.Move(t, c.s, jids[1], jobs.Change{To: queue.Failed})
		bc, _ = c.b.ClaimBatch(ctx, bid)
		bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true})
		bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed})
		deleted, err := admin.New(c.s).Batches.Delete(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if len(deleted) != 2 {
			t.Errorf("deleted %d jobs, want 2", len(deleted))
		}
		tr := tree(t, c)
		for p := range tr {
			if strings.Contains(p, bid) || strings.Contains(p, jids[0]) || strings.Contains(p, jids[1]) || strings.Contains(p, "del-1") {
				t.Errorf("left behind: %s", p)
			}
		}
	})
}

func TestJobTotalCountsEveryJobUntilItsBatchIsCleanedUp(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	total := func() int {
		t.Helper()
		n, err := c.JobTotal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := total(); n != 0 {
		t.Fatalf("an empty queue holds %d jobs", n)
	}
	done, jids := queuetest.SpawnBatch(t, c.s, 3, 5)
	queuetest.SpawnBatch(t, c.s, 2, 5)
	if n := total(); n != 5 {
		t.Fatalf("%d jobs after two batches of 3 and 2, want 5", n)
	}
	completeBatch(t, c, done, jids)
	if n := total(); n != 5 {
		t.Fatalf("%d jobs once three completed and their batch too, want 5: ended jobs stay until cleanup", n)
	}
	// As the cleanup removes a completed batch: under its claim.
	bc, err := c.b.ClaimBatch(ctx, done)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Remove(ctx); err != nil {
		t.Fatalf("cleaning up %s: %v", done, err)
	}
	if n := total(); n != 2 {
		t.Fatalf("%d jobs after the completed batch was cleaned up, want 2", n)
	}
}

func TestReleaseWithMessageLeavesTheBatchInItsStateSayingWhy(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	bid, err := c.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	statusVersion := func() int32 {
		t.Helper()
		_, st, err := c.z.Get(ctx, c.p.Batch(bid).Status())
		if err != nil {
			t.Fatal(err)
		}
		return st.Version
	}
	for _, round := range []struct {
		msg    string
		writes bool
	}{
		{"waiting for room", true},
		{"waiting for room", false}, // said already: the status is left alone
	} {
		bc, err := c.b.ClaimBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		before := statusVersion()
		if err := bc.ReleaseWithMessage(ctx, round.msg); err != nil {
			t.Fatal(err)
		}
		b, err := c.b.GetBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if b.GetStatus().GetStatus() != queue.BatchPending || b.GetStatus().GetMessage() != round.msg || b.GetLocked() {
			t.Fatalf("batch after ReleaseWithMessage: %v, locked %v; want Pending, unlocked, saying %q", b.GetStatus(), b.GetLocked(), round.msg)
		}
		if wrote := statusVersion() != before; wrote != round.writes {
			t.Errorf("status written: %v, want %v", wrote, round.writes)
		}
	}

	// A claim that lost the batch writes nothing.
	stale, err := c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.z.Delete(ctx, c.p.Batch(bid).Lock(), -1); err != nil {
		t.Fatal(err)
	}
	other, err := c.b.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	if err := stale.ReleaseWithMessage(ctx, "from a claim that lost the batch"); !errors.Is(err, queue.ErrFenced) {
		t.Fatalf("ReleaseWithMessage by a lost claim: %v, want ErrFenced", err)
	}
	if b, _ := c.b.GetBatch(ctx, bid); b.GetStatus().GetMessage() != "waiting for room" {
		t.Fatalf("a lost claim's message was written: %q", b.GetStatus().GetMessage())
	}
}

// TestABatchIDZooKeeperRefusesIsInvalidAndTakesNoBid: a submitter's batch
// id that ZooKeeper would refuse as a node name is ErrInvalid before
// anything is written: no bid is allocated for it (the next batch gets the
// next number) and nothing is left under /batches or /batch-uuids.
func TestABatchIDZooKeeperRefusesIsInvalidAndTakesNoBid(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	first, err := c.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	before := tree(t, c)
	for _, id := range []string{"a\ufff0b", "batch-\U0001F600", "\ue000", "a\u0085b", "a\xffb", "a\x00b", "..", "a/b"} {
		sub := queuetest.SampleSubmission()
		sub.BatchId = id
		if _, err := c.b.CreateBatch(ctx, sub); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("batch id %q: %v, want ErrInvalid", id, err)
		}
		if _, err := c.b.BatchByUUID(ctx, id); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("BatchByUUID(%q): %v, want ErrInvalid", id, err)
		}
	}
	if after := tree(t, c); !maps.Equal(before, after) {
		t.Errorf("refused batch ids changed the tree:\nbefore %v\nafter  %v", before, after)
	}
	next, err := c.b.CreateBatch(ctx, queuetest.SampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	n1, _ := strconv.Atoi(strings.TrimPrefix(first, "bid"))
	n2, _ := strconv.Atoi(strings.TrimPrefix(next, "bid"))
	if n2 != n1+1 {
		t.Errorf("the batch after %s is %s: refused batch ids took bids", first, next)
	}
}
