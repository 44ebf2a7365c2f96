package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// smallDisk is a filesystem of a size the test chooses; the test frees or
// fills it by setting used.
type smallDisk struct {
	mu          sync.Mutex
	total, used uint64
	err         error
}

func (d *smallDisk) Usage(context.Context, string) (DiskUsage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DiskUsage{Total: d.total, Used: d.used}, d.err
}

func (d *smallDisk) setUsed(n uint64) {
	d.mu.Lock()
	d.used = n
	d.mu.Unlock()
}

// jobSpec is one job a test needs.
type jobSpec struct {
	spaceNeeded int64
	priority    int32
	container   bool
}

// createJobs stands in for the batcher: one batch whose jobs are created in
// order, then moved (as the stages before would) to state.
func createJobs(t *testing.T, q *session.Session, state queue.JobState, specs ...jobSpec) []string {
	t.Helper()
	jobs := make([]batches.NewJob, len(specs))
	for i, s := range specs {
		jobs[i] = batches.NewJob{Priority: s.priority, SpaceNeeded: s.spaceNeeded}
		if s.container {
			jobs[i].Configuration = &v1.JobConfiguration{PayloadType: v1.PayloadType_PAYLOAD_TYPE_CONTAINER}
		}
	}
	return queuetest.SpawnN(t, q, jobs, state)
}

// waiting waits until the job has been evaluated and told to wait.
func waiting(t *testing.T, q *session.Session, jid, message string) {
	t.Helper()
	queuetest.Eventually(t, jid+" waiting with "+message, func() bool {
		st := queuetest.Status(t, q, jid)
		if st.GetStatus() != queue.Provisioning {
			t.Fatalf("%s went on to %s (%q); want it waiting in Provisioning", jid, queue.JobStateName(st.GetStatus()), st.GetMessage())
		}
		return strings.Contains(st.GetMessage(), message)
	})
}

var testLimits = Limits{MaxUsage: 0.8, UnestimatedMaxUsage: 0.6, Retry: 100 * time.Millisecond}

// startProvisioner runs a provisioner on q against disk until the test ends.
func startProvisioner(t *testing.T, q *session.Session, disk Disk) *Provisioner {
	t.Helper()
	p, err := NewProvisioner(jobs.NewReader(q), disk, t.TempDir(), testLimits, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := p.StageConfig()
	cfg.Service = "provisioner"
	r, err := stage.New(jobs.New(q), cfg)
	if err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	t.Cleanup(func() {
		cancel()
		<-r.Done()
	})
	return p
}

func TestJobWaitsInProvisioningUntilSpaceIsFreed(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 700}
	jid := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 200, priority: 5})[0]
	startProvisioner(t, q, disk)

	waiting(t, q, jid, "waiting for space: needs 200 B, free 100 B under the 80.0% limit (disk 1000 B, used 700 B, booked 0 B)")
	disk.setUsed(600) // exactly at the limit after the job: allowed
	st := queuetest.WaitState(t, q, jid, queue.Downloading).GetStatus()
	if st.GetLastSuccessfulStatus() != queue.Provisioning || !strings.Contains(st.GetMessage(), "provisioned 200 B") {
		t.Errorf("status after provisioning: %v", st)
	}
}

func TestSmallJobPassesABigOneThatWaits(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 500}
	// The big job is first in queue order (higher priority, older).
	jids := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 400, priority: 1}, jobSpec{spaceNeeded: 100, priority: 5})
	big, small := jids[0], jids[1]
	p := startProvisioner(t, q, disk)

	queuetest.WaitState(t, q, small, queue.Downloading).GetStatus()
	waiting(t, q, big, "needs 400 B, free 200 B")
	if got := p.Booked(); got != 100 {
		t.Errorf("booked %d bytes, want the small job's 100", got)
	}
}

func TestJobsAreWeighedInPriorityOrder(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 0}
	// Room for one 500 B job only (80% of 1000 B): the first one weighed wins.
	jids := createJobs(t, q, queue.Provisioning,
		jobSpec{spaceNeeded: 500, priority: 9}, jobSpec{spaceNeeded: 500, priority: 1}, jobSpec{spaceNeeded: 500, priority: 5})
	startProvisioner(t, q, disk)

	queuetest.WaitState(t, q, jids[1], queue.Downloading).GetStatus()
	waiting(t, q, jids[2], "needs 500 B")
	waiting(t, q, jids[0], "needs 500 B")
}

