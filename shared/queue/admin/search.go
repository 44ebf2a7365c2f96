package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
)

// JobSearch is one call of Jobs.Search (the SearchJobs RPC).
type JobSearch struct {
	// Filter: every field it sets must match (nil matches every job).
	Filter *v1.JobFilter
	// States, when set, keeps only jobs in one of them (as Filter.State
	// does for one); the folders of these states are the ones listed.
	States []queue.JobState
	// PageSize: the matches returned at most (default 100, at most 1000).
	PageSize int
	// PageToken: a job id; the search goes on after it.
	PageToken string
	// MaxScan: the jobs read at most in this call (default and at most
	// v1.MaxSearchScan).
	MaxScan int
}

// JobPage is one page of a search.
type JobPage struct {
	// Jobs match, by job id, with their status, batch, priority, space
	// needed, configuration and identifiers (nothing else is read).
	Jobs []*v1.Job
	// Next is the token of the next call, "" once every candidate was read.
	Next string
	// Scanned counts the jobs read.
	Scanned int
}

// Search finds the jobs a filter matches, by job id. The candidates are
// the jobs of the batch named, else of the states named (Filter.State,
// States, Failed for Filter.FailingStage), else every job; each is read
// (status, configuration, identifiers and the small nodes: one multi-read
// per 10 jobs, 16 at once) and matched. A job deleted meanwhile, or whose nodes are
// unreadable, is left out (fsck reports the latter).
func (t *Jobs) Search(ctx context.Context, s JobSearch) (JobPage, error) {
	size := s.PageSize
	if size <= 0 {
		size = 100
	}
	size = min(size, v1.MaxJobPageSize)
	maxScan := s.MaxScan
	if maxScan <= 0 || maxScan > v1.MaxSearchScan {
		maxScan = v1.MaxSearchScan
	}
	f := s.Filter
	states := slices.Clone(s.States)
	if st := f.GetState(); st != v1.JobState_JOB_STATE_UNSPECIFIED {
		if len(states) > 0 && !slices.Contains(states, st) {
			return JobPage{}, nil
		}
		states = []queue.JobState{st}
	}
	if f.GetFailingStage() != v1.JobState_JOB_STATE_UNSPECIFIED {
		if len(states) > 0 && !slices.Contains(states, queue.Failed) {
			return JobPage{}, nil
		}
		states = []queue.JobState{queue.Failed}
	}
	jids, err := t.searchCandidates(ctx, f.GetBatchId(), states)
	if err != nil {
		return JobPage{}, err
	}
	start := 0
	if s.PageToken != "" {
		start = sort.SearchStrings(jids, s.PageToken)
		if start < len(jids) && jids[start] == s.PageToken {
			start++
		}
	}
	jids = jids[start:]
	m := newJobMatcher(f, states)
	var page JobPage
	for len(jids) > 0 {
		window := jids[:min(len(jids), jobs.ReadJobsWindow, maxScan-page.Scanned)]
		jobs, err := t.reader.ReadJobs(ctx, window)
		if err != nil {
			return JobPage{}, err
		}
		for i, j := range jobs {
			page.Scanned++
			if j != nil && m.matches(j) {
				page.Jobs = append(page.Jobs, j)
			}
			last := i == len(jobs)-1 && len(window) == len(jids)
			if len(page.Jobs) == size || page.Scanned == maxScan {
				if !last {
					page.Next = window[i]
				}
				return page, nil
			}
		}
		jids = jids[len(window):]
	}
	return page, nil
}

// searchCandidates lists the job ids a search reads, sorted.
func (t *base) searchCandidates(ctx context.Context, bid string, states []queue.JobState) ([]string, error) {
	var jids []string
	switch {
	case bid != "":
		if !queue.ValidBatchID(bid) {
			return nil, fmt.Errorf("%w: %q is not a batch id", queue.ErrInvalid, bid)
		}
		refs, err := t.reader.BatchJobIDs(ctx, bid)
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			jids = append(jids, r...)
		}
	case len(states) > 0:
		for _, st := range states {
			ids, err := t.reader.JobIDsIn(ctx, st)
			if err != nil {
				return nil, err
			}
			for id := range ids {
				jids = append(jids, id)
			}
		}
	default:
		names, _, err := t.z.Children(ctx, t.p.Jobs())
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, fmt.Errorf("listing jobs: %w", err)
		}
		for _, n := range names {
			if queue.ValidJobID(n) {
				jids = append(jids, n)
			}
		}
	}
	slices.Sort(jids)
	return slices.Compact(jids), nil
}

// jobMatcher is a filter, ready to match.
type jobMatcher struct {
	f       *v1.JobFilter
	states  []queue.JobState
	message string // lower case
}

func newJobMatcher(f *v1.JobFilter, states []queue.JobState) jobMatcher {
	return jobMatcher{f: f, states: states, message: strings.ToLower(f.GetMessage())}
}

// saidBy reports whether the job's status message, or the message of a
// state change in its history, contains the text looked for: a requeued
// job is found by the error it failed with.
func (m jobMatcher) saidBy(st *v1.JobStatus) bool {
	if strings.Contains(strings.ToLower(st.GetMessage()), m.message) {
		return true
	}
	return slices.ContainsFunc(st.GetHistory(), func(h *v1.JobStateChange) bool {
		return strings.Contains(strings.ToLower(h.GetMessage()), m.message)
	})
}

func (m jobMatcher) matches(j *v1.Job) bool {
	f, st, conf := m.f, j.GetStatus(), j.GetConfiguration()
	switch {
	case len(m.states) > 0 && !slices.Contains(m.states, st.GetStatus()),
		f.GetFailingStage() != v1.JobState_JOB_STATE_UNSPECIFIED &&
			(st.GetStatus() != queue.Failed || queue.FailedIn(st.GetLastSuccessfulStatus()) != f.GetFailingStage()),
		f.GetBatchId() != "" && j.GetBid() != f.GetBatchId(),
		f.GetCollection() != "" && conf.GetCollection() != f.GetCollection(),
		f.GetProfile() != "" && conf.GetProfileName() != f.GetProfile(),
		f.GetSubmitter() != "" && conf.GetSubmitter() != f.GetSubmitter(),
		f.GetArk() != "" && j.GetIdentifiers().GetPrimaryId() != f.GetArk(),
		f.GetLocalId() != "" && !slices.Contains(j.GetIdentifiers().GetLocalId(), f.GetLocalId()),
		m.message != "" && !m.saidBy(st),
		f.GetModifiedAfter() != nil && !st.GetLastModified().AsTime().After(f.GetModifiedAfter().AsTime()),
		f.GetModifiedBefore() != nil && !st.GetLastModified().AsTime().Before(f.GetModifiedBefore().AsTime()):
		return false
	}
	return true
}
