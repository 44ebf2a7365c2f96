package adminservice

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// registerDownloader puts a downloader replica's entry in the registry
// with the jobs in flight given, until the test ends.
func registerDownloader(t *testing.T, f *fixture, id string, inFlight ...*v1.InFlightJob) {
	t.Helper()
	ctx := context.Background()
	reg, err := jobs.New(f.q).RegisterWorker(ctx, &v1.WorkerInfo{Id: id, Host: "h", Service: "downloader",
		Stage: "Downloading", Heartbeat: timestamppb.Now(), InFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(ctx) })
}

// downloading is the progress of a download that moved last at moved.
func downloading(done int64, moved time.Time) *v1.Progress {
	return &v1.Progress{Phase: "downloading", BytesDone: done, BytesExpected: 50 << 30, BytesPerSecond: 1 << 20,
		Updated: timestamppb.Now(), Moved: timestamppb.New(moved)}
}

func TestAJobInFlightShowsTheProgressItsReplicaReports(t *testing.T) {
	f := newFixture(t)
	_, jids := f.batch("demo", "demo_coll", 3)
	for _, jid := range jids[:2] {
		queuetestMove(t, f, jid, queue.Estimating, queue.Provisioning, queue.Downloading)
	}
	registerDownloader(t, f, "downloader-a-1",
		&v1.InFlightJob{JobId: jids[0], Since: timestamppb.Now(), Progress: downloading(7<<30, time.Now())},
		&v1.InFlightJob{JobId: jids[1], Since: timestamppb.Now()}) // too young to report
	got, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if p := got.GetJob().GetProgress(); p.GetBytesDone() != 7<<30 || p.GetBytesExpected() != 50<<30 || p.GetPhase() != "downloading" {
		t.Errorf("GetJob's progress: %v", p)
	}
	list, err := f.admin.ListJobs(f.ctx, &v1.ListJobsRequest{State: queue.Downloading})
	if err != nil || len(list.GetJobs()) != 2 {
		t.Fatalf("ListJobs: %v, %v", list, err)
	}
	for _, j := range list.GetJobs() {
		if want := j.GetId() == jids[0]; (j.GetProgress() != nil) != want {
			t.Errorf("ListJobs: job %s progress %v", j.GetId(), j.GetProgress())
		}
	}
	// A job no replica works on has none.
	if got, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[2]}); err != nil || got.GetJob().GetProgress() != nil {
		t.Errorf("a pending job: %v, %v", got.GetJob().GetProgress(), err)
	}
}

// TestADownloadThatMovesNeverStallsItsStageAndOneThatStoppedDoes: a 50
// GiB download hours in flight whose bytes keep moving is no stall; one
// whose bytes have not moved for longer than notMovingAfter is.
func TestADownloadThatMovesNeverStallsItsStageAndOneThatStoppedDoes(t *testing.T) {
	f := newFixture(t)
	_, jids := f.batch("demo", "demo_coll", 2)
	for _, jid := range jids {
		queuetestMove(t, f, jid, queue.Estimating, queue.Provisioning, queue.Downloading)
	}
	hoursAgo := timestamppb.New(time.Now().Add(-3 * time.Hour))
	registerDownloader(t, f, "downloader-a-1",
		&v1.InFlightJob{JobId: jids[0], Since: hoursAgo, Progress: downloading(20<<30, time.Now().Add(-10*time.Second))})
	health := func() *v1.StageHealth {
		t.Helper()
		q, err := f.admin.GetQueue(f.ctx, &v1.GetQueueRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range q.GetStages() {
			if s.GetState() == queue.Downloading {
				return s
			}
		}
		t.Fatal("no Downloading stage")
		return nil
	}
	if h := health(); h.GetStalled() || h.GetReason() != "" || h.GetNotMoving() != 0 || h.GetNotMovingAfter().AsDuration() != notMovingAfter {
		t.Errorf("a slow download that moves: %v", h)
	}
	registerDownloader(t, f, "downloader-b-1",
		&v1.InFlightJob{JobId: jids[1], Since: hoursAgo, Progress: downloading(3<<30, time.Now().Add(-notMovingAfter-time.Minute))})
	if h := health(); !h.GetStalled() || h.GetNotMoving() != 1 || h.GetInFlight() != 2 || h.GetWaiting() != 0 ||
		!strings.Contains(h.GetReason(), "1 job(s) in flight in Downloading report bytes that have not moved for 5m0s") {
		t.Errorf("a download that stopped moving: %v", h)
	}
	for i, want := range []bool{false, true} {
		got, err := f.admin.GetJob(f.ctx, &v1.GetJobRequest{JobId: jids[i]})
		if err != nil || got.GetJob().GetProgress().GetNotMoving() != want {
			t.Errorf("job %d: progress %v, %v; want not_moving %v", i, got.GetJob().GetProgress(), err, want)
		}
	}
}