func TestTwoLargeJobsCannotBothSqueezePast(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 0}
	jids := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 500, priority: 5}, jobSpec{spaceNeeded: 500, priority: 5})
	p := startProvisioner(t, q, disk)

	var through, held string
	queuetest.Eventually(t, "one job let through and the other told to wait", func() bool {
		a, b := queuetest.Status(t, q, jids[0]), queuetest.Status(t, q, jids[1])
		switch {
		case a.GetStatus() == queue.Downloading && strings.Contains(b.GetMessage(), "waiting for space"):
			through, held = jids[0], jids[1]
		case b.GetStatus() == queue.Downloading && strings.Contains(a.GetMessage(), "waiting for space"):
			through, held = jids[1], jids[0]
		}
		return through != ""
	})
	// The disk still looks empty (the download has written nothing yet):
	// only the booking keeps the second job out. Several cycles later it
	// is still waiting.
	waiting(t, q, held, "needs 500 B, free 300 B under the 80.0% limit (disk 1000 B, used 0 B, booked 500 B)")
	waittest.Stays(t, 5*testLimits.Retry, func() error {
		waiting(t, q, held, "booked 500 B")
		return nil
	})

	// The first download ends (its job fails, its files are gone): the
	// booking is released and the second job goes through.
	queuetest.Move(t, q, through, jobs.Change{To: queue.Failed})
	queuetest.WaitState(t, q, held, queue.Downloading).GetStatus()
	if got := p.Booked(); got != 500 {
		t.Errorf("booked %d bytes, want the second job's 500 only", got)
	}
}

func TestJobsOfUnknownSizeWaitAboveTheLowerThreshold(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 650}
	jids := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 0, priority: 5}, jobSpec{spaceNeeded: 100, priority: 5})
	unknown, sized := jids[0], jids[1]
	startProvisioner(t, q, disk)

	queuetest.WaitState(t, q, sized, queue.Downloading).GetStatus() // 650+100 ≤ 800
	waiting(t, q, unknown, "size unknown, and usage 75.0% is above the 60.0% allowed")
	disk.setUsed(400) // 400 + 100 booked = 50%
	queuetest.WaitState(t, q, unknown, queue.Downloading).GetStatus()
}

func TestJobLargerThanTheStorageMayEverHoldFails(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 0}
	jid := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 801, priority: 5})[0]
	startProvisioner(t, q, disk)

	st := queuetest.WaitState(t, q, jid, queue.Failed).GetStatus()
	if want := "needs 801 B, more than the working storage may ever hold (80.0% of 1000 B)"; st.GetMessage() != want {
		t.Errorf("message %q, want %q", st.GetMessage(), want)
	}
	if st.GetLastSuccessfulStatus() != queue.Estimating {
		t.Errorf("last_successful_status %v, want Estimating", st.GetLastSuccessfulStatus())
	}
}

func TestStorageThatCannotBeMeasuredKeepsJobsWaiting(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, err: errors.New("statfs /work: input/output error")}
	jid := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 1, priority: 5})[0]
	startProvisioner(t, q, disk)

	waiting(t, q, jid, "waiting: cannot measure the working storage: statfs /work: input/output error")
	disk.mu.Lock()
	disk.err = nil
	disk.mu.Unlock()
	queuetest.WaitState(t, q, jid, queue.Downloading).GetStatus()
}

func TestSeedBooksJobsAlreadyDownloading(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	disk := &smallDisk{total: 1000, used: 0}
	createJobs(t, q, queue.Downloading, jobSpec{spaceNeeded: 600, priority: 5}, jobSpec{spaceNeeded: 50, priority: 5})
	jid := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 300, priority: 5})[0]
	p := startProvisioner(t, q, disk)

	waiting(t, q, jid, "needs 300 B, free 150 B under the 80.0% limit (disk 1000 B, used 0 B, booked 650 B)")
	if got := p.Booked(); got != 650 {
		t.Errorf("booked %d bytes after seeding, want 650", got)
	}
}

func TestStatfsMeasuresTheRealWorkingStorage(t *testing.T) {
	dir := t.TempDir()
	u, err := statfsDisk{}.Usage(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.Total == 0 || u.Used > u.Total {
		t.Errorf("usage of %s: %+v; want a non-empty filesystem using at most its size", dir, u)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := (statfsDisk{}).Usage(context.Background(), missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("usage of a missing directory: %v; want ENOENT naming it", err)
	}
}

func TestLimitsThatContradictEachOtherAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits Limits
		want   string
	}{
		{"max usage above one", Limits{MaxUsage: 1.5, UnestimatedMaxUsage: 0.5, Retry: time.Second}, "max usage 1.5 must be in (0, 1]"},
		{"unknown-size threshold above max", Limits{MaxUsage: 0.5, UnestimatedMaxUsage: 0.7, Retry: time.Second}, "unestimated max usage 0.7 must be in (0, max usage 0.5]"},
		{"no retry", Limits{MaxUsage: 0.8, UnestimatedMaxUsage: 0.6}, "retry 0s must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.limits.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
	if err := testLimits.Validate(); err != nil {
		t.Errorf("sound limits refused: %v", err)
	}
}

func TestSweepListsDownloadingInsteadOfReadingEachBookedJob(t *testing.T) {
	root := zktest.Root(t)
	q, pq := queuetest.Connect(t, root), queuetest.Connect(t, root)
	disk := &smallDisk{total: 1000, used: 0}
	jids := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 100, priority: 5}, jobSpec{spaceNeeded: 100, priority: 5},
		jobSpec{spaceNeeded: 100, priority: 5})
	p := startProvisioner(t, pq, disk)
	for _, jid := range jids {
		queuetest.WaitState(t, q, jid, queue.Downloading)
	}
	// The downloads end; the next decision sweeps, the last sweep long
	// past.
	for _, jid := range jids {
		queuetest.Move(t, q, jid, jobs.Change{To: queue.Processing})
	}
	p.mu.Lock()
	p.sweptAt = time.Now().Add(-2 * sweepEvery)
	p.mu.Unlock()
	next := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 10, priority: 5})[0]
	queuetest.WaitState(t, q, next, queue.Downloading)
	if got := p.Booked(); got != 10 {
		t.Errorf("booked %d bytes, want the last job's 10: the others' downloads ended", got)
	}
	var statusReads, listings int64
	for _, r := range pq.Requests() {
		switch {
		case r.ReadsNode() && r.Node == "jobs/*/status":
			statusReads += r.Count
		case r.Op == "children" && r.Node == "jobs/states/*":
			listings += r.Count
		}
	}
	if statusReads != int64(len(jids)+1) {
		t.Errorf("%d status reads for %d jobs; want one each (its claim): the sweep lists Downloading instead", statusReads, len(jids)+1)
	}
	if listings == 0 {
		t.Error("no listing of a state folder")
	}
}

