// Package report builds what the batcher tells a depositor: the report on
// a batch whose jobs have all ended (completed and failed jobs with their
// ARKs, local ids and failure messages), the update report sent after an
// operator troubleshot the failed jobs, and the "batch queued" notice.
package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// MaxListed bounds the jobs a report lists per section. The status-report
// node keeps every jid up to ~57,000 jobs; past what a node holds the queue
// trims its lists and records their totals (queue.ReportTotals), and the
// batch's job references still list every job.
const MaxListed = 1000

// readers bounds the jobs read at once.
const readers = 16

// Line is one job of a report.
type Line struct {
	JobID string
	ARK   string
	// Version is the number of the version the job stored (0 when none
	// is known: not stored, or stored by a program that does not say).
	Version    int32
	LocalIDs   []string
	PayloadURL string
	Message    string // the job's last status message (why it failed)
	// FailedIn is the stage a failed job failed in ("" when not failed or
	// not known).
	FailedIn string
}

// Section is a list of jobs, of which the first MaxListed are spelled out.
type Section struct {
	Total int
	Lines []Line
}

// Report is one report on a batch.
type Report struct {
	Bid string
	// Update is true for a report that follows an earlier one.
	Update bool
	// Key names the report for good (its mail's Message-ID and outbox
	// file). It is derived from the stored status-report, which changes
	// only when a report is committed, so a report built again after a
	// crash gets the same key and its mail replaces the first attempt's.
	Key string
	// Completed lists the completed jobs (in an update report: only those
	// completed since the previous report).
	Completed Section
	// Failed lists the jobs failed now.
	Failed Section
	// InProgress lists jobs still live (requeued and not ended yet): only an
	// update report can meet them.
	InProgress Section
	// AllCompleted counts every completed job of the batch.
	AllCompleted int
	// Deleted counts jobs an operator deleted.
	Deleted int
	// SpawnStopped, when set, says why not every row of the payload became
	// a job: the batch fails whatever its jobs did.
	SpawnStopped string
	// Status is what the status-report node gets.
	Status *v1.StatusReport
}

// Final is the state the batch goes to once the report is sent.
// A batch with no completed object is never Completed: a report on
// nothing that succeeded says it failed.
func (r *Report) Final() queue.BatchState {
	if r.Failed.Total == 0 && r.InProgress.Total == 0 && r.SpawnStopped == "" && r.anyCompleted() {
		return queue.BatchCompleted
	}
	return queue.BatchFailed
}

// anyCompleted reports whether a job of the batch completed.
func (r *Report) anyCompleted() bool { return r.AllCompleted > 0 || r.Completed.Total > 0 }

// Jobless reports whether the batch never had a job: its payload could not
// be used.
func (r *Report) Jobless() bool {
	return !r.anyCompleted() && r.Failed.Total == 0 && r.InProgress.Total == 0 && r.Deleted == 0
}

// Reads are what a report reads of the queue: a batch's jobs, and when
// they completed.
type Reads struct {
	Jobs    *jobs.Reader
	Batches *batches.Client
}

// Build reads batch bid's jobs and makes its report. prev is the report
// sent before (nil for the first).
func Build(ctx context.Context, q Reads, bid string, prev *v1.StatusReport) (*Report, error) {
	refs, err := q.Jobs.BatchJobIDs(ctx, bid)
	if err != nil {
		return nil, fmt.Errorf("listing the jobs of batch %s: %w", bid, err)
	}
	completed, failed := refs["batch-completed"], refs["batch-failed"]
	r := &Report{
		Bid:          bid,
		Update:       prev != nil,
		Key:          reportKey(bid, prev),
		AllCompleted: len(completed),
		Deleted:      len(refs["batch-deleted"]),
		Status: &v1.StatusReport{
			LastModified:   timestamppb.Now(),
			FailedJobs:     slices.Clone(failed),
			SuccessfulJobs: slices.Clone(completed),
		},
	}
	newlyCompleted := completed
	if prev != nil {
		if newlyCompleted, err = completedSince(ctx, q, bid, prev, completed); err != nil {
			return nil, err
		}
	}
	if r.Completed, err = section(ctx, q, newlyCompleted); err != nil {
		return nil, err
	}
	if r.Failed, err = section(ctx, q, failed); err != nil {
		return nil, err
	}
	if r.InProgress, err = section(ctx, q, refs["batch-processing"]); err != nil {
		return nil, err
	}
	return r, nil
}

