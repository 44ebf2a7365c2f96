package main

import (
	"context"
	"log/slog"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
)

// nothingDownloading is a queue with no job in Downloading: the
// provisioner's bookings are all its own.
type nothingDownloading struct{}

func (nothingDownloading) JobIDsIn(context.Context, queue.JobState) (map[string]bool, error) {
	return map[string]bool{}, nil
}

func (nothingDownloading) JobStatus(context.Context, string) (*v1.JobStatus, error) {
	return nil, queue.ErrNotFound
}

func (nothingDownloading) ListJobs(context.Context, jobs.JobFilter) ([]*v1.Job, string, error) {
	return nil, "", nil
}

func (nothingDownloading) GetJobParts(context.Context, string, queue.Parts) (*v1.Job, error) {
	return nil, queue.ErrNotFound
}

// The handler's decisions, job by job, from the disk and what it booked:
// no ZooKeeper is needed to test them.
func TestHandleBooksWhatItLetsThroughAndWeighsTheNextJobAgainstIt(t *testing.T) {
	p, err := NewProvisioner(nothingDownloading{}, &smallDisk{total: 1000, used: 200}, t.TempDir(), testLimits, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	decide := func(jid string, need int64) string {
		return p.Handle(ctx, stagetest.New(&v1.Job{Id: jid, SpaceNeeded: need}, queue.Provisioning)).String()
	}
	for _, tt := range []struct {
		jid  string
		need int64
		want string
	}{
		{"a", 500, "next: provisioned 500 B (disk 1000 B, used 200 B, booked 0 B)"},
		// 800 B may be used; 200 B are, and a's 500 B are booked.
		{"b", 200, "wait 100ms: waiting for space: needs 200 B, free 100 B under the 80.0% limit (disk 1000 B, used 200 B, booked 500 B)"},
		{"c", 900, "to Failed: needs 900 B, more than the working storage may ever hold (80.0% of 1000 B)"},
		// Decided again, a job replaces its own booking instead of adding to it.
		{"a", 550, "next: provisioned 550 B (disk 1000 B, used 200 B, booked 0 B)"},
		{"d", 0, "wait 100ms: waiting for space: size unknown, and usage 75.0% is above the 60.0% allowed for jobs of unknown size (disk 1000 B, used 200 B, booked 550 B)"},
	} {
		if got := decide(tt.jid, tt.need); got != tt.want {
			t.Errorf("job %s needing %d:\n got %s\nwant %s", tt.jid, tt.need, got, tt.want)
		}
	}
	if got := p.Booked(); got != 550 {
		t.Errorf("booked %d, want a's 550", got)
	}
}
