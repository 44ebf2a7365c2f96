package adminservice

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/rpcerr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// bulkParallel is how many jobs a bulk action moves at once: each move is
// a few ZooKeeper round trips, so a thousand jobs take seconds, not minutes,
// without crowding the server.
const bulkParallel = 8

// SearchJobs finds jobs by what they hold, a page at a time.
func (s *Server) SearchJobs(ctx context.Context, req *v1.SearchJobsRequest) (*v1.SearchJobsResponse, error) {
	if err := s.batchExists(ctx, req.GetFilter().GetBatchId()); err != nil {
		return nil, err
	}
	page, err := s.q().tools.Jobs.Search(ctx, admin.JobSearch{Filter: req.GetFilter(), PageSize: int(req.GetPageSize()),
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
	if err := s.batchExists(ctx, req.GetFilter().GetBatchId()); err != nil {
		return nil, err
	}
	maxJobs := int(req.GetMaxJobs())
	if maxJobs == 0 {
		maxJobs = v1.BulkDefaultJobs
	}
	matched, truncated, err := s.matching(ctx, req.GetFilter(), states, maxJobs)
	if err != nil {
		return nil, err
	}
	resp := &v1.BulkActionResponse{Matched: new(int32(len(matched))), Truncated: new(truncated),
		Succeeded: new(int32(0)), Failed: new(int32(0))}
	jids := make([]string, len(matched))
	for i, j := range matched {
		jids[i] = j.GetId()
	}
	resp.JobIds = jids
	if req.GetDryRun() {
		held := map[string]bool{} // by collection, read once
		for _, j := range matched {
			r := bulkResult(j)
			if m := j.GetConfiguration().GetCollection(); req.GetVerb() == v1.BulkVerb_BULK_VERB_RELEASE && m != "" {
				h, ok := held[m]
				if !ok {
					if h, err = s.collectionHeld(ctx, m); err != nil {
						return nil, err
					}
					held[m] = h
				}
				if h {
					r.Code = codes.FailedPrecondition.String()
					r.Error = fmt.Sprintf("its collection %s is held: release the collection first, which releases the job with it", m)
				}
			}
			resp.Results = append(resp.Results, r)
		}
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
			r := &v1.BulkJobResult{JobId: jid, Ok: new(true)}
			moved, err := s.bulkOne(ctx, req, jid)
			if err != nil {
				st := status.Convert(err)
				r.Ok, r.Code, r.Error = new(false), st.Code().String(), st.Message()
			} else {
				r = bulkResult(moved)
				r.Ok = new(true)
			}
			resp.Results[i] = r
		}()
	}
	wg.Wait()
	for _, r := range resp.Results {
		if r.GetOk() {
			*resp.Succeeded++
		} else {
			*resp.Failed++
		}
	}
	s.Logger.InfoContext(ctx, "bulk action", "verb", verbName(req.GetVerb()), "matched", len(jids), "truncated", truncated,
		"succeeded", resp.GetSucceeded(), "failed", resp.GetFailed())
	return resp, nil
}

// batchExists refuses a filter naming a batch that does not exist
// (NotFound, as ListJobs answers) rather than matching nothing.
func (s *Server) batchExists(ctx context.Context, bid string) error {
	if bid == "" {
		return nil
	}
	if _, err := s.q().batches.GetBatch(ctx, bid); err != nil {
		return rpcerr.FromQueue(err)
	}
	return nil
}

// bulkResult is what a bulk answer says of job j.
func bulkResult(j *v1.Job) *v1.BulkJobResult {
	return &v1.BulkJobResult{JobId: j.GetId(), State: j.GetStatus().GetStatus(), BatchId: j.GetBid(),
		LocalIds: j.GetIdentifiers().GetLocalId()}
}

// matching lists up to maxJobs jobs the filter matches, and whether more do.
func (s *Server) matching(ctx context.Context, f *v1.JobFilter, states []queue.JobState, maxJobs int) ([]*v1.Job, bool, error) {
	var jobs []*v1.Job
	token := ""
	for {
		page, err := s.q().tools.Jobs.Search(ctx, admin.JobSearch{Filter: f, States: states, PageSize: v1.MaxJobPageSize, PageToken: token})
		if err != nil {
			return nil, false, rpcerr.FromQueue(err)
		}
		for _, j := range page.Jobs {
			if len(jobs) == maxJobs {
				return jobs, true, nil
			}
			jobs = append(jobs, j)
		}
		if token = page.Next; token == "" {
			return jobs, false, nil
		}
	}
}

// bulkOne moves one job with the single action's method and returns the
// job as the move left it.
func (s *Server) bulkOne(ctx context.Context, req *v1.BulkActionRequest, jid string) (*v1.Job, error) {
	msg := req.GetMessage()
	var j interface{ GetJob() *v1.Job }
	var err error
	switch req.GetVerb() {
	case v1.BulkVerb_BULK_VERB_REQUEUE:
		j, err = s.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: jid, State: req.GetState(), Message: msg})
	case v1.BulkVerb_BULK_VERB_HOLD:
		j, err = s.HoldJob(ctx, &v1.HoldJobRequest{JobId: jid, Message: msg})
	case v1.BulkVerb_BULK_VERB_RELEASE:
		j, err = s.ReleaseJob(ctx, &v1.ReleaseJobRequest{JobId: jid, Message: msg})
	case v1.BulkVerb_BULK_VERB_FAIL:
		j, err = s.FailJob(ctx, &v1.FailJobRequest{JobId: jid, Message: msg})
	case v1.BulkVerb_BULK_VERB_DELETE:
		// The job is gone: what it was, read first, is what is left to say.
		got, gerr := s.q().reader.GetJob(ctx, jid)
		if _, err = s.DeleteJob(ctx, &v1.DeleteJobRequest{JobId: jid, Force: req.GetForce()}); err == nil {
			if gerr != nil {
				got = &v1.Job{Id: jid}
			}
			got.Status = &v1.JobStatus{Status: queue.Deleted}
			return got, nil
		}
	case v1.BulkVerb_BULK_VERB_REPRIORITIZE:
		j, err = s.ReprioritizeJob(ctx, &v1.ReprioritizeJobRequest{JobId: jid, Priority: req.Priority})
	default:
		err = status.Errorf(codes.InvalidArgument, "verb %v is not a bulk verb", req.GetVerb())
	}
	if err != nil {
		return nil, err
	}
	return j.GetJob(), nil
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
		if s.Retention > 0 {
			// Completed batches, and the jobs the counts read, go after
			// the retention: the days before it would all be zeros.
			days = min(int((s.Retention+24*time.Hour-1)/(24*time.Hour)), v1.AggregateDefaultDays)
		}
	}
	resp, err := s.q().tools.Queue.Aggregates(ctx, time.Now(), hours, days)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	if s.Retention > 0 {
		resp.Retention = durationpb.New(s.Retention)
	}
	return resp, nil
}
