package builtin

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/inventory"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// BenchmarkBuiltInRecorder records rounds of 40 one-file versions with the
// built-in recorder, 4 at once, and reports the ZooKeeper requests the
// recorder's session sent per job (-v lists them by operation).
func BenchmarkBuiltInRecorder(b *testing.B) {
	const jobsPerRound, concurrency = 40, 4
	root := zktest.Root(b)
	q := queuetest.Connect(b, root)
	rec := queuetest.Connect(b, root)
	db, err := inventory.Open(context.Background(), filepath.Join(b.TempDir(), "inventory.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	manifest := storedVersion(b, b.TempDir(), "v1", []checkm.Entry{
		{FileURL: "file:///s/v1/producer/a.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("a", 64), FileSize: 5, FileName: "producer/a.txt"}})
	stop := startBuiltIn(b, rec, db, concurrency)
	defer stop()
	news := make([]batches.NewJob, jobsPerRound)
	for i := range news {
		news[i] = batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4b" + strings.Repeat("x", i)}}
	}
	var sent, done int64
	ops := map[string]int64{}
	for b.Loop() {
		b.StopTimer()
		opsBefore, sentBefore := queuetest.RequestCounts(rec)
		b.StartTimer()
		for _, jid := range queuetest.SpawnN(b, q, news, queue.Storing) {
			queuetest.Move(b, q, jid, jobs.Change{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: manifest, Mode: "add"}})
		}
		waittest.True(b, 10*time.Minute, "every job recorded", func() bool {
			counts, err := admin.New(q).Jobs.Counts(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			return counts[queue.Recording] == 0
		})
		b.StopTimer()
		opsAfter, sentAfter := queuetest.RequestCounts(rec)
		sent += sentAfter - sentBefore
		for k, v := range opsAfter {
			ops[k] += v - opsBefore[k]
		}
		done += jobsPerRound
		b.StartTimer()
	}
	b.ReportMetric(float64(sent)/float64(done), "zk-requests/job")
	if testing.Verbose() {
		var lines []string
		for k, v := range ops {
			if v > 0 {
				lines = append(lines, fmt.Sprintf("%s %.2f", k, float64(v)/float64(done)))
			}
		}
		slices.Sort(lines)
		b.Logf("ZooKeeper operations per job:\n%s", strings.Join(lines, "\n"))
	}
}

// startBuiltIn runs a built-in recorder on q recording into db, concurrency
// leases at once, until the returned stop.
func startBuiltIn(b *testing.B, q *session.Session, db *inventory.DB, concurrency int) (stop func()) {
	m, err := lease.New(jobs.New(q), lease.Options{Recorder: &Recorder{DB: db, Logger: slog.New(slog.DiscardHandler)}, Concurrency: concurrency})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	return func() {
		stopCtx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		m.Drain(stopCtx)
		cancel()
		<-done
	}
}
