package queue

import (
	"context"
	"fmt"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// ReportTotals is how many jobs a status-report counts as failed and as
// successful: its totals, never less than its lists (a report read from
// ZooKeeper has them filled; one built in memory may leave them 0). A
// list shorter than its total was trimmed to fit the node (see
// fitStatusReport); the whole lists are the batch's states/batch-failed and
// states/batch-completed references (BatchJobIDs).
func ReportTotals(r *v1.StatusReport) (failed, successful int) {
	return int(reportTotal(r.GetFailedJobsTotal(), r.GetFailedJobs())),
		int(reportTotal(r.GetSuccessfulJobsTotal(), r.GetSuccessfulJobs()))
}

// ReportTrimmed reports whether either list of r is shorter than its total.
func ReportTrimmed(r *v1.StatusReport) bool {
	f, s := ReportTotals(r)
	return f > len(r.GetFailedJobs()) || s > len(r.GetSuccessfulJobs())
}

// CompletedAfterReport returns those of jids whose reference in batch bid's
// states/batch-completed was created after the batch's status-report was
// last written (all that have one, if the batch has no report), in the
// order given; a jid without such a reference is left out. It compares
// ZooKeeper transaction ids (the reference's creation, the report's last
// change), not clocks, so it is exact whoever wrote either. A job's
// reference moves into batch-completed once, when it completes (Completed
// is terminal), so these are the jobs completed since that report.
//
// The batcher needs it for an update report that follows a report whose
// lists were trimmed: the jobs in neither of its lists may have been
// successful then or completed since. It reads one node per jid.
func (c *Client) CompletedAfterReport(ctx context.Context, bid string, jids []string) ([]string, error) {
	ok, st, err := c.exists(ctx, c.p.batchNode(bid, nodeStatusReport))
	if err != nil {
		return nil, fmt.Errorf("reading the status-report of batch %s: %w", bid, err)
	}
	after := int64(-1)
	if ok {
		after = st.Mzxid
	}
	keep := make([]bool, len(jids))
	errs := make([]error, len(jids))
	eachAtMost(len(jids), 64, func(i int) {
		ok, st, err := c.exists(ctx, c.p.batchRef(bid, folderCompleted, jids[i]))
		if err != nil {
			errs[i] = fmt.Errorf("reading the reference of job %s in batch %s: %w", jids[i], bid, err)
			return
		}
		keep[i] = ok && st.Czxid > after
	})
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: the others likely say the same
		}
	}
	var out []string
	for i, jid := range jids {
		if keep[i] {
			out = append(out, jid)
		}
	}
	return out, nil
}