// completedSince returns those of completed (the batch's completed jobs
// now) that were not completed when prev was written, in the same order.
// Completed is terminal: every job prev counted as successful is completed
// still, and the others completed since (most were failed then and
// resumed by an operator; some were still in progress).
//
// When prev's lists are whole, that is completed minus prev's
// successful_jobs. When the queue had to trim them (a batch past ~57,000
// jobs), the jobs prev lists as failed are new for certain and those it
// lists as successful are not; of the jobs in neither list, exactly
// len(completed) - prev's successful total - the certain ones are new.
// If that is none or all of them, nothing more is read; otherwise the
// queue tells which by when their references were created, compared with
// the report's last change (one read per job).
func completedSince(ctx context.Context, q Reads, bid string, prev *v1.StatusReport, completed []string) ([]string, error) {
	wasFailed := map[string]bool{}
	for _, jid := range prev.GetFailedJobs() {
		wasFailed[jid] = true
	}
	wasSuccessful := map[string]bool{}
	for _, jid := range prev.GetSuccessfulJobs() {
		wasSuccessful[jid] = true
	}
	var certain, unknown []string
	for _, jid := range completed {
		switch {
		case wasFailed[jid]:
			certain = append(certain, jid)
		case !wasSuccessful[jid]:
			unknown = append(unknown, jid)
		}
	}
	_, successfulTotal := queue.ReportTotals(prev)
	missing := len(completed) - successfulTotal - len(certain)
	switch {
	case !queue.ReportTrimmed(prev) || missing >= len(unknown):
		// Whole lists: a job in neither completed since (it was in progress).
	case missing <= 0:
		unknown = nil
	default:
		var err error
		if unknown, err = q.Batches.CompletedAfterReport(ctx, bid, unknown); err != nil {
			return nil, fmt.Errorf("finding the jobs of batch %s completed since its last report: %w", bid, err)
		}
	}
	if len(unknown) == 0 {
		return certain, nil
	}
	isNew := map[string]bool{}
	for _, jid := range slices.Concat(certain, unknown) {
		isNew[jid] = true
	}
	out := make([]string, 0, len(isNew))
	for _, jid := range completed {
		if isNew[jid] {
			out = append(out, jid)
		}
	}
	return out, nil
}

// reportKey names the report that follows prev: "<bid>-report" for the
// first, "<bid>-report-after-<time of prev>" for each update.
func reportKey(bid string, prev *v1.StatusReport) string {
	if prev == nil {
		return bid + "-report"
	}
	return bid + "-report-after-" + prev.GetLastModified().AsTime().UTC().Format("20060102T150405Z")
}

// section reads the first MaxListed of jids.
func section(ctx context.Context, q Reads, jids []string) (Section, error) {
	s := Section{Total: len(jids)}
	listed := jids[:min(len(jids), MaxListed)]
	lines := make([]Line, len(listed))
	errs := make([]error, len(listed))
	sem := make(chan struct{}, readers)
	var wg sync.WaitGroup
	for i, jid := range listed {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			lines[i], errs[i] = line(ctx, q, jid)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Section{}, err
	}
	s.Lines = lines
	return s, nil
}

func line(ctx context.Context, q Reads, jid string) (Line, error) {
	j, err := q.Jobs.GetJobParts(ctx, jid, queue.PartIdentifiers|queue.PartConfiguration|queue.PartInventory)
	switch {
	case errors.Is(err, queue.ErrNotFound):
		return Line{JobID: jid, Message: "deleted while the report was written"}, nil
	case errors.Is(err, queue.ErrCorrupt):
		return Line{JobID: jid, Message: "job data unreadable: " + err.Error()}, nil
	case err != nil:
		return Line{}, fmt.Errorf("reading job %s for the report: %w", jid, err)
	}
	l := Line{
		JobID:      jid,
		ARK:        j.GetIdentifiers().GetPrimaryId(),
		Version:    j.GetInventory().GetVersion(),
		LocalIDs:   j.GetIdentifiers().GetLocalId(),
		PayloadURL: j.GetConfiguration().GetPayloadUrl(),
		Message:    j.GetStatus().GetMessage(),
	}
	if j.GetStatus().GetStatus() == queue.Failed {
		if s := queue.FailedStage(j.GetStatus()); s != v1.JobState_JOB_STATE_UNSPECIFIED {
			l.FailedIn = queue.JobStateName(s)
		}
	}
	return l, nil
}
