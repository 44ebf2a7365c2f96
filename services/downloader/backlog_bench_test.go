package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// BenchmarkOneHostsBacklog is a downloader replica of 64 workers, 32 of
// them for one host (the default share), working through 1,000 jobs of
// 1 KB from that host, all waiting in Downloading when it starts:
// go test -run '^$' -bench OneHostsBacklog -benchtime 1x .
// It reports jobs/s and how often a job was turned away by the host's
// limit (turned-away/job).
func BenchmarkOneHostsBacklog(b *testing.B) {
	const n = 1000
	for range b.N {
		b.StopTimer()
		work := b.TempDir()
		q := queuetest.Connect(b, zktest.Root(b))
		small := make([]byte, 1024)
		host := serveOn(b, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) { w.Write(small) })
		list := make([]job, n)
		for i := range list {
			name := fmt.Sprintf("f%d.bin", i)
			list[i] = job{files: []*v1.ManifestFile{declared(host.URL+"/"+name, name, small)}}
		}
		createJobs(b, q, work, list...)
		d := testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()})
		d.PerHost = 32
		cfg := d.StageConfig()
		cfg.Service, cfg.Concurrency = "downloader", 64
		r, err := stage.New(jobs.New(q), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		go r.Run(ctx)
		waittest.True(b, 10*time.Minute, "the backlog downloaded", func() bool {
			c, err := admin.New(q).Jobs.Counts(context.Background())
			return err == nil && c[queue.Processing] == n
		})
		took := time.Since(start)
		b.StopTimer()
		cancel()
		<-r.Done()
		b.ReportMetric(n/took.Seconds(), "jobs/s")
		b.ReportMetric(float64(r.Status().GetOutcomes()["retried"])/n, "turned-away/job")
	}
}
