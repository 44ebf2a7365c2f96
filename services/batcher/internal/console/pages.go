package console

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/telemetry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Page sizes when the address names none.
const (
	batchPageSize = 25
	jobPageSize   = 50
	// reportListMax bounds the job ids a batch page lists per report list.
	reportListMax = 200
)

// pageView is newView for a GET page, with the last action's outcome.
func (c *Console) pageView(w http.ResponseWriter, r *http.Request, title, nav string) *view {
	v := c.newView(r, title, nav)
	takeFlash(w, r, v)
	return v
}

// ---- the queue

// queueView is the queue page and, as JSON, what its script polls.
type queueView struct {
	Paused  bool               `json:"paused"`
	Total   int32              `json:"total"`
	States  []stateCount       `json:"-"`
	Counts  map[string]int32   `json:"counts"`
	Bars    map[string]float64 `json:"bars"`
	Held    []string           `json:"held_collections"`
	Workers []workerView       `json:"workers"`
	AsOf    string             `json:"as_of"`
	// Controls: the console can reach the replicas (StageCredentials).
	Controls bool `json:"-"`
}

type stateCount struct {
	Name  string
	Count int32
	Width float64
}

type workerView struct {
	Stage       string         `json:"stage"`
	ID          string         `json:"id"`
	Service     string         `json:"service"`
	Host        string         `json:"host"`
	Version     string         `json:"version"`
	State       string         `json:"state"`
	Concurrency int32          `json:"concurrency"`
	InFlight    []inFlightView `json:"in_flight"`
	Heartbeat   string         `json:"heartbeat"`
	Outcomes    string         `json:"outcomes"`
	Address     string         `json:"address"`
}

type inFlightView struct {
	JobID   string `json:"job_id"`
	BatchID string `json:"batch_id"`
	Since   string `json:"since"`
}

func newQueueView(resp *v1.GetQueueResponse, now time.Time) *queueView {
	q := &queueView{Paused: resp.GetPaused(), Counts: map[string]int32{}, Bars: map[string]float64{},
		Held: resp.GetHeldCollections(), AsOf: now.UTC().Format("15:04:05 UTC")}
	if q.Held == nil {
		q.Held = []string{}
	}
	var top int32
	for _, st := range queue.JobStates() {
		n := resp.GetJobsByState()[queue.JobStateName(st)]
		q.Total += n
		top = max(top, n)
	}
	for _, st := range queue.JobStates() {
		name := queue.JobStateName(st)
		n := resp.GetJobsByState()[name]
		w := barWidth(n, top)
		q.States = append(q.States, stateCount{Name: name, Count: n, Width: w})
		q.Counts[name] = n
		q.Bars[name] = w
	}
	q.Workers = workerViews(resp.GetWorkers(), now)
	return q
}

