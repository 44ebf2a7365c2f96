package web

import (
	"context"
	"slices"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// rules are the batcher's answer to GetStateRules: what its methods accept
// for a job or batch in each state. The console offers an action only
// where the rules say it applies; it decides none itself.
type rules struct {
	jobs    map[v1.JobState]*v1.JobStateRule
	batches map[v1.BatchState]*v1.BatchStateRule
	order   []v1.JobState // the job states, in pipeline order
	// verify: VerifyObject reads stored versions at this batcher.
	verify bool
}

// rules asks the batcher for its rules.
func (c *Console) rules(ctx context.Context) (*rules, error) {
	resp, err := c.admin.GetStateRules(ctx, &v1.GetStateRulesRequest{})
	if err != nil {
		return nil, err
	}
	r := &rules{jobs: map[v1.JobState]*v1.JobStateRule{}, batches: map[v1.BatchState]*v1.BatchStateRule{}, verify: resp.GetVerifyObjects()}
	for _, j := range resp.GetJobs() {
		r.jobs[j.GetState()] = j
		r.order = append(r.order, j.GetState())
	}
	for _, b := range resp.GetBatches() {
		r.batches[b.GetState()] = b
	}
	return r, nil
}

// jobAllows reports whether a job in s takes action.
func (r *rules) jobAllows(s v1.JobState, action v1.BulkVerb) bool {
	return slices.Contains(r.jobs[s].GetActions(), action)
}

// jobStatesWhere names, space-separated, the job states in which keep holds.
func (r *rules) jobStatesWhere(keep func(*v1.JobStateRule) bool) string {
	var names []string
	for _, s := range r.order {
		if keep(r.jobs[s]) {
			names = append(names, jobStateName(s))
		}
	}
	return strings.Join(names, " ")
}

// requeueTargets are the states a failed job may be requeued to.
func (r *rules) requeueTargets() []string {
	return strings.Fields(r.jobStatesWhere((*v1.JobStateRule).GetRequeueTarget))
}

// batchAllows reports whether a batch in s takes action.
func (r *rules) batchAllows(s v1.BatchState, action v1.BatchAction) bool {
	return slices.Contains(r.batches[s].GetActions(), action)
}

// batchOpen reports whether a batch in s has yet to report: deleting one
// of its jobs needs force.
func (r *rules) batchOpen(s v1.BatchState) bool { return r.batches[s].GetOpen() }

// failingStages are the states a job can fail in.
func (r *rules) failingStages() []string {
	return strings.Fields(r.jobStatesWhere((*v1.JobStateRule).GetFailingStage))
}

// live reports whether a job in s is still open work of its batch.
func (r *rules) live(s v1.JobState) bool { return r.jobs[s].GetLive() }
