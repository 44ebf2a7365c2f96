package queue

import v1 "github.com/ingestq/ingestq/proto/ingestq/v1"

// CallbackNotDelivered begins the message of a job that completed without
// its callback: the notifier tried it for as long as it may
// (INGESTQ_CALLBACK_RETRY_FOR) and gave up. The object is stored and
// recorded; a report lists the job as completed, saying so.
const CallbackNotDelivered = "callback not delivered"

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
