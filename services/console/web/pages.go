package web

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
	"github.com/ingestq/ingestq/shared/checkm"
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
	Paused bool `json:"paused"`
	// Stalled: some stage has jobs waiting and no active worker;
	// Running: neither it nor a pause.
	Stalled bool               `json:"stalled"`
	Running bool               `json:"running"`
	Total   int32              `json:"total"`
	States  []stateCount       `json:"-"`
	Counts  map[string]int32   `json:"counts"`
	Bars    map[string]float64 `json:"bars"`
	// Stages are the stages at a glance, in pipeline order; StageMap the
	// same by the state each takes jobs from, for the script.
	Stages   []stageView          `json:"-"`
	StageMap map[string]stageView `json:"stages"`
	// Batches count the batches per state; BatchCounts the same by name.
	Batches     []stateCount     `json:"-"`
	BatchCounts map[string]int32 `json:"batches"`
	Held        []string         `json:"held_collections"`
	Workers     []workerView     `json:"workers"`
	AsOf        string           `json:"as_of"`
	// Attention is what needs an operator, most pressing first: the
	// strip at the top of the page; Attend says that it has any, Calm
	// that the queue runs and nothing needs an operator.
	Attention []attentionItem `json:"attention"`
	Attend    bool            `json:"attend"`
	Calm      bool            `json:"calm"`
	// Controls: the console can reach the replicas (StageCredentials).
	Controls bool `json:"-"`
}

type stateCount struct {
	Name  string
	Count int32
	Width float64
}

// stageView is one stage as the health table shows it.
type stageView struct {
	Name     string `json:"-"`
	Waiting  int32  `json:"waiting"`
	InFlight int32  `json:"in_flight"`
	Workers  string `json:"workers"` // "1 of 2 active"
	Oldest   string `json:"oldest"`  // the oldest job's age, "—" for none
	// Status is "stalled" (jobs wait, no active worker), "working" or
	// "idle"; Summary says it in a line; Stalled and Reason are the
	// batcher's word on a stall (why, and what to do).
	Status  string `json:"status"`
	Summary string `json:"summary"`
	Stalled bool   `json:"stalled"`
	Reason  string `json:"reason"`
	// registered and active count the stage's replicas.
	registered, active int32
}

// attentionItem is one thing that needs an operator: what it is, and a
// link to where it is dealt with.
type attentionItem struct {
	Kind string `json:"kind"` // stalled, held-collection, failed-batches, failed-jobs, held-batches, held-jobs, paused-replica
	Text string `json:"text"`
	Href string `json:"href"`
	Do   string `json:"do"` // the link's words: what to do there
}

// attention lists what needs an operator in q, most pressing first:
// stalled stages (nothing moves there), held collections, failed batches
// and jobs (depositors told of failures), held batches and jobs, then
// replicas paused or draining whose stage still works.
func attention(q *queueView) []attentionItem {
	items := []attentionItem{}
	for _, st := range q.Stages {
		if !st.Stalled {
			continue
		}
		it := attentionItem{Kind: "stalled", Text: "Stalled: " + cmp.Or(st.Reason, st.Summary) + ".",
			Href: "/jobs?state=" + url.QueryEscape(st.Name), Do: "See the jobs waiting"}
		if st.registered > 0 && st.active == 0 {
			it.Href, it.Do = "#workers", "Resume a replica in the workers table"
		}
		items = append(items, it)
	}
	for _, m := range q.Held {
		items = append(items, attentionItem{Kind: "held-collection",
			Text: "Held collection " + m + ": its pending batches and jobs go to Held and wait there.",
			Href: "#held", Do: "Release it under Collections on hold"})
	}
	count := func(n int32, kind, text, href, do string) {
		if n > 0 {
			items = append(items, attentionItem{Kind: kind, Text: fmt.Sprintf(text, n), Href: href, Do: do})
		}
	}
	count(q.BatchCounts["Failed"], "failed-batches", "%d batch(es) failed: their depositors were told.",
		"/batches?status=Failed", "Troubleshoot their failed jobs, then send each batch an update report")
	count(q.Counts["Failed"], "failed-jobs", "%d job(s) failed.",
		"/jobs?state=Failed", "See why each failed; fix the cause and requeue, or delete")
	count(q.BatchCounts["Held"], "held-batches", "%d batch(es) held.", "/batches?status=Held", "Release or delete them")
	count(q.Counts["Held"], "held-jobs", "%d job(s) held.", "/jobs?state=Held", "Release or delete them")
	stalled := map[string]bool{}
	for _, st := range q.Stages {
		stalled[st.Name] = st.Stalled
	}
	for _, w := range q.Workers {
		if w.State != "working" && !stalled[w.Stage] {
			items = append(items, attentionItem{Kind: "paused-replica",
				Text: fmt.Sprintf("Replica %s (%s) is %s: it takes no new job.", w.ID, w.Stage, w.State),
				Href: "#workers", Do: "Resume it in the workers table"})
		}
	}
	return items
}