// TestAJobDownloadingThatWasNotLetThroughHereIsBooked: a failed download
// requeued goes straight back to Downloading (as does a job another replica
// let through): the next sweep books it at its space_needed, so the job
// after it waits for its room.
func TestAJobDownloadingThatWasNotLetThroughHereIsBooked(t *testing.T) {
	root := zktest.Root(t)
	q, pq := queuetest.Connect(t, root), queuetest.Connect(t, root)
	requeued := createJobs(t, q, queue.Downloading, jobSpec{spaceNeeded: 600, priority: 5})[0]
	queuetest.Move(t, q, requeued, jobs.Change{To: queue.Failed, Message: "the download failed"})
	p := startProvisioner(t, pq, &smallDisk{total: 1000, used: 0})
	queuetest.Move(t, q, requeued, jobs.Change{To: queue.Downloading, Message: "requeued"})
	next := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 300, priority: 5})[0]
	waiting(t, q, next, "waiting for space: needs 300 B, free 200 B")
	if got := p.Booked(); got != 600 {
		t.Errorf("booked %d bytes, want the requeued job's 600", got)
	}
	queuetest.Move(t, q, requeued, jobs.Change{To: queue.Processing})
	queuetest.WaitState(t, q, next, queue.Downloading)
}

// TestAContainersBookingFollowsItsSpaceNeededWhileItDownloads: a container
// is let through at its archive's size; its downloader raises space_needed
// to what the archive unpacks to before writing the files, and the
// provisioner books that from its next sweep on.
func TestAContainersBookingFollowsItsSpaceNeededWhileItDownloads(t *testing.T) {
	root := zktest.Root(t)
	q, pq := queuetest.Connect(t, root), queuetest.Connect(t, root)
	p := startProvisioner(t, pq, &smallDisk{total: 1000, used: 0})
	c := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 100, priority: 5, container: true})[0]
	queuetest.WaitState(t, q, c, queue.Downloading)
	cl := queuetest.Claim(t, q, c)
	unpacked := int64(700)
	if err := cl.Update(context.Background(), jobs.Change{SpaceNeeded: &unpacked}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The next decision sweeps, the last sweep long past.
	p.mu.Lock()
	p.sweptAt = time.Now().Add(-2 * sweepEvery)
	p.mu.Unlock()
	next := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 200, priority: 5})[0]
	waiting(t, q, next, "waiting for space: needs 200 B, free 100 B")
	if got := p.Booked(); got != 700 {
		t.Errorf("booked %d bytes, want the container's 700", got)
	}
}

func TestLedgerKeepsItsTotalThroughBookingsRebookingsAndDrops(t *testing.T) {
	l := ledger{jobs: map[string]*booking{}}
	steps := []struct {
		do              func()
		total, exceptJ1 int64
	}{
		{func() { l.book("j1", &booking{bytes: 100}) }, 100, 0},
		{func() { l.book("j2", &booking{bytes: 50}) }, 150, 50},
		{func() { l.book("j1", &booking{bytes: 30}) }, 80, 50}, // decided again: replaced, not added
		{func() { l.drop("j3") }, 80, 50},                      // never booked
		{func() { l.drop("j1") }, 50, 50},
		{func() { l.drop("j2") }, 0, 0},
	}
	for i, st := range steps {
		st.do()
		if l.total != st.total || l.except("j1") != st.exceptJ1 {
			t.Errorf("after step %d: total %d, except j1 %d; want %d, %d", i+1, l.total, l.except("j1"), st.total, st.exceptJ1)
		}
	}
}
