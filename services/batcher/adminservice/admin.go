// Package adminservice serves ingestq.v1.AdminService: the operators' actions on
// the queue, its collections, batches and jobs. Every refusal is a precise
// gRPC status (see rpcerr); working directories go with the batches and
// jobs they belong to.
package adminservice

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/internal/janitor"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/rpcerr"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/workdir"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxPages bounds the pages ReleaseCollection walks in one call; a
// collection with more held items is finished by calling it again.
const maxPages = 1000

// Server implements AdminService.
type Server struct {
	v1.UnimplementedAdminServiceServer
	// Session is the batcher's ZooKeeper session: the queue's door.
	Session  *session.Session
	Profiles *profile.Set
	Root     workdir.Root
	Logger   *slog.Logger
	// TraceURL links a trace id to a tracing backend: "{trace_id}" in it
	// is replaced (INGESTQ_TRACE_URL; empty: no links).
	TraceURL string
	// Store is where the processor stores versions, and Versions reads
	// them, for VerifyObject (an empty Store: nothing to verify).
	Store    fixity.Location
	Versions fixity.Reader
	// Retention is how long a completed batch is kept (INGESTQ_RETENTION):
	// GetAggregates' daily counts go that far back unless asked otherwise.
	Retention time.Duration
	// Now is the clock GetQueue tells how long jobs have waited by (nil:
	// time.Now).
	Now func() time.Time

	once    sync.Once
	clients clients
}

// clients are the queue's roles over Session that the server works
// through, made once.
type clients struct {
	tools   admin.Tools
	jobs    *jobs.Client
	reader  *jobs.Reader
	batches *batches.Client
	// figures is GetQueue's: it remembers when jobs entered their states.
	figures *admin.FigureReader
}

// q is the queue's roles over Session.
func (s *Server) q() *clients {
	s.once.Do(func() {
		tools := admin.New(s.Session)
		s.clients = clients{tools: tools, jobs: jobs.New(s.Session), reader: jobs.NewReader(s.Session),
			batches: batches.New(s.Session), figures: tools.Queue.NewFigureReader()}
	})
	return &s.clients
}

var _ v1.AdminServiceServer = (*Server)(nil)

// PauseQueue creates the pause marker.
func (s *Server) PauseQueue(ctx context.Context, _ *v1.PauseQueueRequest) (*v1.PauseQueueResponse, error) {
	if err := s.q().tools.Queue.Pause(ctx); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.PauseQueueResponse{Paused: new(true)}, nil
}

// UnpauseQueue removes the pause marker.
func (s *Server) UnpauseQueue(ctx context.Context, _ *v1.UnpauseQueueRequest) (*v1.UnpauseQueueResponse, error) {
	if err := s.q().tools.Queue.Unpause(ctx); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.UnpauseQueueResponse{Paused: new(false)}, nil
}

// GetQueue reports pause, jobs and batches per state, each stage's health,
// holds and workers.
func (s *Server) GetQueue(ctx context.Context, _ *v1.GetQueueRequest) (*v1.GetQueueResponse, error) {
	paused, err := s.q().jobs.Paused(ctx)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	fig, err := s.q().figures.Read(ctx)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	held, err := s.q().tools.Queue.HeldCollections(ctx)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	workers, err := s.q().tools.Queue.ListWorkers(ctx)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	resp := &v1.GetQueueResponse{Paused: new(paused), JobsByState: map[string]int32{}, BatchesByState: map[string]int32{},
		HeldCollections: held, Workers: workers}
	for _, st := range queue.JobStates() {
		resp.JobsByState[queue.JobStateName(st)] = int32(fig.Jobs[st])
	}
	for _, st := range queue.BatchStates() {
		resp.BatchesByState[queue.BatchStateName(st)] = int32(fig.Batches[st])
	}
	now := s.now()
	for _, st := range queue.JobStates() {
		if _, stage := fig.Workers[st]; stage {
			resp.Stages = append(resp.Stages, stageHealth(st, fig, workers, now))
		}
	}
	return resp, nil
}

// now is the server's clock.
func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// notMovingAfter is how long a job in flight may report progress that
// does not move before its stage is stalled: longer than any wait a
// moving transfer makes between its bytes (an idle timeout, a retry's
// backoff, a response's headers), so a slow download that moves never
// stalls its stage.
const notMovingAfter = 5 * time.Minute

// notMovingAt reports whether p's bytes have not moved for notMovingAfter
// at now.
func notMovingAt(p *v1.Progress, now time.Time) bool {
	return p.GetMoved() != nil && now.Sub(p.GetMoved().AsTime()) > notMovingAfter
}

