package batches_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"google.golang.org/protobuf/proto"
)

// TestAReportOfAHundredThousandJobsFitsItsNode commits the report of a
// batch of 100,000 successful and a few failed jobs to the test ZooKeeper,
// and one whose failed jobs alone do not fit.
func TestAReportOfAHundredThousandJobsFitsItsNode(t *testing.T) {
	s := connect(t)
	c := batches.New(s)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name               string
		failed, successful int
	}{
		{"100,000 successful, 3 failed", 3, 100000},
		{"80,000 failed, 20,000 successful", 80000, 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bid, spawned := queuetest.SpawnBatch(t, s, 1, 5)
			queuetest.Move(t, s, spawned[0], jobs.Change{To: queue.Failed, Message: "bad digest"})
			bc, err := c.ClaimBatch(ctx, bid)
			if err != nil {
				t.Fatal(err)
			}
			if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
				t.Fatal(err)
			}
			failed := append(spawned, jids(2_000_000, tc.failed-1)...)
			successful := jids(1_000_000, tc.successful)
			report := &v1.StatusReport{LastModified: queue.NowStamp(), FailedJobs: failed, SuccessfulJobs: successful}
			if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Report: report}); err != nil {
				t.Fatalf("committing the report: %v", err)
			}
			if len(report.GetSuccessfulJobs()) != tc.successful || len(report.GetFailedJobs()) != tc.failed {
				t.Error("Commit changed the caller's report")
			}

			raw := queuetest.NodeData(t, s, s.Paths().Batch(bid).Node(queue.NodeStatusReport))
			if len(raw) > queue.MaxNodeBytes {
				t.Errorf("status-report takes %d bytes, over %d", len(raw), queue.MaxNodeBytes)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal([]byte(raw), &keys); err != nil {
				t.Fatal(err)
			}
			if got := string(keys["successful_jobs_total"]); got != fmt.Sprint(tc.successful) {
				t.Errorf("successful_jobs_total = %s", got)
			}
			b, err := c.GetBatch(ctx, bid)
			if err != nil {
				t.Fatal(err)
			}
			got := b.GetStatusReport()
			if !proto.Equal(got, bc.Batch.GetStatusReport()) {
				t.Error("the claim keeps another report than the node's")
			}
			if got.GetFailedJobsTotal() != int32(tc.failed) || got.GetSuccessfulJobsTotal() != int32(tc.successful) {
				t.Errorf("totals %d failed, %d successful", got.GetFailedJobsTotal(), got.GetSuccessfulJobsTotal())
			}
			kf, ks := len(got.GetFailedJobs()), len(got.GetSuccessfulJobs())
			t.Logf("%d bytes: %d of %d failed, %d of %d successful", len(raw), kf, tc.failed, ks, tc.successful)
			if !slices.Equal(got.GetFailedJobs(), failed[:kf]) || !slices.Equal(got.GetSuccessfulJobs(), successful[:ks]) {
				t.Error("the lists kept are not the first of the given ones")
			}
			if tc.failed < 50000 {
				// The failed list is whole; successful_jobs has what fits.
				if kf != tc.failed || ks == 0 || ks >= tc.successful {
					t.Errorf("kept %d failed, %d successful", kf, ks)
				}
				if _, ok := keys["failed_jobs_total"]; ok {
					t.Error("failed_jobs_total written for a whole list")
				}
			} else {
				if kf == 0 || kf >= tc.failed || ks != 0 {
					t.Errorf("kept %d failed, %d successful", kf, ks)
				}
				if got := string(keys["failed_jobs_total"]); got != fmt.Sprint(tc.failed) {
					t.Errorf("failed_jobs_total = %s", got)
				}
			}
			// Room left over is less than one more jid.
			if len(raw)+16 <= queue.MaxNodeBytes {
				t.Errorf("%d bytes: another jid would have fit", len(raw))
			}
		})
	}
}

func TestCompletedAfterReportComparesTheReferencesWithTheReport(t *testing.T) {
	s := connect(t)
	c := batches.New(s)
	ctx := testCtx(t)
	bid, js := queuetest.SpawnBatch(t, s, 3, 5)
	done := []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing,
		queue.Recording, queue.Notify, queue.Completed}
	for _, to := range done {
		queuetest.Move(t, s, js[0], jobs.Change{To: to})
	}
	queuetest.Move(t, s, js[1], jobs.Change{To: queue.Failed, Message: "bad digest"})
	queuetest.Move(t, s, js[2], jobs.Change{To: queue.Failed, Message: "bad digest"})
	// No report yet: every completed job counts.
	got, err := c.CompletedAfterReport(ctx, bid, js)
	if err != nil || !slices.Equal(got, js[:1]) {
		t.Fatalf("before any report: %v, %v", got, err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Report: &v1.StatusReport{LastModified: queue.NowStamp(),
		FailedJobs: js[1:], SuccessfulJobs: js[:1]}}); err != nil {
		t.Fatal(err)
	}
	// The operator resumes one failed job; it completes.
	if _, err := admin.New(s).Jobs.Requeue(ctx, js[2], 0, ""); err != nil {
		t.Fatal(err)
	}
	for _, to := range done[1:] {
		queuetest.Move(t, s, js[2], jobs.Change{To: to})
	}
	got, err = c.CompletedAfterReport(ctx, bid, js)
	if err != nil || !slices.Equal(got, js[2:]) {
		t.Fatalf("after the report: %v, %v; want %v", got, err, js[2:])
	}
	if f, s := queue.ReportTotals(&v1.StatusReport{FailedJobs: js, SuccessfulJobsTotal: 9}); f != 3 || s != 9 {
		t.Errorf("ReportTotals = %d, %d", f, s)
	}
	if !queue.ReportTrimmed(&v1.StatusReport{SuccessfulJobsTotal: 1}) || queue.ReportTrimmed(&v1.StatusReport{FailedJobs: js, FailedJobsTotal: 2}) {
		t.Error("ReportTrimmed")
	}
}
