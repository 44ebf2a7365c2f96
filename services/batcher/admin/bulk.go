package admin

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	qadmin "github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// bulkParallel is how many jobs a bulk action moves at once: each move is
// a few ZooKeeper round trips, so a thousand jobs take seconds, not minutes,
// without crowding the server.
const bulkParallel = 8

// SearchJobs finds jobs by what they hold, a page at a time.
func (s *Server) SearchJobs(ctx context.Context, req *v1.SearchJobsRequest) (*v1.SearchJobsResponse, error) {
	page, err := s.tools().SearchJobs(ctx, qadmin.JobSearch{Filter: req.GetFilter(), PageSize: int(req.GetPageSize()),
		PageToken: req.GetPageToken(), MaxScan: int(req.GetMaxScan())})
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.SearchJobsResponse{Jobs: answerAll(page.Jobs), NextPageToken: page.Next, Scanned: int32(page.Scanned)}, nil
}

// BulkStates are the job states a bulk verb takes jobs from: those its
// single action accepts.
func BulkStates(verb v1.BulkVerb) []queue.JobState {
	var out []queue.JobState
	for _, st := range queue.JobStates() {
		var ok bool
		switch verb {
		case v1.BulkVerb_BULK_VERB_REQUEUE:
			ok = st == queue.Failed
		case v1.BulkVerb_BULK_VERB_HOLD:
			ok = st == queue.Pending
		case v1.BulkVerb_BULK_VERB_RELEASE:
			ok = st == queue.Held
		case v1.BulkVerb_BULK_VERB_FAIL:
			ok = queue.CanMoveJob(st, queue.Failed)
		case v1.BulkVerb_BULK_VERB_DELETE:
			ok = queue.CanMoveJob(st, queue.Deleted)
		case v1.BulkVerb_BULK_VERB_REPRIORITIZE:
			ok = queue.IsLive(st)
		}
		if ok {
			out = append(out, st)
		}
	}
	return out
}

// BulkAction applies one verb to every job the filter matches among the
// states the verb takes jobs from, each through the single action's method.
func (s *Server) BulkAction(ctx context.Context, req *v1.BulkActionRequest) (*v1.BulkActionResponse, error) {
	states := BulkStates(req.GetVerb())
	if st := req.GetFilter().GetState(); st != v1.JobState_JOB_STATE_UNSPECIFIED && !slices.Contains(states, st) {
		return nil, status.Errorf(codes.InvalidArgument, "filter.state %s: %s takes jobs that are %s",
			queue.JobStateName(st), verbName(req.GetVerb()), stateNames(states, " or "))
	}
	maxJobs := int(req.GetMaxJobs())
	if maxJobs == 0 {
		maxJobs = v1.BulkDefaultJobs
	}
	jids, truncated, err := s.matching(ctx, req.GetFilter(), states, maxJobs)
	if err != nil {
		return nil, err
	}
	resp := &v1.BulkActionResponse{Matched: int32(len(jids)), JobIds: jids, Truncated: truncated}
	if req.GetDryRun() {
		return resp, nil
	}
	resp.Results = make([]*v1.BulkJobResult, len(jids))
	sem := make(chan struct{}, bulkParallel)
	var wg sync.WaitGroup
	for i, jid := range jids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := &v1.BulkJobResult{JobId: jid, Ok: true}
			if err := s.bulkOne(ctx, req, jid); err != nil {
				st := status.Convert(err)
				r.Ok, r.Code, r.Error = false, st.Code().String(), st.Message()
			}
			resp.Results[i] = r
		}()
	}
	wg.Wait()
	for _, r := range resp.Results {
		if r.GetOk() {
			resp.Succeeded++
		} else {
			resp.Failed++
		}
	}
	s.Logger.InfoContext(ctx, "bulk action", "verb", verbName(req.GetVerb()), "matched", len(jids), "truncated", truncated,
		"succeeded", resp.Succeeded, "failed", resp.Failed)
	return resp, nil
}

// matching lists up to maxJobs jobs the filter matches, and whether more do.
func (s *Server) matching(ctx context.Context, f *v1.JobFilter, states []queue.JobState, maxJobs int) ([]string, bool, error) {
	var jids []string
	token := ""
	for {
		page, err := s.tools().SearchJobs(ctx, qadmin.JobSearch{Filter: f, States: states, PageSize: v1.MaxJobPageSize, PageToken: token})
		if err != nil {
			return nil, false, rpcerr.FromQueue(err)
		}
		for _, j := range page.Jobs {
			if len(jids) == maxJobs {
				return jids, true, nil
			}
			jids = append(jids, j.GetId())
		}
		if token = page.Next; token == "" {
			return jids, false, nil
		}
	}
}

// bulkOne moves one job with the single action's method.
func (s *Server) bulkOne(ctx context.Context, req *v1.BulkActionRequest, jid string) error {
	msg := req.GetMessage()
	var err error
	switch req.GetVerb() {
	case v1.BulkVerb_BULK_VERB_REQUEUE:
		_, err = s.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: jid, State: req.GetState(), Message: msg})
	case v1.BulkVerb_BULK_VERB_HOLD:
		_, err = s.HoldJob(ctx, &v1.HoldJobRequest{JobId: jid, Message: msg})
	case v1.BulkVerb_BULK_VERB_RELEASE:
		_, err = s.ReleaseJob(ctx, &v1.ReleaseJobRequest{JobId: jid, Message: msg})
	case v1.BulkVerb_BULK_VERB_FAIL:
		_, err = s.FailJob(ctx, &v1.FailJobRequest{JobId: jid, Message: msg})
	case v1.BulkVerb_BULK_VERB_DELETE:
		_, err = s.DeleteJob(ctx, &v1.DeleteJobRequest{JobId: jid, Force: req.GetForce()})
	case v1.BulkVerb_BULK_VERB_REPRIORITIZE:
		_, err = s.ReprioritizeJob(ctx, &v1.ReprioritizeJobRequest{JobId: jid, Priority: req.Priority})
	default:
		err = status.Errorf(codes.InvalidArgument, "verb %v is not a bulk verb", req.GetVerb())
	}
	return err
}

// verbName is a verb as an operator says it ("requeue").
func verbName(v v1.BulkVerb) string {
	return strings.ToLower(strings.TrimPrefix(v.String(), "BULK_VERB_"))
}

func stateNames(states []queue.JobState, sep string) string {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = queue.JobStateName(st)
	}
	return strings.Join(names, sep)
}

// GetAggregates counts the jobs by collection, state and batch, and those
// that ended per hour and day.
func (s *Server) GetAggregates(ctx context.Context, req *v1.GetAggregatesRequest) (*v1.GetAggregatesResponse, error) {
	hours, days := int(req.GetHours()), int(req.GetDays())
	if hours == 0 {
		hours = v1.AggregateDefaultHours
	}
	if days == 0 {
		days = v1.AggregateDefaultDays
	}
	resp, err := s.tools().Aggregates(ctx, time.Now(), hours, days)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return resp, nil
}