// stageHealth is the stage taking jobs from st at a glance. A stage is
// stalled when jobs wait and no active worker takes them; a stage whose
// active replicas take jobs only when asked (the recorder's, for an
// inventory's leases) is stalled too when jobs wait, none is leased, and
// the oldest has waited longer than v1.LeaseInterval: no inventory asks;
// and so is one with a job in flight whose bytes have not moved for
// notMovingAfter (one whose bytes move, however slowly, is not).
func stageHealth(st queue.JobState, fig *admin.Figures, workers []*v1.WorkerInfo, now time.Time) *v1.StageHealth {
	name := queue.JobStateName(st)
	var registered, active, onDemand, inFlight, notMoving int32
	var paused, draining int
	for _, w := range workers {
		if w.GetStage() != name {
			continue
		}
		registered++
		inFlight += int32(len(w.GetInFlight()))
		switch {
		case w.GetDraining():
			draining++
		case w.GetPaused():
			paused++
		default:
			active++
			if w.GetConcurrency() == 0 {
				onDemand++
			}
		}
		for _, j := range w.GetInFlight() {
			if notMovingAt(j.GetProgress(), now) {
				notMoving++
			}
		}
	}
	waiting := max(int32(fig.Jobs[st])-inFlight, 0)
	h := &v1.StageHealth{State: st, Waiting: new(waiting), InFlight: new(inFlight), Workers: new(registered),
		ActiveWorkers: new(active), Stalled: new(false), NotMoving: new(notMoving), NotMovingAfter: durationpb.New(notMovingAfter)}
	oldest, hasOldest := fig.Oldest[st]
	if hasOldest {
		h.Oldest = timestamppb.New(oldest)
	}
	switch {
	case waiting == 0:
	case registered == 0:
		h.Reason = fmt.Sprintf("%d job(s) wait in %s and no replica taking jobs from it is registered: start one", waiting, name)
	case active == 0:
		var idle []string
		if paused > 0 {
			idle = append(idle, fmt.Sprintf("%d paused", paused))
		}
		if draining > 0 {
			idle = append(idle, fmt.Sprintf("%d draining", draining))
		}
		h.Reason = fmt.Sprintf("%d job(s) wait in %s and none of its %d replica(s) takes them (%s): resume one (StageService/Resume, or the console's workers table), or start one",
			waiting, name, registered, strings.Join(idle, ", "))
	case onDemand == active && inFlight == 0 && hasOldest && now.Sub(oldest) > v1.LeaseInterval:
		h.Reason = fmt.Sprintf("%d job(s) wait in %s and none has been leased for over %s: no inventory is leasing them (RecordingService/Lease); "+
			"the built-in recorder is off (INGESTQ_RECORDER_BUILTIN=false), so start the inventory's client, or turn the built-in recorder on",
			waiting, name, v1.LeaseInterval)
	}
	if h.Reason == "" && notMoving > 0 {
		h.Reason = fmt.Sprintf("%d job(s) in flight in %s report bytes that have not moved for %s: see each job's progress and its replica's log; draining the replica gives its jobs back",
			notMoving, name, notMovingAfter)
	}
	h.Stalled = new(h.Reason != "")
	return h
}

// HoldCollection puts a collection on hold.
func (s *Server) HoldCollection(ctx context.Context, req *v1.HoldCollectionRequest) (*v1.HoldCollectionResponse, error) {
	if err := s.q().tools.Queue.HoldCollection(ctx, req.GetCollection()); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.HoldCollectionResponse{Collection: req.GetCollection()}, nil
}

