package batchrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/internal/smtptest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/waittest"
)

// spawnBatch creates a Processing batch of n jobs, all created, as a
// batcher would (profile demo), without a batcher: CreateJobs in chunks of
// 10,000. It returns the bid and the jids in order.
func (h *harness) spawnBatch(n int) (string, []string) {
	h.t.Helper()
	ctx := context.Background()
	bid := h.submit("demo", h.dep.url("/big.checkm"), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	bc, err := batches.New(h.q).ClaimBatch(ctx, bid)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		h.t.Fatal(err)
	}
	var jids []string
	const chunk = 10000
	for start := 0; start < n; start += chunk {
		jobs := make([]batches.NewJob, min(chunk, n-start))
		for i := range jobs {
			jobs[i] = batches.NewJob{Priority: 7, Configuration: &v1.JobConfiguration{
				ProfileName: "demo", Collection: "demo_coll", Submitter: "jdoe",
				PayloadUrl:  fmt.Sprintf("http://127.0.0.1:1/f%d.txt", start+i),
				PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE, BatchEntry: int32(start + i)}}
		}
		ids, err := bc.CreateJobs(ctx, jobs)
		if err != nil {
			h.t.Fatal(err)
		}
		jids = append(jids, ids...)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		h.t.Fatal(err)
	}
	return bid, jids
}

// failPending fails n pending jobs as the estimator fails a job it cannot
// read: claims through a consumer, many at once.
func (h *harness) failPending(n int, msg string) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	co := jobs.New(h.q).NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 64, Parts: queue.PartsStatusOnly})
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(n) {
				cl, err := co.Next(ctx)
				if err != nil {
					if ctx.Err() == nil {
						select {
						case errs <- err:
						default:
						}
						cancel()
					}
					return
				}
				if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: msg}); err != nil {
					if !errors.Is(err, context.Canceled) {
						select {
						case errs <- err:
						default:
						}
					}
					cancel()
					return
				}
				if done.Add(1) >= int64(n) {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		h.t.Fatal(err)
	default:
	}
}

// updateMail waits for the first update report mailed for bid.
func updateMail(t *testing.T, h *harness, bid string) smtptest.Message {
	t.Helper()
	var found smtptest.Message
	waittest.True(t, 30*time.Second, "an update report of "+bid+" mailed", func() bool {
		for _, m := range h.smtp.Messages() {
			if strings.HasPrefix(m.Header.Get("Message-ID"), "<"+bid+"-report-after-") {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// TestABatchTooLargeForOneReportNodeIsReportedAndUpdated: 58,000 jobs, of
// which 57,995 fail, are more than a status-report node lists (~57,600
// jids). The batch is reported all the same (the node trimmed, with
// totals); its update report, after an operator resumed a failed job the
// node lists and one it had to leave out, names both as completed since,
// and not the jobs that had completed before. It takes ~30-60 s (creating
// and failing the jobs); -short skips it.
func TestABatchTooLargeForOneReportNodeIsReportedAndUpdated(t *testing.T) {
	if testing.Short() {
		t.Skip("58,000 jobs")
	}
	const n, early = 58000, 5
	h := newHarness(t)
	h.session = 30 * time.Second
	h.q = h.connect()
	ctx := context.Background()
	start := time.Now()
	bid, jids := h.spawnBatch(n)
	t.Logf("%d jobs created in %v", n, time.Since(start).Round(time.Millisecond))
	for i := range early {
		h.finish(jids[i], fmt.Sprintf("ark:/99999/fk4early%d", i), "")
	}
	failStart := time.Now()
	h.failPending(n-early, "payload unreadable")
	t.Logf("%d jobs failed in %v", n-early, time.Since(failStart).Round(time.Millisecond))

	h.start()
	b := h.waitBatch(bid, queue.BatchFailed)
	rep := b.GetStatusReport()
	failedTotal, successfulTotal := queue.ReportTotals(rep)
	kept := len(rep.GetFailedJobs())
	if failedTotal != n-early || successfulTotal != early || kept < 50000 || kept >= n-early ||
		len(rep.GetSuccessfulJobs()) != 0 || !slices.Equal(rep.GetFailedJobs(), jids[early:early+kept]) {
		t.Fatalf("first status-report: %d of %d failed listed, %d of %d successful", kept, failedTotal,
			len(rep.GetSuccessfulJobs()), successfulTotal)
	}
	if want := fmt.Sprintf("failed: %d of %d object(s) failed", n-early, n); b.GetStatus().GetMessage() != want {
		t.Errorf("status message %q, want %q", b.GetStatus().GetMessage(), want)
	}
	first := body(t, reportMail(t, h, bid+"-report"))
	for _, want := range []string{fmt.Sprintf("Completed (%d):", early), fmt.Sprintf("Failed (%d):", n-early),
		fmt.Sprintf("… and %d more", n-early-1000), jids[early] + "  (no ARK)"} {
		if !strings.Contains(first, want) {
			t.Errorf("first report lacks %q", want)
		}
	}

	// The operator resumes two failed jobs: the first the node lists, and
	// the last, which it had no room for. Both complete.
	listed, unlisted := jids[early], jids[n-1]
	if slices.Contains(rep.GetFailedJobs(), unlisted) {
		t.Fatalf("%s is listed; the test needs a job the node left out", unlisted)
	}
	for _, jid := range []string{listed, unlisted} {
		if _, err := admin.New(h.q).Jobs.Requeue(ctx, jid, 0, ""); err != nil {
			t.Fatal(err)
		}
		h.resume(jid, "ark:/99999/fk4again-"+jid)
	}
	if _, err := admin.New(h.q).Batches.UpdateReport(ctx, bid); err != nil {
		t.Fatal(err)
	}
	second := body(t, updateMail(t, h, bid))
	b = h.waitBatch(bid, queue.BatchFailed)
	for _, want := range []string{"Completed since the last report (2):", listed + "  ark:/99999/fk4again-" + listed,
		unlisted + "  ark:/99999/fk4again-" + unlisted, fmt.Sprintf("Failed (%d):", n-early-2),
		fmt.Sprintf("failed: 2 more object(s) completed, %d still failed, 0 in progress", n-early-2)} {
		if !strings.Contains(second, want) {
			t.Errorf("update report lacks %q", want)
		}
	}
	if strings.Contains(second, "fk4early") {
		t.Error("the update report lists jobs that had completed before the first report")
	}
	rep = b.GetStatusReport()
	if f, s := queue.ReportTotals(rep); f != n-early-2 || s != early+2 {
		t.Errorf("second status-report totals %d failed, %d successful", f, s)
	}
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}
