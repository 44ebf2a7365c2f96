package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// BenchmarkLeaseAndComplete leases rounds of 20 jobs in Recording one after
// the other through Lease and completes each, as an inventory does, and
// reports the ZooKeeper requests the recorder's session sent per job (-v
// lists them by operation).
func BenchmarkLeaseAndComplete(b *testing.B) {
	const jobsPerRound = 20
	root := zktest.Root(b)
	q := queuetest.Connect(b, root)
	rec := queuetest.Connect(b, root)
	m := benchManager(b, rec)
	news := make([]batches.NewJob, jobsPerRound)
	for i := range news {
		news[i] = batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4b"}}
	}
	var sent, done int64
	ops := map[string]int64{}
	for b.Loop() {
		b.StopTimer()
		for _, jid := range queuetest.SpawnN(b, q, news, queue.Storing) {
			queuetest.Move(b, q, jid, jobs.Change{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"}})
		}
		opsBefore, sentBefore := queuetest.RequestCounts(rec)
		b.StartTimer()
		for range jobsPerRound {
			l, err := m.Lease(context.Background(), 10*time.Second, time.Minute)
			if err != nil || l == nil {
				b.Fatalf("Lease = %v, %v", l, err)
			}
			if err := m.Complete(context.Background(), l.ID); err != nil {
				b.Fatal(err)
			}
		}
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

func benchManager(b *testing.B, q *session.Session) *Manager {
	return start(b, q, Options{})
}