// workerViews lists workers by stage in pipeline order, then by id.
func workerViews(workers []*v1.WorkerInfo, now time.Time) []workerView {
	order := map[string]int{}
	for i, st := range queue.JobStates() {
		order[queue.JobStateName(st)] = i
	}
	rank := func(stage string) int {
		if i, ok := order[stage]; ok {
			return i
		}
		return len(order)
	}
	out := make([]workerView, 0, len(workers))
	for _, w := range workers {
		state := "working"
		switch {
		case w.GetDraining():
			state = "draining"
		case w.GetPaused():
			state = "paused"
		}
		var outcomes []string
		for _, k := range slices.Sorted(maps.Keys(w.GetOutcomes())) {
			outcomes = append(outcomes, fmt.Sprintf("%s %d", k, w.GetOutcomes()[k]))
		}
		wv := workerView{Stage: w.GetStage(), ID: w.GetId(), Service: w.GetService(), Host: w.GetHost(), Version: w.GetVersion(),
			State: state, Concurrency: w.GetConcurrency(), InFlight: []inFlightView{}, Heartbeat: ago(w.GetHeartbeat(), now),
			Outcomes: strings.Join(outcomes, ", "), Address: w.GetAddress()}
		for _, j := range w.GetInFlight() {
			wv.InFlight = append(wv.InFlight, inFlightView{JobID: j.GetJobId(), BatchID: j.GetBatchId(), Since: ago(j.GetSince(), now)})
		}
		out = append(out, wv)
	}
	slices.SortFunc(out, func(a, b workerView) int {
		return cmp.Or(cmp.Compare(rank(a.Stage), rank(b.Stage)), cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func (c *Console) queuePage(w http.ResponseWriter, r *http.Request) {
	resp, err := call(r.Context(), &v1.GetQueueRequest{}, c.admin.GetQueue)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := c.pageView(w, r, "Queue", "queue")
	qv := newQueueView(resp, time.Now())
	qv.Controls = c.stageCreds != nil
	v.Data = qv
	v.Live = "/api/queue"
	c.render(w, r, http.StatusOK, "queue", v)
}

// ---- batches

// batchView is one batch as the pages show it.
type batchView struct {
	ID          string
	UUID        string
	Submitter   string
	Profile     string
	Collection  string
	PayloadURL  string
	PayloadType string
	Mode        string
	Metadata    *v1.Metadata
	Submitted   string
	TraceID     string
	TraceURL    string
	Traceparent string
	State       string
	Message     string
	Modified    string
	Locked      bool
	Segments    []segment
	Total       int32
	Counts      *v1.BatchJobCounts
	Report      *reportView
	// ReportDiffers: the jobs have moved since the last report, whose
	// figures no longer match the live counts.
	ReportDiffers bool
	// Confirm is the warning the delete button asks the operator to accept.
	Confirm string
}

type reportView struct {
	Sent            string
	FailedCount     int // the report's totals, not the lengths of its lists
	SuccessfulCount int
	Failed          []string
	FailedMore      int
	Successful      []string
	SuccessfulMore  int
	// Trimmed: the node lists only some of the jobs counted (past what a
	// ZooKeeper node holds); the job list has them all.
	Trimmed bool
}

func newBatchView(b *v1.Batch) *batchView {
	sub := b.GetSubmission()
	bv := &batchView{ID: b.GetId(), UUID: sub.GetBatchId(), Submitter: sub.GetSubmitter(), Profile: sub.GetProfileName(),
		Collection: sub.GetCollection(), PayloadURL: sub.GetPayloadUrl(), PayloadType: queue.PayloadTypeName(sub.GetType()),
		Metadata: sub.GetMetadata(), Submitted: when(sub.GetSubmissionDate()), Traceparent: sub.GetTraceparent(),
		TraceID: telemetry.TraceID(sub.GetTraceparent()), State: queue.BatchStateName(b.GetStatus().GetStatus()),
		Message: b.GetStatus().GetMessage(), Modified: when(b.GetStatus().GetLastModified()), Locked: b.GetLocked(),
		Counts: b.GetCounts()}
	bv.Mode = submissionMode(sub.GetSubmissionMode())
	bv.Segments, bv.Total = progress(b.GetCounts())
	if rep := b.GetStatusReport(); rep != nil {
		failed, successful := queue.ReportTotals(rep)
		rv := &reportView{Sent: when(rep.GetLastModified()), FailedCount: failed, SuccessfulCount: successful,
			Trimmed: queue.ReportTrimmed(rep)}
		rv.Failed, rv.FailedMore = firstN(rep.GetFailedJobs(), reportListMax, failed)
		rv.Successful, rv.SuccessfulMore = firstN(rep.GetSuccessfulJobs(), reportListMax, successful)
		bv.Report = rv
		bv.ReportDiffers = reportDiffers(rep, b.GetCounts())
	}
	bv.Confirm = deleteBatchWarning(b)
	return bv
}

// reportDiffers reports whether a batch's report counts other failed or
// successful jobs than the batch has now (a job requeued, completed or
// deleted since it was sent).
func reportDiffers(rep *v1.StatusReport, c *v1.BatchJobCounts) bool {
	if rep == nil {
		return false
	}
	failed, successful := queue.ReportTotals(rep)
	return int32(failed) != c.GetFailed() || int32(successful) != c.GetCompleted()
}

// firstN is the first n of s and how many of total that leaves out.
func firstN(s []string, n, total int) ([]string, int) {
	s = s[:min(len(s), n)]
	return s, max(total-len(s), 0)
}

// deleteBatchWarning is what an operator must weigh before deleting a
// batch in its state; "" when no warning applies.
func deleteBatchWarning(b *v1.Batch) string {
	n := b.GetCounts().GetProcessing() + b.GetCounts().GetCompleted() + b.GetCounts().GetFailed() + b.GetCounts().GetDeleted()
	switch b.GetStatus().GetStatus() {
	case queue.BatchHeld:
		return fmt.Sprintf("Batch %s is held: deleting it removes it and its %d job(s), and its depositor will NOT be notified. Delete it?", b.GetId(), n)
	case queue.BatchFailed:
		return fmt.Sprintf("Batch %s failed: deleting it removes it, its %d job(s) and their working directories. Do this only once every attempt to recover its failed jobs is over. Delete it?", b.GetId(), n)
	}
	return ""
}

type batchesView struct {
	Batches   []*batchView
	Status    string
	Submitter string
	After     string
	First     string // this selection's first page
	Next      string // the next page, "" on the last
	States    []string
}

// badRequest is an address the console cannot read, as an admin refusal.
func badRequest(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// pageSize reads the size parameter (0 when absent).
func pageSize(r *http.Request) (int32, error) {
	s := r.URL.Query().Get("size")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, badRequest("size %q is not a number", s)
	}
	return int32(n), nil
}

func (c *Console) batchesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bv := batchesView{Status: q.Get("status"), Submitter: q.Get("submitter"), After: q.Get("after")}
	for _, st := range []queue.BatchState{queue.BatchPending, queue.BatchHeld, queue.BatchProcessing, queue.BatchReporting,
		queue.BatchUpdateReporting, queue.BatchCompleted, queue.BatchFailed, queue.BatchDeleted} {
		bv.States = append(bv.States, queue.BatchStateName(st))
	}
	req := &v1.ListBatchesRequest{Submitter: bv.Submitter, PageToken: bv.After}
	if bv.Status != "" {
		st, err := queue.ParseBatchState(bv.Status)
		if err != nil {
			c.fail(w, r, badRequest("status: %v", err))
			return
		}
		req.Status = st
	}
	size, err := pageSize(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	req.PageSize = cmp.Or(size, batchPageSize)
	resp, err := call(r.Context(), req, c.admin.ListBatches)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	for _, b := range resp.GetBatches() {
		bv.Batches = append(bv.Batches, newBatchView(b))
	}
	params := url.Values{}
	for k, v := range map[string]string{"status": bv.Status, "submitter": bv.Submitter, "size": q.Get("size")} {
		if v != "" {
			params.Set(k, v)
		}
	}
	bv.First = withQuery("/batches", params)
	if next := resp.GetNextPageToken(); next != "" {
		params.Set("after", next)
		bv.Next = withQuery("/batches", params)
	}
	v := c.pageView(w, r, "Batches", "batches")
	v.Data = bv
	c.render(w, r, http.StatusOK, "batches", v)
}

type batchPageView struct {
	Batch *batchView
	Jobs  jobListView
}

func (c *Console) batchPage(w http.ResponseWriter, r *http.Request) {
	bid := r.PathValue("bid")
	resp, err := call(r.Context(), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}}, c.admin.GetBatch)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	size, err := pageSize(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	after := r.URL.Query().Get("after")
	jobs, err := call(r.Context(), &v1.ListJobsRequest{BatchId: bid, PageSize: cmp.Or(size, jobPageSize), PageToken: after}, c.admin.ListJobs)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := c.pageView(w, r, "Batch "+bid, "batches")
	bv := newBatchView(resp.GetBatch())
	bv.TraceURL = telemetry.TraceURL(c.traceURL, resp.GetBatch().GetSubmission().GetTraceparent())
	v.Data = batchPageView{Batch: bv,
		Jobs: newJobList(jobs, url.Values{"size": sizeParam(size)}, batchURL(bid), after)}
	v.Live = "/api/batches/" + bid
	c.render(w, r, http.StatusOK, "batch", v)
}

// ---- jobs

// jobRow is one job in a list.
type jobRow struct {
	ID             string
	Bid            string
	State          string
	LastSuccessful string
	Priority       int32
	Size           string
	Retries        int32
	Message        string
	Modified       string
	Locked         bool
	// FailedIn is the stage a failed job failed in, "" otherwise.
	FailedIn string
	LocalIDs string
}

func newJobRow(j *v1.Job) jobRow {
	r := jobRow{ID: j.GetId(), Bid: j.GetBid(), State: stateName(j.GetStatus().GetStatus()),
		LastSuccessful: stateName(j.GetStatus().GetLastSuccessfulStatus()), Priority: j.GetPriority(),
		Size: humanBytes(j.GetSpaceNeeded()), Retries: j.GetStatus().GetRetryCount(), Message: j.GetStatus().GetMessage(),
		Modified: when(j.GetStatus().GetLastModified()), Locked: j.GetLocked(),
		LocalIDs: strings.Join(j.GetIdentifiers().GetLocalId(), ", ")}
	if j.GetStatus().GetStatus() == queue.Failed {
		if s := queue.FailedStage(j.GetStatus()); s != v1.JobState_JOB_STATE_UNSPECIFIED {
			r.FailedIn = queue.JobStateName(s)
		}
	}
	return r
}

// stateName is a job state's name, "—" for none (a null last_successful_status).
func stateName(s queue.JobState) string {
	if s == v1.JobState_JOB_STATE_UNSPECIFIED {
		return "—"
	}
	return queue.JobStateName(s)
}

// jobListView is a page of jobs with the address of the next one.
type jobListView struct {
	Jobs  []jobRow
	First string // this list's first page
	Next  string // the next page, "" on the last
	Paged bool   // this is not the first page
}

func newJobList(resp *v1.ListJobsResponse, params url.Values, base, after string) jobListView {
	l := jobListView{Paged: after != ""}
	for _, j := range resp.GetJobs() {
		l.Jobs = append(l.Jobs, newJobRow(j))
	}
	clean := url.Values{}
	for k, vs := range params {
		if len(vs) > 0 && vs[0] != "" {
			clean[k] = vs
		}
	}
	l.First = withQuery(base, clean)
	if next := resp.GetNextPageToken(); next != "" {
		clean.Set("after", next)
		l.Next = withQuery(base, clean)
	}
	return l
}

func withQuery(base string, q url.Values) string {
	if len(q) == 0 {
		return base
	}
	return base + "?" + q.Encode()
}

func sizeParam(size int32) []string {
	if size == 0 {
		return nil
	}
	return []string{strconv.Itoa(int(size))}
}

type jobsView struct {
	State  string
	Batch  string
	States []string
	List   jobListView
	// Form is the filter as given; Searching: it asks for more than a
	// state or a batch, so the list comes from SearchJobs, by job id.
	Form      filterForm
	Searching bool
	Scanned   int32
	// Bulk: the bulk actions, offered for a filter of a signed-in operator.
	Verbs        any
	ResumeStates []string
}

func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := readFilterForm(q)
	jv := jobsView{State: form.State, Batch: form.Batch, Form: form, Searching: form.searching(), Verbs: bulkVerbs}
	for _, st := range queue.JobStates() {
		jv.States = append(jv.States, queue.JobStateName(st))
		if st != queue.Deleted && queue.CanMoveJob(queue.Failed, st) {
			jv.ResumeStates = append(jv.ResumeStates, queue.JobStateName(st))
		}
	}
	size, err := pageSize(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if jv.Searching {
		if jv.List, jv.Scanned, err = c.searchJobs(r, form, size); err != nil {
			c.fail(w, r, err)
			return
		}
		v := c.pageView(w, r, "Jobs found", "jobs")
		v.Data = jv
		c.render(w, r, http.StatusOK, "jobs", v)
		return
	}
	req := &v1.ListJobsRequest{BatchId: jv.Batch, PageSize: cmp.Or(size, jobPageSize), PageToken: q.Get("after")}
	if jv.State != "" {
		st, err := queue.ParseJobState(jv.State)
		if err != nil {
			c.fail(w, r, badRequest("state: %v", err))
			return
		}
		req.State = st
		jv.State = queue.JobStateName(st)
		jv.Form.State = jv.State
	}
	resp, err := call(r.Context(), req, c.admin.ListJobs)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	jv.List = newJobList(resp, url.Values{"state": {jv.State}, "batch": {jv.Batch}, "size": sizeParam(size)}, "/jobs", q.Get("after"))
	title := "Jobs"
	if jv.State != "" {
		title = jv.State + " jobs"
	}
	v := c.pageView(w, r, title, "jobs")
	v.Data = jv
	c.render(w, r, http.StatusOK, "jobs", v)
}

// jobView is the job page: every node of the job.
type jobView struct {
	Job         *v1.Job
	Live        jobLive
	TraceID     string
	TraceURL    string
	Traceparent string
	Raw         string // the Job message as protojson
	BatchState  string // "" when the batch could not be read
	BatchNote   string // why not
	// Which states each action applies in, for the forms' data-states.
	HoldIn, ReleaseIn, RequeueIn, FailIn, DeleteIn string
	// NoActionIn are the states no action applies in.
	NoActionIn string
	// Current state, to render the applicable forms visible.
	State         string
	ResumeStates  []string
	DeleteConfirm string
	// History is the job's timeline, oldest first; HistoryDropped the
	// older changes no longer kept.
	History        []historyRow
	HistoryDropped int32
}

// historyRow is one state change of a job's timeline.
type historyRow struct {
	At, From, To, Worker, InState, Message string
}

func newHistory(st *v1.JobStatus) []historyRow {
	var rows []historyRow
	for _, h := range st.GetHistory() {
		r := historyRow{At: when(h.GetAt()), From: "created", To: queue.JobStateName(h.GetTo()), Worker: h.GetWorker(), Message: h.GetMessage()}
		if h.GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
			r.From = queue.JobStateName(h.GetFrom())
		}
		if h.GetInState() != nil {
			r.InState = h.GetInState().AsDuration().String()
		}
		rows = append(rows, r)
	}
	return rows
}

// jobLive is what the job page's script polls.
type jobLive struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	LastSuccessful string `json:"last_successful_status"`
	Resume         string `json:"resume"`
	RetryCount     int32  `json:"retry_count"`
	Priority       int32  `json:"priority"`
	SpaceNeeded    string `json:"space_needed"`
	Message        string `json:"message"`
	Modified       string `json:"last_modified"`
	Locked         string `json:"locked"`
	// What the stages add as the job moves on (the recorder's ARK, the
	// storer's store and inventory manifests), so the open page fills
	// them in.
	ARK       string            `json:"ark"`
	LocalIDs  string            `json:"local_ids"`
	Store     manifestRef       `json:"store"`
	Inventory manifestRef       `json:"inventory"`
	Metadata  map[string]string `json:"metadata"`
}

// manifestRef is a store or inventory node as the job page shows it: its
// mode and version ("—" when the job has none yet), and its manifest URL.
type manifestRef struct {
	Summary string `json:"summary"`
	URL     string `json:"url"`
}

func newManifestRef(mode string, version int32, url string, del bool) manifestRef {
	if mode == "" && url == "" {
		return manifestRef{Summary: "—"}
	}
	s := mode
	if version != 0 {
		s += fmt.Sprintf(" version %d", version)
	}
	if del {
		s += " (with deletions)"
	}
	return manifestRef{Summary: strings.TrimSpace(s), URL: url}
}

func newJobLive(j *v1.Job) jobLive {
	st := j.GetStatus()
	locked := "no"
	if j.GetLocked() {
		locked = "yes: a stage is working on it"
	}
	return jobLive{ID: j.GetId(), State: stateName(st.GetStatus()), LastSuccessful: stateName(st.GetLastSuccessfulStatus()),
		Resume: queue.JobStateName(queue.ResumeState(st.GetLastSuccessfulStatus())), RetryCount: st.GetRetryCount(),
		Priority: j.GetPriority(), SpaceNeeded: humanBytes(j.GetSpaceNeeded()), Message: st.GetMessage(),
		Modified: when(st.GetLastModified()), Locked: locked,
		ARK:       cmp.Or(j.GetIdentifiers().GetPrimaryId(), "—"),
		LocalIDs:  cmp.Or(strings.Join(j.GetIdentifiers().GetLocalId(), ", "), "—"),
		Store:     newManifestRef(j.GetStore().GetMode(), j.GetStore().GetVersion(), j.GetStore().GetManifestUrl(), len(j.GetStore().GetDeletions()) > 0),
		Inventory: newManifestRef(j.GetInventory().GetMode(), j.GetInventory().GetVersion(), j.GetInventory().GetManifestUrl(), false),
		Metadata: map[string]string{"who": j.GetMetadata().GetWho(), "what": j.GetMetadata().GetWhat(),
			"when": j.GetMetadata().GetWhen(), "where": j.GetMetadata().GetWhere()}}
}

// statesWhere lists the job states in which move(state) holds.
func statesWhere(move func(queue.JobState) bool) string {
	var names []string
	for _, st := range queue.JobStates() {
		if move(st) {
			names = append(names, queue.JobStateName(st))
		}
	}
	return strings.Join(names, " ")
}

// batchOpen reports whether a batch in s will still report to its
// depositor: deleting one of its jobs needs force (the queue's rule).
func batchOpen(s queue.BatchState) bool {
	return s != queue.BatchCompleted && s != queue.BatchFailed && s != queue.BatchDeleted
}

// jobDeleteWarning is the warning for deleting a job of an open batch (its
// depositor will never hear of it), or "" when the batch is closed (or
// unknown).
func jobDeleteWarning(jid, bid string, b *v1.Batch) string {
	if b == nil || !batchOpen(b.GetStatus().GetStatus()) {
		return ""
	}
	return fmt.Sprintf("Batch %s is still %s: if job %s is deleted, its depositor will never hear of it. Delete the job anyway?",
		bid, queue.BatchStateName(b.GetStatus().GetStatus()), jid)
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	jid := r.PathValue("jid")
	resp, err := call(r.Context(), &v1.GetJobRequest{JobId: jid, IncludeManifest: true}, c.admin.GetJob)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	j := resp.GetJob()
	jv := jobView{Job: j, Live: newJobLive(j), State: stateName(j.GetStatus().GetStatus()),
		HoldIn:    queue.JobStateName(queue.Pending),
		ReleaseIn: queue.JobStateName(queue.Held),
		RequeueIn: queue.JobStateName(queue.Failed),
		FailIn:    statesWhere(func(s queue.JobState) bool { return queue.CanMoveJob(s, queue.Failed) }),
		DeleteIn:  statesWhere(func(s queue.JobState) bool { return queue.CanMoveJob(s, queue.Deleted) }),
	}
	jv.NoActionIn = statesWhere(func(s queue.JobState) bool {
		name := queue.JobStateName(s)
		return !inList(strings.Join([]string{jv.HoldIn, jv.ReleaseIn, jv.RequeueIn, jv.FailIn, jv.DeleteIn}, " "), name)
	})
	// The states a failed job may resume at, as the state machine says.
	for _, st := range queue.JobStates() {
		if st != queue.Deleted && queue.CanMoveJob(queue.Failed, st) {
			jv.ResumeStates = append(jv.ResumeStates, queue.JobStateName(st))
		}
	}
	jv.History, jv.HistoryDropped = newHistory(j.GetStatus()), j.GetStatus().GetHistoryDropped()
	jv.Traceparent = cmp.Or(j.GetStatus().GetTraceparent(), j.GetConfiguration().GetTraceparent())
	jv.TraceID, jv.TraceURL = resp.GetTraceId(), telemetry.TraceURL(c.traceURL, jv.Traceparent)
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(j)
	if err != nil {
		c.fail(w, r, status.Errorf(codes.Internal, "job %s: %v", jid, err))
		return
	}
	jv.Raw = string(raw)
	if bid := j.GetBid(); bid != "" {
		b, err := call(r.Context(), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}}, c.admin.GetBatch)
		if err != nil {
			jv.BatchNote = refusalOf(err).Message
		} else {
			jv.BatchState = queue.BatchStateName(b.GetBatch().GetStatus().GetStatus())
			jv.DeleteConfirm = jobDeleteWarning(jid, bid, b.GetBatch())
		}
	}
	v := c.pageView(w, r, "Job "+jid, "jobs")
	v.Data = jv
	v.Live = "/api/jobs/" + jid
	c.render(w, r, http.StatusOK, "job", v)
}

// ---- fsck

type fsckView struct {
	Result *v1.FsckResponse
	Repair bool
	// Verified is a fixity check's answer, of version Version of ARK.
	Verified *v1.VerifyObjectResponse
	ARK      string
	Version  int
}

func (c *Console) fsckPage(w http.ResponseWriter, r *http.Request) {
	v := c.pageView(w, r, "Fsck", "fsck")
	v.Data = fsckView{}
	c.render(w, r, http.StatusOK, "fsck", v)
}