// ReleaseCollection lifts the hold, then returns the collection's held
// batches and held jobs to Pending.
func (s *Server) ReleaseCollection(ctx context.Context, req *v1.ReleaseCollectionRequest) (*v1.ReleaseCollectionResponse, error) {
	m := req.GetCollection()
	if err := s.q().tools.Queue.ReleaseCollection(ctx, m); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	resp := &v1.ReleaseCollectionResponse{Collection: m}
	token := ""
	for page := 0; page < maxPages; page++ {
		batches, next, err := s.q().tools.Batches.List(ctx, admin.BatchFilter{Status: queue.BatchHeld, PageSize: 500, PageToken: token})
		if err != nil {
			return nil, rpcerr.FromQueue(err)
		}
		for _, b := range batches {
			// Batches record their collection; older or peer-written ones
			// are matched through their profile.
			coll := b.GetSubmission().GetCollection()
			if coll == "" {
				name := b.GetSubmission().GetProfileName()
				prof, ok := s.Profiles.Get(name)
				if !ok {
					resp.NotReleased = append(resp.NotReleased, fmt.Sprintf("batch %s: profile %q is not configured, so its collection is unknown; use ReleaseBatch", b.GetId(), name))
					continue
				}
				coll = prof.Collection
			}
			if coll != m {
				continue
			}
			if _, err := s.q().tools.Batches.Release(ctx, b.GetId()); err != nil {
				resp.NotReleased = append(resp.NotReleased, fmt.Sprintf("batch %s: %v", b.GetId(), err))
				continue
			}
			resp.ReleasedBatches = append(resp.ReleasedBatches, b.GetId())
		}
		if token = next; token == "" {
			break
		}
	}
	token = ""
	for page := 0; page < maxPages; page++ {
		jobs, next, err := s.q().reader.ListJobs(ctx, jobs.JobFilter{State: queue.Held, PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, rpcerr.FromQueue(err)
		}
		for _, j := range jobs {
			if j.GetConfiguration().GetCollection() != m {
				continue
			}
			if _, err := s.q().tools.Jobs.Release(ctx, j.GetId(), "released with collection "+m); err != nil {
				resp.NotReleased = append(resp.NotReleased, fmt.Sprintf("job %s: %v", j.GetId(), err))
				continue
			}
			resp.ReleasedJobs = append(resp.ReleasedJobs, j.GetId())
		}
		if token = next; token == "" {
			break
		}
	}
	s.Logger.InfoContext(ctx, "collection released", "collection", m,
		"batches", len(resp.ReleasedBatches), "jobs", len(resp.ReleasedJobs), "not_released", len(resp.NotReleased))
	return resp, nil
}

// stillHeld refuses to release an item whose collection is on hold: it
// would only go back to Held.
func (s *Server) stillHeld(ctx context.Context, item, collection string) error {
	if collection == "" {
		return nil
	}
	held, err := s.q().jobs.CollectionHeld(ctx, collection)
	if err != nil {
		return rpcerr.FromQueue(err)
	}
	if held {
		return status.Errorf(codes.FailedPrecondition, "%s belongs to collection %s, which is still held: release the collection (ReleaseCollection) first", item, collection)
	}
	return nil
}

// ReleaseBatch returns a held batch to Pending.
func (s *Server) ReleaseBatch(ctx context.Context, req *v1.ReleaseBatchRequest) (*v1.ReleaseBatchResponse, error) {
	b, err := s.q().batches.GetBatch(ctx, req.GetBatchId())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	if prof, ok := s.Profiles.Get(b.GetSubmission().GetProfileName()); ok {
		if err := s.stillHeld(ctx, "batch "+b.GetId(), prof.Collection); err != nil {
			return nil, err
		}
	}
	b, err = s.q().tools.Batches.Release(ctx, req.GetBatchId())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.ReleaseBatchResponse{Batch: b}, nil
}

// UpdateReportBatch asks for a second report on a failed batch; the queue
// refuses it while a requeued job is still live.
func (s *Server) UpdateReportBatch(ctx context.Context, req *v1.UpdateReportBatchRequest) (*v1.UpdateReportBatchResponse, error) {
	b, err := s.q().tools.Batches.UpdateReport(ctx, req.GetBatchId())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.UpdateReportBatchResponse{Batch: b}, nil
}

// DeleteBatch removes a held or failed batch, its jobs and their working
// directories.
func (s *Server) DeleteBatch(ctx context.Context, req *v1.DeleteBatchRequest) (*v1.DeleteBatchResponse, error) {
	jobs, err := s.q().tools.Batches.Delete(ctx, req.GetBatchId())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	resp := &v1.DeleteBatchResponse{BatchId: req.GetBatchId()}
	for _, j := range jobs {
		resp.DeletedJobs = append(resp.DeletedJobs, j.GetId())
		s.removeDir(ctx, queue.JobWorkingDir(s.Root.Dir(), j))
	}
	if err := s.Root.RemoveBatch(req.GetBatchId()); err != nil {
		s.Logger.WarnContext(ctx, "batch directory left in place", "batch_id", req.GetBatchId(), "error", err.Error())
	}
	slices.Sort(resp.DeletedJobs)
	return resp, nil
}

// CleanupBatches removes completed batches now, as the janitor does after
// INGESTQ_RETENTION (the request is validated already).
func (s *Server) CleanupBatches(ctx context.Context, req *v1.CleanupBatchesRequest) (*v1.CleanupBatchesResponse, error) {
	d := req.GetOlderThan()
	limit := int(req.GetMaxBatches())
	if limit == 0 {
		limit = v1.CleanupBatchesDefault
	}
	res, err := janitor.Clean(ctx, s.q().tools.Batches, s.Root, d.AsDuration(), limit)
	resp := &v1.CleanupBatchesResponse{BatchIds: res.Batches, Jobs: int32(res.Jobs)}
	for _, e := range res.DirErrors {
		resp.WorkingDirsLeft = append(resp.WorkingDirsLeft, e.Error())
	}
	if err != nil {
		// What was removed before the failure stays removed; say so.
		return nil, status.Errorf(status.Code(rpcerr.FromQueue(err)), "cleaning up completed batches (%d removed before the failure): %v", len(res.Batches), err)
	}
	s.Logger.InfoContext(ctx, "completed batches cleaned up by an operator", "batches", len(res.Batches), "jobs", res.Jobs, "older_than", d.AsDuration())
	return resp, nil
}

// removeDir removes a deleted job's working directory; the job is gone
// already, so a directory that cannot be removed is logged, not refused.
func (s *Server) removeDir(ctx context.Context, dir string) {
	if dir == "" {
		return
	}
	if err := s.Root.Remove(dir); err != nil {
		s.Logger.WarnContext(ctx, "working directory left in place", "dir", dir, "error", err.Error())
	}
}

// GetBatch reads a batch by bid or batch uuid.
func (s *Server) GetBatch(ctx context.Context, req *v1.GetBatchRequest) (*v1.GetBatchResponse, error) {
	b, err := lookupBatch(ctx, s.q().batches, req.GetBatchId(), req.GetBatchUuid())
	if err != nil {
		return nil, err
	}
	if r := b.GetStatusReport(); r != nil {
		failed, successful := queue.ReportTotals(r)
		r.FailedJobsTotal, r.SuccessfulJobsTotal = int32(failed), int32(successful)
	}
	tp := b.GetSubmission().GetTraceparent()
	actions, err := s.batchActions(ctx, b)
	if err != nil {
		return nil, err
	}
	return &v1.GetBatchResponse{Batch: b, TraceId: telemetry.TraceID(tp), TraceUrl: telemetry.TraceURL(s.TraceURL, tp), Actions: actions}, nil
}

// lookupBatch reads a batch by bid, or by batch uuid when bid is empty.
func lookupBatch(ctx context.Context, q *batches.Client, bid, uuid string) (*v1.Batch, error) {
	if bid == "" {
		var err error
		if bid, err = q.BatchByUUID(ctx, uuid); err != nil {
			return nil, rpcerr.FromQueue(err)
		}
	}
	b, err := q.GetBatch(ctx, bid)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return b, nil
}

// ListBatches lists batches newest first. Each batch's report comes with
// its time and totals but not its job lists (GetBatch has them): a report
// may hold up to ~900 KiB of jids, and a page of large batches would not
// fit one response.
func (s *Server) ListBatches(ctx context.Context, req *v1.ListBatchesRequest) (*v1.ListBatchesResponse, error) {
	batches, next, err := s.q().tools.Batches.List(ctx, admin.BatchFilter{
		Status: req.GetStatus(), Submitter: req.GetSubmitter(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	for _, b := range batches {
		if r := b.GetStatusReport(); r != nil {
			failed, successful := queue.ReportTotals(r)
			b.StatusReport = &v1.StatusReport{LastModified: r.GetLastModified(),
				FailedJobsTotal: int32(failed), SuccessfulJobsTotal: int32(successful)}
		}
	}
	return &v1.ListBatchesResponse{Batches: batches, NextPageToken: next}, nil
}

// GetJob reads a job, with its manifest when asked.
func (s *Server) GetJob(ctx context.Context, req *v1.GetJobRequest) (*v1.GetJobResponse, error) {
	j, err := s.q().reader.GetJob(ctx, req.GetJobId())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	if req.GetIncludeManifest() {
		if j.Manifest, err = s.q().reader.GetManifest(ctx, req.GetJobId()); err != nil {
			return nil, rpcerr.FromQueue(err)
		}
	}
	if err := s.withProgress(ctx, []*v1.Job{j}); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	tp := cmp.Or(j.GetStatus().GetTraceparent(), j.GetConfiguration().GetTraceparent())
	resp := &v1.GetJobResponse{Job: answer(j), TraceId: telemetry.TraceID(tp), TraceUrl: telemetry.TraceURL(s.TraceURL, tp),
		ResumeState: queue.ResumeState(j.GetStatus().GetLastSuccessfulStatus())}
	if j.GetStatus().GetStatus() == queue.Failed {
		resp.RequeueStates = queue.RequeueStates(j.GetStatus().GetLastSuccessfulStatus(), j.GetStore() != nil, j.GetInventory() != nil)
	}
	if resp.Actions, err = s.jobActions(ctx, j, resp.GetRequeueStates()); err != nil {
		return nil, err
	}
	if resp.Waiting, err = s.jobWaiting(ctx, j); err != nil {
		return nil, err
	}
	return resp, nil
}

// ListJobs lists jobs by state or batch.
func (s *Server) ListJobs(ctx context.Context, req *v1.ListJobsRequest) (*v1.ListJobsResponse, error) {
	jobs, next, err := s.q().reader.ListJobs(ctx, jobs.JobFilter{
		State: req.GetState(), Batch: req.GetBatchId(), PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	if err := s.withProgress(ctx, jobs); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.ListJobsResponse{Jobs: answerAll(jobs), NextPageToken: next}, nil
}

// withProgress gives the jobs of js a replica works on now the progress
// its registry entry reports. The entries are read only when one of the
// jobs is in a state a stage works on.
func (s *Server) withProgress(ctx context.Context, js []*v1.Job) error {
	if !slices.ContainsFunc(js, func(j *v1.Job) bool {
		st := j.GetStatus().GetStatus()
		return queue.IsLive(st) && st != queue.Held
	}) {
		return nil
	}
	workers, err := s.q().tools.Queue.ListWorkers(ctx)
	if err != nil {
		return err
	}
	byJob := map[string]*v1.Progress{}
	for _, w := range workers {
		for _, f := range w.GetInFlight() {
			p := f.GetProgress()
			// A job given back by one replica and taken by another may
			// be in two entries for a moment: the latest measure wins.
			if old := byJob[f.GetJobId()]; p != nil && (old == nil || p.GetUpdated().AsTime().After(old.GetUpdated().AsTime())) {
				byJob[f.GetJobId()] = p
			}
		}
	}
	now := s.now()
	for _, j := range js {
		j.Progress = byJob[j.GetId()]
		if j.Progress != nil {
			j.Progress.NotMoving = notMovingAt(j.Progress, now)
		}
	}
	return nil
}

// HoldJob moves a pending job to Held.
func (s *Server) HoldJob(ctx context.Context, req *v1.HoldJobRequest) (*v1.HoldJobResponse, error) {
	j, err := s.q().tools.Jobs.Hold(ctx, req.GetJobId(), req.GetMessage())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.HoldJobResponse{Job: answer(j)}, nil
}

// ReleaseJob moves a held job back to Pending, unless its collection is
// still held.
func (s *Server) ReleaseJob(ctx context.Context, req *v1.ReleaseJobRequest) (*v1.ReleaseJobResponse, error) {
	j, err := s.q().reader.GetJob(ctx, req.GetJobId())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	if j.GetStatus().GetStatus() == queue.Held {
		if err := s.stillHeld(ctx, "job "+j.GetId(), j.GetConfiguration().GetCollection()); err != nil {
			return nil, err
		}
	}
	if j, err = s.q().tools.Jobs.Release(ctx, req.GetJobId(), req.GetMessage()); err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.ReleaseJobResponse{Job: answer(j)}, nil
}

// FailJob fails a job waiting between steps.
func (s *Server) FailJob(ctx context.Context, req *v1.FailJobRequest) (*v1.FailJobResponse, error) {
	j, err := s.q().tools.Jobs.Fail(ctx, req.GetJobId(), req.GetMessage())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.FailJobResponse{Job: answer(j)}, nil
}

// RequeueJob resumes a failed job.
func (s *Server) RequeueJob(ctx context.Context, req *v1.RequeueJobRequest) (*v1.RequeueJobResponse, error) {
	j, err := s.q().tools.Jobs.Requeue(ctx, req.GetJobId(), req.GetState(), req.GetMessage())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.RequeueJobResponse{Job: answer(j)}, nil
}

// ReprioritizeJob changes a live job's priority.
func (s *Server) ReprioritizeJob(ctx context.Context, req *v1.ReprioritizeJobRequest) (*v1.ReprioritizeJobResponse, error) {
	j, err := s.q().tools.Jobs.Reprioritize(ctx, req.GetJobId(), req.GetPriority())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.ReprioritizeJobResponse{Job: answer(j)}, nil
}

// DeleteJob removes a failed or held job and its working directory. A job
// whose status is unreadable is deleted all the same when the queue allows
// it, and its working directory with it: the deletion returns the job's
// bid and configuration as it read them. Only a job whose configuration
// names no working directory and whose bid is unreadable keeps its
// directory (in its batch's, which the batch's removal takes).
func (s *Server) DeleteJob(ctx context.Context, req *v1.DeleteJobRequest) (*v1.DeleteJobResponse, error) {
	j, err := s.q().tools.Jobs.Delete(ctx, req.GetJobId(), req.GetForce())
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	dir := queue.JobWorkingDir(s.Root.Dir(), j)
	if dir == "" {
		s.Logger.WarnContext(ctx, "deleted a job whose working directory cannot be known (its bid is unreadable): it is left in place",
			"job_id", req.GetJobId())
	}
	s.removeDir(ctx, dir)
	return &v1.DeleteJobResponse{JobId: req.GetJobId(), WorkingDir: dir}, nil
}

// ListWorkers lists the registered stage replicas.
func (s *Server) ListWorkers(ctx context.Context, _ *v1.ListWorkersRequest) (*v1.ListWorkersResponse, error) {
	workers, err := s.q().tools.Queue.ListWorkers(ctx)
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	return &v1.ListWorkersResponse{Workers: workers}, nil
}

// Fsck checks (and with repair mends) the tree.
func (s *Server) Fsck(ctx context.Context, req *v1.FsckRequest) (*v1.FsckResponse, error) {
	rep, err := s.q().tools.Queue.Fsck(ctx, admin.FsckOptions{Repair: req.GetRepair()})
	if err != nil {
		return nil, rpcerr.FromQueue(err)
	}
	resp := &v1.FsckResponse{JobsChecked: int32(rep.JobsChecked), BatchesChecked: int32(rep.BatchesChecked), Clean: rep.Clean()}
	for _, d := range rep.Damages {
		resp.Damages = append(resp.Damages, &v1.FsckDamage{Kind: d.Kind, Item: d.Item, Detail: d.Detail, Repaired: d.Repaired, Error: d.Error})
	}
	return resp, nil
}

// VerifyObject re-reads a stored version (the latest when none is named)
// and checks each file against its manifest.
func (s *Server) VerifyObject(ctx context.Context, req *v1.VerifyObjectRequest) (*v1.VerifyObjectResponse, error) {
	if s.Store.Root == "" && s.Store.Bucket == "" {
		return nil, status.Error(codes.FailedPrecondition, "no object store is configured here (INGESTQ_STORE, INGESTQ_STORE_ROOT, INGESTQ_S3_*)")
	}
	version := int(req.GetVersion())
	if version == 0 {
		latest, err := s.Store.LatestVersion(ctx, s.Versions, req.GetArk())
		if err != nil {
			return nil, storeRefusal(ctx, err, req.GetArk()+" has no version in the store", "finding the latest version of "+req.GetArk())
		}
		version = latest
	}
	manifestURL, err := s.Store.ManifestURL(req.GetArk(), version)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	rep, err := s.Versions.Verify(ctx, manifestURL)
	if err != nil {
		return nil, storeRefusal(ctx, err, fmt.Sprintf("version %d of %s is not in the store", version, req.GetArk()),
			fmt.Sprintf("version %d of %s", version, req.GetArk()))
	}
	resp := &v1.VerifyObjectResponse{ManifestUrl: manifestURL, Files: int32(rep.Files), Bytes: rep.Bytes,
		Ok: new(len(rep.Mismatches) == 0), Version: int32(version)}
	for _, m := range rep.Mismatches {
		resp.Mismatches = append(resp.Mismatches, &v1.FixityMismatch{File: m.File, Problem: m.Problem})
	}
	if !resp.GetOk() {
		s.Logger.WarnContext(ctx, "fixity check failed", "ark", req.GetArk(), "version", version, "mismatches", len(rep.Mismatches))
	}
	return resp, nil
}

// storeRefusal is the answer to a failed read of the store: NotFound
// saying missing, without the store's paths, for what is not there; the
// context's end; Unavailable with what failed for anything else.
func storeRefusal(ctx context.Context, err error, missing, what string) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, fs.ErrNotExist):
		return status.Error(codes.NotFound, missing)
	}
	return status.Errorf(codes.Unavailable, "%s: %v", what, err)
}