func newStageView(h *v1.StageHealth, now time.Time) stageView {
	v := stageView{Name: jobStateName(h.GetState()), Waiting: h.GetWaiting(), InFlight: h.GetInFlight(),
		Workers: fmt.Sprintf("%d of %d active", h.GetActiveWorkers(), h.GetWorkers()), Oldest: "—", Status: "idle"}
	if h.GetOldest() != nil {
		v.Oldest = age(now.Sub(h.GetOldest().AsTime()))
	}
	switch {
	case h.GetStalled():
		v.Status = "stalled"
	case h.GetWaiting()+h.GetInFlight() > 0:
		v.Status = "working"
	}
	v.Stalled, v.Reason = h.GetStalled(), h.GetReason()
	v.registered, v.active = h.GetWorkers(), h.GetActiveWorkers()
	v.Summary = fmt.Sprintf("%s: %d waiting, %d in flight, %d active worker(s) of %d", v.Name, v.Waiting, v.InFlight,
		h.GetActiveWorkers(), h.GetWorkers())
	if v.Oldest != "—" {
		v.Summary += ", oldest " + v.Oldest
	}
	if n := h.GetNotMoving(); n > 0 {
		v.Summary += fmt.Sprintf(", %d whose bytes have not moved for %s", n, age(h.GetNotMovingAfter().AsDuration()))
	}
	return v
}

