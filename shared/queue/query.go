package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// JobTotal is how many jobs the queue holds, whatever their state (ended
// ones too, until their batch is cleaned up): the child count of the jobs
// folder, less its states folder, from one small read whatever the queue's
// size. The server's memory grows with it.
func (c *Client) JobTotal(ctx context.Context) (int, error) {
	ok, st, err := c.exists(ctx, c.p.jobs())
	switch {
	case err != nil:
		return 0, fmt.Errorf("counting the jobs: %w", err)
	case !ok || st.NumChildren == 0:
		return 0, nil
	}
	return int(st.NumChildren) - 1, nil // the states folder
}

// JobIDsIn returns the ids of the jobs in state (one listing of its folder,
// whatever the number of jobs; nothing else of them is read).
func (c *Client) JobIDsIn(ctx context.Context, state JobState) (map[string]bool, error) {
	names, _, err := c.children(ctx, c.p.jobStateDir(state))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("listing %s jobs: %w", JobStateName(state), err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		if _, jid, ok := parseEntry(n); ok {
			out[jid] = true
		}
	}
	return out, nil
}

// JobFilter selects jobs for ListJobs. With neither State nor Batch set,
// every job is listed.
type JobFilter struct {
	State     JobState // 0: any
	Batch     string   // "": any
	PageSize  int      // default 100, at most 1000
	PageToken string   // from the previous page
}

// ListJobs returns one page of jobs and the token of the next page ("" at
// the end). By state, jobs come in queue order (priority, then age); by
// batch or overall, by jid.
func (c *Client) ListJobs(ctx context.Context, f JobFilter) ([]*v1.Job, string, error) {
	size := f.PageSize
	if size <= 0 {
		size = 100
	}
	size = min(size, 1000)
	var keys []string // sort keys, used as page tokens
	var jids []string
	switch {
	case f.Batch != "":
		if !ValidBatchID(f.Batch) {
			return nil, "", fmt.Errorf("%w: %q is not a batch id", ErrInvalid, f.Batch)
		}
		ok, _, err := c.exists(ctx, c.p.batch(f.Batch))
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return nil, "", fmt.Errorf("batch %s: %w", f.Batch, ErrNotFound)
		}
		refs, err := c.BatchJobIDs(ctx, f.Batch)
		if err != nil {
			return nil, "", err
		}
		for _, r := range refs {
			jids = append(jids, r...)
		}
		slices.Sort(jids)
		keys = jids
	case f.State != v1.JobState_JOB_STATE_UNSPECIFIED:
		names, _, err := c.children(ctx, c.p.jobStateDir(f.State))
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, "", fmt.Errorf("listing %s jobs: %w", JobStateName(f.State), err)
		}
		for _, e := range sortedEntries(names) {
			keys = append(keys, fmt.Sprintf("%010d-%s", e.priority, e.jid))
			jids = append(jids, e.jid)
		}
	default:
		names, _, err := c.children(ctx, c.p.jobs())
		if err != nil {
			return nil, "", fmt.Errorf("listing jobs: %w", err)
		}
		for _, n := range names {
			if ValidJobID(n) {
				jids = append(jids, n)
			}
		}
		slices.Sort(jids)
		keys = jids
	}
	start := 0
	if f.PageToken != "" {
		start = sort.SearchStrings(keys, f.PageToken)
		if start < len(keys) && keys[start] == f.PageToken {
			start++
		}
	}
	end := min(start+size, len(jids))
	page := jids[start:end]
	jobs := make([]*v1.Job, len(page))
	errs := make([]error, len(page))
	eachAtMost(len(page), 32, func(i int) {
		jobs[i], errs[i] = c.GetJob(ctx, page[i])
	})
	out := jobs[:0]
	for i, j := range jobs {
		switch {
		case errs[i] == nil:
			out = append(out, j)
		case errors.Is(errs[i], ErrNotFound):
			// Deleted while listing.
		case errors.Is(errs[i], ErrCorrupt):
			// Listed with what can be said about it, not hidden.
			out = append(out, &v1.Job{Id: page[i], Status: &v1.JobStatus{Message: errs[i].Error()}})
		default:
			return nil, "", errs[i]
		}
	}
	next := ""
	if end < len(jids) {
		next = keys[end-1]
	}
	return out, next, nil
}
