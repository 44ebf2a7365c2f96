package janitor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// batch makes a batch of one job, with a working directory, that ends in
// final (Completed or Failed).
func batch(t *testing.T, q *session.Session, root workdir.Root, final queue.BatchState) (string, string) {
	t.Helper()
	ctx := context.Background()
	bid, err := batches.New(q).CreateBatch(ctx, &v1.Submission{ProfileName: "demo", Submitter: "jdoe", PayloadUrl: "http://127.0.0.1/a.pdf",
		Type: v1.PayloadType_PAYLOAD_TYPE_FILE})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := batches.New(q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	jids, err := bc.CreateJobs(ctx, []batches.NewJob{{Priority: 5, WorkRoot: root.Dir(), Configuration: &v1.JobConfiguration{}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := root.Job(bid, jids[0])
	if err := os.MkdirAll(filepath.Join(dir, "producer"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	for _, to := range []queue.JobState{queue.Estimating, queue.Failed} {
		cl, err := jobs.New(q).ClaimJob(ctx, jids[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Commit(ctx, jobs.Change{To: to}); err != nil {
			t.Fatal(err)
		}
	}
	if bc, err = batches.New(q).ClaimBatch(ctx, bid); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, KeepLock: true}); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: final, Report: &v1.StatusReport{}}); err != nil {
		t.Fatal(err)
	}
	return bid, dir
}

func TestRunOnceRemovesOnlyCompletedBatchesPastTheirRetention(t *testing.T) {
	ctx := context.Background()
	zkRoot := zktest.Root(t)
	q, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: zkRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	root, err := workdir.Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	completed, completedDir := batch(t, q, root, queue.BatchCompleted)
	failed, failedDir := batch(t, q, root, queue.BatchFailed)
	j := &Janitor{Tools: admin.New(q), Root: root, Retention: time.Hour, Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)}

	res, err := j.RunOnce(ctx)
	if err != nil || len(res.Batches) != 0 {
		t.Fatalf("within the retention: removed %v (%v)", res.Batches, err)
	}
	// A retention that ends a second from now has passed for every batch
	// completed so far (last_modified has whole seconds).
	j.Retention = -time.Second
	res, err = j.RunOnce(ctx)
	if err != nil || len(res.Batches) != 1 || res.Batches[0] != completed || res.Jobs != 1 || len(res.DirErrors) != 0 {
		t.Fatalf("past the retention: %+v (%v), want %s and its job removed", res, err, completed)
	}
	if _, err := batches.New(q).GetBatch(ctx, completed); err == nil {
		t.Error("the completed batch is still in ZooKeeper")
	}
	if _, err := os.Stat(root.Batch(completed)); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)", completedDir, err)
	}
	if _, err := batches.New(q).GetBatch(ctx, failed); err != nil {
		t.Errorf("the failed batch went too: %v", err)
	}
	if _, err := os.Stat(failedDir); err != nil {
		t.Errorf("the failed batch's working directory went too: %v", err)
	}

	// Expired console sign-ins go; live ones stay.
	const expired, live = "expired-sign-in-0001", "live-sign-in-000001"
	admin.New(q).SignIns.Create(ctx, expired, time.Now().Add(-time.Second))
	admin.New(q).SignIns.Create(ctx, live, time.Now().Add(time.Hour))
	if _, err := j.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(zktest.Servers(t), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if left, _, err := conn.Children(zkRoot + "/console-sessions"); err != nil || !slices.Equal(left, []string{live}) {
		t.Errorf("console sign-ins left: %v (%v), want only %s", left, err, live)
	}
}

func TestRunStopsWhenItsContextEnds(t *testing.T) {
	ctx := context.Background()
	q, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: zktest.Root(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	root, err := workdir.Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	j := &Janitor{Tools: admin.New(q), Root: root, Retention: time.Hour, Interval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.Run(runCtx)
	}()
	// Cancelled once it has run twice: between two runs, as it mostly is.
	waittest.True(t, 10*time.Second, "two runs", func() bool { return listings(q) >= 2 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// listings is how many times q's session listed the batches, as the
// janitor does once a run.
func listings(q *session.Session) int64 {
	for _, r := range q.Requests() {
		if r.Op == "children" && r.Node == "batches" {
			return r.Count
		}
	}
	return 0
}