type workerView struct {
	Stage   string `json:"stage"`
	ID      string `json:"id"`
	Service string `json:"service"`
	Host    string `json:"host"`
	Version string `json:"version"`
	// State is the replica's own (working, paused, draining), which its
	// controls follow; Shown says it with the queue's pause.
	State       string         `json:"state"`
	Shown       string         `json:"shown"`
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

func newQueueView(resp *v1.GetQueueResponse, r *rules, now time.Time) *queueView {
	q := &queueView{Paused: resp.GetPaused(), Counts: map[string]int32{}, Bars: map[string]float64{},
		StageMap: map[string]stageView{}, BatchCounts: map[string]int32{},
		Held: resp.GetHeldCollections(), AsOf: now.UTC().Format("15:04:05 UTC")}
	if q.Held == nil {
		q.Held = []string{}
	}
	// Live states and ended ones are each scaled to their own largest
	// count: thousands of completed jobs must not flatten the few at work.
	top := map[bool]int32{}
	for _, st := range jobStates() {
		n := resp.GetJobsByState()[jobStateName(st)]
		q.Total += n
		top[r.live(st)] = max(top[r.live(st)], n)
	}
	for _, st := range jobStates() {
		name := jobStateName(st)
		n := resp.GetJobsByState()[name]
		w := barWidth(n, top[r.live(st)])
		q.States = append(q.States, stateCount{Name: name, Count: n, Width: w})
		q.Counts[name] = n
		q.Bars[name] = w
	}
	for _, h := range resp.GetStages() {
		v := newStageView(h, now)
		q.Stages = append(q.Stages, v)
		q.StageMap[v.Name] = v
		q.Stalled = q.Stalled || h.GetStalled()
	}
	q.Running = !q.Paused && !q.Stalled
	for _, st := range batchStates() {
		name := batchStateName(st)
		q.Batches = append(q.Batches, stateCount{Name: name, Count: resp.GetBatchesByState()[name]})
		q.BatchCounts[name] = resp.GetBatchesByState()[name]
	}
	q.Workers = workerViews(resp.GetWorkers(), q.Paused, now)
	q.Attention = attention(q)
	q.Attend = len(q.Attention) > 0
	q.Calm = q.Running && !q.Attend
	return q
}

// workerViews lists workers by stage in pipeline order, then by id.
func workerViews(workers []*v1.WorkerInfo, queuePaused bool, now time.Time) []workerView {
	order := map[string]int{}
	for i, st := range jobStates() {
		order[jobStateName(st)] = i
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
		shown := state
		if queuePaused && state == "working" {
			shown = "waiting: the queue is paused"
		}
		wv := workerView{Stage: w.GetStage(), ID: w.GetId(), Service: w.GetService(), Host: w.GetHost(), Version: w.GetVersion(),
			State: state, Shown: shown, Concurrency: w.GetConcurrency(), InFlight: []inFlightView{}, Heartbeat: ago(w.GetHeartbeat(), now),
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
	resp, err := c.admin.GetQueue(r.Context(), &v1.GetQueueRequest{})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rules, err := c.rules(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := c.pageView(w, r, "Queue", "queue")
	qv := newQueueView(resp, rules, time.Now())
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
	// Actions are the batch's actions as GetBatch answers them (a list of
	// batches has none); NoAction: its state takes none.
	Actions  actions
	NoAction bool
}

// batchActionNames are the batch page's actions by their form names.
var batchActionNames = map[v1.BatchAction]string{v1.BatchAction_BATCH_ACTION_RELEASE: "release",
	v1.BatchAction_BATCH_ACTION_UPDATE_REPORT: "update-report", v1.BatchAction_BATCH_ACTION_DELETE: "delete"}

// batchActionLabels are the batch page's actions in the order its forms come.
var batchActionLabels = []actionLabel{{"release", "Release"}, {"update-report", "Update report"}, {"delete", "Delete"}}

// newBatchActionViews are the actions of a GetBatch answer.
func newBatchActionViews(states []*v1.BatchActionState) actions {
	out := actions{}
	for _, a := range states {
		if name, ok := batchActionNames[a.GetAction()]; ok {
			out[name] = actionView{Applies: a.GetApplies(), Reason: a.GetReason()}
		}
	}
	return out
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

// reportTotals are a report's totals, as the batcher's answers give them.
func reportTotals(rep *v1.StatusReport) (failed, successful int) {
	return int(rep.GetFailedJobsTotal()), int(rep.GetSuccessfulJobsTotal())
}

func newBatchView(b *v1.Batch, r *rules) *batchView {
	sub := b.GetSubmission()
	bv := &batchView{ID: b.GetId(), UUID: sub.GetBatchId(), Submitter: sub.GetSubmitter(), Profile: sub.GetProfileName(),
		Collection: sub.GetCollection(), PayloadURL: sub.GetPayloadUrl(), PayloadType: payloadTypeName(sub.GetType()),
		Metadata: sub.GetMetadata(), Submitted: when(sub.GetSubmissionDate()), Traceparent: sub.GetTraceparent(),
		State: batchStateName(b.GetStatus().GetStatus()), Message: b.GetStatus().GetMessage(),
		Modified: when(b.GetStatus().GetLastModified()), Locked: b.GetLocked(), Counts: b.GetCounts()}
	bv.Mode = submissionMode(sub.GetSubmissionMode())
	bv.Segments, bv.Total = progress(b.GetCounts())
	if rep := b.GetStatusReport(); rep != nil {
		failed, successful := reportTotals(rep)
		rv := &reportView{Sent: when(rep.GetLastModified()), FailedCount: failed, SuccessfulCount: successful,
			Trimmed: failed > len(rep.GetFailedJobs()) || successful > len(rep.GetSuccessfulJobs())}
		rv.Failed, rv.FailedMore = firstN(rep.GetFailedJobs(), reportListMax, failed)
		rv.Successful, rv.SuccessfulMore = firstN(rep.GetSuccessfulJobs(), reportListMax, successful)
		bv.Report = rv
		bv.ReportDiffers = reportDiffers(rep, b.GetCounts())
	}
	bv.Confirm = deleteBatchWarning(b, r)
	return bv
}

// reportDiffers reports whether a batch's report counts other failed or
// successful jobs than the batch has now (a job requeued, completed or
// deleted since it was sent).
func reportDiffers(rep *v1.StatusReport, c *v1.BatchJobCounts) bool {
	if rep == nil {
		return false
	}
	failed, successful := reportTotals(rep)
	return int32(failed) != c.GetFailed() || int32(successful) != c.GetCompleted()
}

// firstN is the first n of s and how many of total that leaves out.
func firstN(s []string, n, total int) ([]string, int) {
	s = s[:min(len(s), n)]
	return s, max(total-len(s), 0)
}

// deleteBatchWarning is what an operator must weigh before deleting a
// batch in its state; "" when the batch cannot be deleted or no warning
// applies.
func deleteBatchWarning(b *v1.Batch, r *rules) string {
	st := b.GetStatus().GetStatus()
	if !r.batchAllows(st, v1.BatchAction_BATCH_ACTION_DELETE) {
		return ""
	}
	n := b.GetCounts().GetProcessing() + b.GetCounts().GetCompleted() + b.GetCounts().GetFailed() + b.GetCounts().GetDeleted()
	switch st {
	case v1.BatchState_BATCH_STATE_HELD:
		return fmt.Sprintf("Batch %s is held: deleting it removes it and its %d job(s), and its depositor will NOT be notified. Delete it?", b.GetId(), n)
	case v1.BatchState_BATCH_STATE_FAILED:
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
	for _, st := range batchStates() {
		bv.States = append(bv.States, batchStateName(st))
	}
	req := &v1.ListBatchesRequest{Submitter: bv.Submitter, PageToken: bv.After}
	if bv.Status != "" {
		st, err := parseBatchState(bv.Status)
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
	resp, err := c.admin.ListBatches(r.Context(), req)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rules, err := c.rules(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	for _, b := range resp.GetBatches() {
		bv.Batches = append(bv.Batches, newBatchView(b, rules))
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
	// ActionLabels name the batch's actions, for the reasons beside them.
	ActionLabels []actionLabel
}

func (c *Console) batchPage(w http.ResponseWriter, r *http.Request) {
	bid := r.PathValue("bid")
	resp, err := c.admin.GetBatch(r.Context(), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
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
	jobs, err := c.admin.ListJobs(r.Context(), &v1.ListJobsRequest{BatchId: bid, PageSize: cmp.Or(size, jobPageSize), PageToken: after})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rules, err := c.rules(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	v := c.pageView(w, r, "Batch "+bid, "batches")
	bv := newBatchView(resp.GetBatch(), rules)
	bv.TraceID, bv.TraceURL = resp.GetTraceId(), resp.GetTraceUrl()
	bv.Actions = newBatchActionViews(resp.GetActions())
	bv.NoAction = len(bv.Actions) == 0
	list := newJobList(jobs, url.Values{"size": sizeParam(size)}, batchURL(bid), after)
	list.InBatch = true
	v.Data = batchPageView{Batch: bv, Jobs: list, ActionLabels: batchActionLabels}
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
	ARK      string
	// Progress is what the step working on the job has moved.
	Progress transferView
}

func newJobRow(j *v1.Job) jobRow {
	r := jobRow{ID: j.GetId(), Bid: j.GetBid(), State: stateName(j.GetStatus().GetStatus()),
		LastSuccessful: stateName(j.GetStatus().GetLastSuccessfulStatus()), Priority: j.GetPriority(),
		Size: humanBytes(j.GetSpaceNeeded()), Retries: j.GetStatus().GetRetryCount(), Message: j.GetStatus().GetMessage(),
		Modified: when(j.GetStatus().GetLastModified()), Locked: j.GetLocked(),
		LocalIDs: strings.Join(j.GetIdentifiers().GetLocalId(), ", "), ARK: j.GetIdentifiers().GetPrimaryId(),
		Progress: newTransfer(j.GetProgress(), time.Now())}
	if s := j.GetFailingStage(); s != v1.JobState_JOB_STATE_UNSPECIFIED {
		r.FailedIn = jobStateName(s)
	}
	return r
}

// stateName is a job state's name, "—" for none (a null last_successful_status).
func stateName(s v1.JobState) string {
	if s == v1.JobState_JOB_STATE_UNSPECIFIED {
		return "—"
	}
	return jobStateName(s)
}

// jobListView is a page of jobs with the address of the next one.
type jobListView struct {
	Jobs  []jobRow
	First string // this list's first page
	Next  string // the next page, "" on the last
	Paged bool   // this is not the first page
	// InBatch: the list is one batch's, on its page: no column repeats
	// its id.
	InBatch bool
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
	// FailingStages are the states a job can fail in, for "Failed in".
	FailingStages []string
}

func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	form := readFilterForm(q)
	jv := jobsView{State: form.State, Batch: form.Batch, Form: form, Searching: form.searching(), Verbs: bulkVerbs}
	for _, st := range jobStates() {
		jv.States = append(jv.States, jobStateName(st))
	}
	rules, err := c.rules(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	jv.ResumeStates, jv.FailingStages = rules.requeueTargets(), rules.failingStages()
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
		st, err := parseJobState(jv.State)
		if err != nil {
			c.fail(w, r, badRequest("state: %v", err))
			return
		}
		req.State = st
		jv.State = jobStateName(st)
		jv.Form.State = jv.State
	}
	resp, err := c.admin.ListJobs(r.Context(), req)
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

// pageActions are the actions the job page offers a form for, by the
// form's name.
var pageActions = map[v1.BulkVerb]string{v1.BulkVerb_BULK_VERB_HOLD: "hold", v1.BulkVerb_BULK_VERB_RELEASE: "release",
	v1.BulkVerb_BULK_VERB_REQUEUE: "requeue", v1.BulkVerb_BULK_VERB_FAIL: "fail", v1.BulkVerb_BULK_VERB_DELETE: "delete"}

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
	// State is the job's state now.
	State         string
	DeleteConfirm string
	// RereadsManifest: a requeue to Pending or Estimating reads the job's
	// object manifest again.
	RereadsManifest bool
	// Verify: the batcher reads stored versions (VerifyObject applies);
	// VerifyVersion is the version of the job's ARK its Verify button
	// checks: its inventory's, "" for the latest.
	Verify        bool
	VerifyVersion string
	// ActionLabels name the page's actions, for the reasons beside them.
	ActionLabels []actionLabel
}

// actionLabel is an action's form name and its label.
type actionLabel struct{ Name, Label string }

// jobActionLabels are the job page's actions in the order its forms come.
var jobActionLabels = []actionLabel{{"requeue", "Requeue"}, {"hold", "Hold"}, {"release", "Release"}, {"fail", "Fail"}, {"delete", "Delete"}}

// actionView is one action on a job or batch as its page offers it: the
// form is shown where it applies, the reason (when the batcher gives one)
// beside where it does not yet.
type actionView struct {
	Applies bool   `json:"applies"`
	Reason  string `json:"reason"`
}

// actions are an item's actions by form name ("release"): those its
// state takes.
type actions map[string]actionView

// Offers reports whether the page offers the action named (its form shown).
func (a actions) Offers(name string) bool { return a[name].Applies }

// Why is why the action named does not apply yet ("" when it does, or
// the item's state does not take it).
func (a actions) Why(name string) string {
	if v := a[name]; !v.Applies {
		return v.Reason
	}
	return ""
}

// historyRow is one state change of a job's timeline.
type historyRow struct {
	At      string `json:"at"`
	From    string `json:"from"`
	To      string `json:"to"`
	Worker  string `json:"worker"`
	InState string `json:"in_state"`
	Message string `json:"message"`
}

func newHistory(st *v1.JobStatus) []historyRow {
	rows := []historyRow{}
	for _, h := range st.GetHistory() {
		r := historyRow{At: when(h.GetAt()), From: "created", To: jobStateName(h.GetTo()), Worker: h.GetWorker(), Message: h.GetMessage(),
			InState: "—"}
		if h.GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
			r.From = jobStateName(h.GetFrom())
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
	// Actions are the page's actions the job's state takes, by form name;
	// NoAction: it takes none. RequeueStates are where a requeue may
	// resume it.
	Actions       actions  `json:"actions"`
	NoAction      bool     `json:"no_action"`
	RequeueStates []string `json:"requeue_states"`
	// Waiting says why no stage works on the job ("" when one does or may).
	Waiting string `json:"waiting"`
	// History is the job's timeline, oldest first; HistoryDropped the
	// older changes no longer kept.
	History        []historyRow `json:"history"`
	HistoryDropped int32        `json:"history_dropped"`
	// Progress is what the step working on the job has moved.
	Progress transferView `json:"progress"`
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

// storeRef is the job's store node as its page shows it. Its manifest is
// written in the job's working folder, which the notifier removes when the
// job completes: a completed job's page says so instead of showing a URL
// that leads nowhere (the stored version's manifest is Inventory's).
func storeRef(j *v1.Job) manifestRef {
	st := j.GetStore()
	ref := newManifestRef(st.GetMode(), st.GetVersion(), st.GetManifestUrl(), len(st.GetDeletions()) > 0)
	wd := j.GetConfiguration().GetWorkingDir()
	if j.GetStatus().GetStatus() != v1.JobState_JOB_STATE_COMPLETED || wd == "" || ref.URL == "" {
		return ref
	}
	if p, err := checkm.FilePath(ref.URL); err == nil && strings.HasPrefix(p, strings.TrimSuffix(wd, "/")+"/") {
		ref.Summary += ": its manifest was in the working folder, removed when the job completed"
		ref.URL = ""
	}
	return ref
}

// newJobLive is the job of a GetJob answer as its page shows it.
func newJobLive(resp *v1.GetJobResponse) jobLive {
	j := resp.GetJob()
	st := j.GetStatus()
	locked := "no"
	if j.GetLocked() {
		locked = "yes: a stage is working on it"
	}
	l := jobLive{ID: j.GetId(), State: stateName(st.GetStatus()), LastSuccessful: stateName(st.GetLastSuccessfulStatus()),
		Resume: stateName(resp.GetResumeState()), RetryCount: st.GetRetryCount(),
		Priority: j.GetPriority(), SpaceNeeded: humanBytes(j.GetSpaceNeeded()), Message: st.GetMessage(),
		Modified: when(st.GetLastModified()), Locked: locked,
		ARK:       cmp.Or(j.GetIdentifiers().GetPrimaryId(), "—"),
		LocalIDs:  cmp.Or(strings.Join(j.GetIdentifiers().GetLocalId(), ", "), "—"),
		Store:     storeRef(j),
		Inventory: newManifestRef(j.GetInventory().GetMode(), j.GetInventory().GetVersion(), j.GetInventory().GetManifestUrl(), false),
		Metadata: map[string]string{"who": j.GetMetadata().GetWho(), "what": j.GetMetadata().GetWhat(),
			"when": j.GetMetadata().GetWhen(), "where": j.GetMetadata().GetWhere()},
		Actions: actions{}, RequeueStates: []string{}, Waiting: resp.GetWaiting(),
		History: newHistory(st), HistoryDropped: st.GetHistoryDropped(),
		Progress: newTransfer(j.GetProgress(), time.Now())}
	for _, a := range resp.GetActions() {
		if name, ok := pageActions[a.GetVerb()]; ok {
			l.Actions[name] = actionView{Applies: a.GetApplies(), Reason: a.GetReason()}
		}
	}
	l.NoAction = len(l.Actions) == 0
	for _, s := range resp.GetRequeueStates() {
		l.RequeueStates = append(l.RequeueStates, jobStateName(s))
	}
	return l
}

// jobDeleteWarning is the warning for deleting a job of an open batch (its
// depositor will never hear of it), or "" when the batch is closed (or
// unknown).
func jobDeleteWarning(jid, bid string, b *v1.Batch, r *rules) string {
	if b == nil || !r.batchOpen(b.GetStatus().GetStatus()) {
		return ""
	}
	return fmt.Sprintf("Batch %s is still %s: if job %s is deleted, its depositor will never hear of it. Delete the job anyway?",
		bid, batchStateName(b.GetStatus().GetStatus()), jid)
}

func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	jid := r.PathValue("jid")
	resp, err := c.admin.GetJob(r.Context(), &v1.GetJobRequest{JobId: jid, IncludeManifest: true})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rules, err := c.rules(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	j := resp.GetJob()
	jv := jobView{Job: j, Live: newJobLive(resp), State: stateName(j.GetStatus().GetStatus()), Verify: rules.verify, ActionLabels: jobActionLabels,
		RereadsManifest: j.GetConfiguration().GetPayloadType() == v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}
	if v := j.GetInventory().GetVersion(); v > 0 {
		jv.VerifyVersion = strconv.Itoa(int(v))
	}
	jv.Traceparent = cmp.Or(j.GetStatus().GetTraceparent(), j.GetConfiguration().GetTraceparent())
	jv.TraceID, jv.TraceURL = resp.GetTraceId(), resp.GetTraceUrl()
	raw, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(j)
	if err != nil {
		c.fail(w, r, status.Errorf(codes.Internal, "job %s: %v", jid, err))
		return
	}
	jv.Raw = string(raw)
	if bid := j.GetBid(); bid != "" {
		b, err := c.admin.GetBatch(r.Context(), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
		if err != nil {
			jv.BatchNote = refusalOf(err).Message
		} else {
			jv.BatchState = batchStateName(b.GetBatch().GetStatus().GetStatus())
			jv.DeleteConfirm = jobDeleteWarning(jid, bid, b.GetBatch(), rules)
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
	// Verified is a fixity check's answer, of a version of ARK.
	Verified *v1.VerifyObjectResponse
	ARK      string
}

func (c *Console) fsckPage(w http.ResponseWriter, r *http.Request) {
	v := c.pageView(w, r, "Fsck", "fsck")
	v.Data = fsckView{}
	c.render(w, r, http.StatusOK, "fsck", v)
}
