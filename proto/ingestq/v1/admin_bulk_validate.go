package ingestqv1

import (
	"errors"
	"fmt"
)

// Limits of SearchJobs and BulkAction.
const (
	// MaxSearchScan is the most jobs one SearchJobs call reads (its default).
	MaxSearchScan = 100000
	// BulkDefaultJobs and MaxBulkJobs bound the jobs one BulkAction takes.
	BulkDefaultJobs = 1000
	MaxBulkJobs     = 10000
	// maxFilterText bounds a filter's text fields.
	maxFilterText = 1024
)

// Validate checks the filter and paging.
func (r *SearchJobsRequest) Validate() error {
	if err := validJobFilter(r.GetFilter()); err != nil {
		return err
	}
	if s := r.GetMaxScan(); s < 0 || s > MaxSearchScan {
		return fmt.Errorf("max_scan %d is outside 0..%d (0: %d)", s, MaxSearchScan, MaxSearchScan)
	}
	if err := validPaging(r.GetPageSize(), MaxJobPageSize, r.GetPageToken()); err != nil {
		return err
	}
	if t := r.GetPageToken(); t != "" {
		return validJobID("page_token", t)
	}
	return nil
}

// Validate checks the verb and what it needs, and refuses an empty filter.
func (r *BulkActionRequest) Validate() error {
	if _, ok := BulkVerb_name[int32(r.GetVerb())]; !ok || r.GetVerb() == BulkVerb_BULK_VERB_UNSPECIFIED {
		return errors.New("verb is required: BULK_VERB_REQUEUE, _HOLD, _RELEASE, _FAIL, _DELETE or _REPRIORITIZE")
	}
	f := r.GetFilter()
	if err := validJobFilter(f); err != nil {
		return err
	}
	if JobFilterEmpty(f) {
		return errors.New("filter is empty: it would take every job; set at least one of its fields")
	}
	if err := optionalText("message", r.GetMessage(), MaxAdminMessageBytes); err != nil {
		return err
	}
	if n := r.GetMaxJobs(); n < 0 || n > MaxBulkJobs {
		return fmt.Errorf("max_jobs %d is outside 0..%d (0: %d)", n, MaxBulkJobs, BulkDefaultJobs)
	}
	switch r.GetVerb() {
	case BulkVerb_BULK_VERB_REPRIORITIZE:
		if r.Priority == nil {
			return errors.New("priority is required with BULK_VERB_REPRIORITIZE (0 first .. 99 last)")
		}
		if p := r.GetPriority(); p < 0 || p > MaxJobPriority {
			return fmt.Errorf("priority %d is outside 0..%d", p, MaxJobPriority)
		}
	case BulkVerb_BULK_VERB_REQUEUE:
		if st := r.GetState(); st != JobState_JOB_STATE_UNSPECIFIED {
			return (&RequeueJobRequest{JobId: "jid0000000001", State: st}).Validate()
		}
	}
	if r.GetVerb() != BulkVerb_BULK_VERB_REPRIORITIZE && r.Priority != nil {
		return errors.New("priority goes with BULK_VERB_REPRIORITIZE only")
	}
	if r.GetVerb() != BulkVerb_BULK_VERB_REQUEUE && r.GetState() != JobState_JOB_STATE_UNSPECIFIED {
		return errors.New("state goes with BULK_VERB_REQUEUE only (filter.state selects jobs)")
	}
	if r.GetVerb() != BulkVerb_BULK_VERB_DELETE && r.GetForce() {
		return errors.New("force goes with BULK_VERB_DELETE only")
	}
	return nil
}

// JobFilterEmpty reports whether f sets no field (it matches every job).
func JobFilterEmpty(f *JobFilter) bool {
	return f.GetBatchId() == "" && f.GetCollection() == "" && f.GetState() == JobState_JOB_STATE_UNSPECIFIED &&
		f.GetFailingStage() == JobState_JOB_STATE_UNSPECIFIED && f.GetMessage() == "" && f.GetProfile() == "" &&
		f.GetSubmitter() == "" && f.GetLocalId() == "" && f.GetArk() == "" && f.GetModifiedAfter() == nil && f.GetModifiedBefore() == nil
}

func validJobFilter(f *JobFilter) error {
	if f.GetBatchId() != "" {
		if err := validBatchID("filter.batch_id", f.GetBatchId()); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		name string
		v    JobState
	}{{"filter.state", f.GetState()}, {"filter.failing_stage", f.GetFailingStage()}} {
		if _, ok := JobState_name[int32(s.v)]; !ok {
			return fmt.Errorf("%s %d is not a job state", s.name, s.v)
		}
	}
	for _, t := range []struct{ name, v string }{
		{"filter.collection", f.GetCollection()}, {"filter.message", f.GetMessage()}, {"filter.profile", f.GetProfile()},
		{"filter.submitter", f.GetSubmitter()}, {"filter.local_id", f.GetLocalId()}, {"filter.ark", f.GetArk()},
	} {
		if err := optionalText(t.name, t.v, maxFilterText); err != nil {
			return err
		}
	}
	for _, ts := range []struct {
		name string
		set  bool
		err  error
	}{{"filter.modified_after", f.GetModifiedAfter() != nil, f.GetModifiedAfter().CheckValid()},
		{"filter.modified_before", f.GetModifiedBefore() != nil, f.GetModifiedBefore().CheckValid()}} {
		if ts.set && ts.err != nil {
			return fmt.Errorf("%s: %w", ts.name, ts.err)
		}
	}
	if a, b := f.GetModifiedAfter(), f.GetModifiedBefore(); a != nil && b != nil && !a.AsTime().Before(b.AsTime()) {
		return fmt.Errorf("filter.modified_after %v is not before filter.modified_before %v", a.AsTime(), b.AsTime())
	}
	return nil
}

// Spans of GetAggregates.
const (
	AggregateDefaultHours = 48
	MaxAggregateHours     = 14 * 24
	AggregateDefaultDays  = 30
	MaxAggregateDays      = 366
)

// Validate checks the spans.
func (r *GetAggregatesRequest) Validate() error {
	if h := r.GetHours(); h < 0 || h > MaxAggregateHours {
		return fmt.Errorf("hours %d is outside 0..%d (0: %d)", h, MaxAggregateHours, AggregateDefaultHours)
	}
	if d := r.GetDays(); d < 0 || d > MaxAggregateDays {
		return fmt.Errorf("days %d is outside 0..%d (0: %d)", d, MaxAggregateDays, AggregateDefaultDays)
	}
	return nil
}
