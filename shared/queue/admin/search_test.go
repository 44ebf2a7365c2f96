package admin

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// searchBenchJobs is how many jobs BenchmarkSearchJobs puts in the queue:
// INGESTQ_SEARCH_JOBS, default 10000 (100000 takes ZooKeeper ~650 MB of
// heap and minutes to create).
func searchBenchJobs(b *testing.B) int {
	if s := os.Getenv("INGESTQ_SEARCH_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			b.Fatalf("INGESTQ_SEARCH_JOBS=%q: want a number of 1000 or more", s)
		}
		return n
	}
	return 10000
}

// BenchmarkSearchJobs measures a search that must read every job of the
// queue: one job in a hundred is of the collection searched for, so the
// whole queue is scanned (status, configuration, identifiers and the small
// nodes of each job) in pages of 100 matches. It reports the jobs read per
// second; the time of one search grows linearly with the jobs the queue
// holds (one multi-read per 64 jobs, four at a time).
func BenchmarkSearchJobs(b *testing.B) {
	n := searchBenchJobs(b)
	// A long session: creating the jobs keeps the server busy for minutes,
	// and on a loaded machine a short session expires meanwhile.
	connectCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := session.Connect(connectCtx, session.Options{Servers: zktest.Servers(b), Root: zktest.Root(b), SessionTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	a := New(c)
	const perBatch = 1000
	made := time.Now()
	for k := 0; k < n; k += perBatch {
		// A minute per batch, not per run: a run of 100000 jobs takes longer.
		ctx := testCtx(b)
		bid, err := batches.New(c).CreateBatch(ctx, &v1.Submission{ProfileName: "demo_profile", Submitter: "dana",
			PayloadUrl: "http://127.0.0.1:1/manifest.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
			SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD})
		if err != nil {
			b.Fatal(err)
		}
		bc, err := batches.New(c).ClaimBatch(ctx, bid)
		if err != nil {
			b.Fatal(err)
		}
		if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
			b.Fatal(err)
		}
		jobs := make([]batches.NewJob, min(perBatch, n-k))
		for i := range jobs {
			coll := "common_coll"
			if (k+i)%100 == 0 {
				coll = "rare_coll"
			}
			jobs[i] = batches.NewJob{Priority: 5, Configuration: &v1.JobConfiguration{
				ProfileName: "demo_profile", Submitter: "dana", Collection: coll, PayloadUrl: "http://127.0.0.1:1/f.checkm",
				PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, BatchEntry: int32(i)},
				Identifiers: &v1.Identifiers{LocalId: []string{fmt.Sprintf("local-%d", k+i)}}}
		}
		if _, err := bc.CreateJobs(ctx, jobs); err != nil {
			b.Fatal(err)
		}
		if err := bc.FinishSpawning(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%d jobs created in %v", n, time.Since(made).Round(time.Second))
	filter := &v1.JobFilter{Collection: "rare_coll"}
	b.ResetTimer()
	for b.Loop() {
		ctx := testCtx(b)
		found, scanned, token := 0, 0, ""
		for {
			page, err := a.Jobs.Search(ctx, JobSearch{Filter: filter, PageSize: 100, PageToken: token})
			if err != nil {
				b.Fatal(err)
			}
			found += len(page.Jobs)
			scanned += page.Scanned
			if token = page.Next; token == "" {
				break
			}
		}
		if want := (n + 99) / 100; found != want || scanned != n {
			b.Fatalf("found %d of %d jobs reading %d, want %d reading %d", found, n, scanned, want, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "jobs-read/s")
	b.ReportMetric(float64(n), "jobs")
}
