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
	"google.golang.org/protobuf/types/known/timestamppb"
)

// filterForm is the jobs page's filter as the form names its fields: what
// GET /jobs searches with and POST /bulk acts on.
type filterForm struct {
	State, Batch, Collection, Profile, Submitter, LocalID, ARK, Message, FailingStage string
	From, To                                                                          string // datetime-local, UTC
}

// timeForm is the layout of a datetime-local input.
const timeForm = "2006-01-02T15:04"

func readFilterForm(v url.Values) filterForm {
	g := func(k string) string { return strings.TrimSpace(v.Get(k)) }
	return filterForm{State: g("state"), Batch: g("batch"), Collection: g("collection"), Profile: g("profile"),
		Submitter: g("submitter"), LocalID: g("local_id"), ARK: g("ark"), Message: g("message_text"),
		FailingStage: g("failing_stage"), From: g("from"), To: g("to")}
}

// values are the form's fields as an address's query (empty ones left out).
func (f filterForm) values() url.Values {
	out := url.Values{}
	for k, v := range map[string]string{"state": f.State, "batch": f.Batch, "collection": f.Collection, "profile": f.Profile,
		"submitter": f.Submitter, "local_id": f.LocalID, "ark": f.ARK, "message_text": f.Message,
		"failing_stage": f.FailingStage, "from": f.From, "to": f.To} {
		if v != "" {
			out.Set(k, v)
		}
	}
	return out
}

// searching reports whether the form asks for more than ListJobs selects
// by (a state or a batch): then the page searches.
func (f filterForm) searching() bool {
	g := f
	g.State, g.Batch = "", ""
	return g != filterForm{}
}

func (f filterForm) Empty() bool { return f == filterForm{} }

// Values is values for the templates.
func (f filterForm) Values() url.Values { return f.values() }

// filter turns the form into a JobFilter.
func (f filterForm) filter() (*v1.JobFilter, error) {
	jf := &v1.JobFilter{BatchId: f.Batch, Collection: f.Collection, Profile: f.Profile, Submitter: f.Submitter,
		LocalId: f.LocalID, Ark: f.ARK, Message: f.Message}
	for _, s := range []struct {
		name, v string
		to      *v1.JobState
	}{{"state", f.State, &jf.State}, {"failing_stage", f.FailingStage, &jf.FailingStage}} {
		if s.v == "" {
			continue
		}
		st, err := parseJobState(s.v)
		if err != nil {
			return nil, badRequest("%s: %v", s.name, err)
		}
		*s.to = st
	}
	for _, t := range []struct {
		name, v string
		to      **timestamppb.Timestamp
	}{{"from", f.From, &jf.ModifiedAfter}, {"to", f.To, &jf.ModifiedBefore}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(timeForm, t.v)
		if err != nil {
			return nil, badRequest("%s %q is not a time: write it as 2026-11-26T14:30 (UTC)", t.name, t.v)
		}
		*t.to = timestamppb.New(at)
	}
	return jf, nil
}

// searchJobs is the jobs page when it searches: SearchJobs, by job id.
func (c *Console) searchJobs(r *http.Request, form filterForm, size int32) (jobListView, int32, error) {
	jf, err := form.filter()
	if err != nil {
		return jobListView{}, 0, err
	}
	after := r.URL.Query().Get("after")
	resp, err := c.admin.SearchJobs(r.Context(), &v1.SearchJobsRequest{Filter: jf, PageSize: cmp.Or(size, jobPageSize), PageToken: after})
	if err != nil {
		return jobListView{}, 0, err
	}
	params := form.values()
	if size != 0 {
		params.Set("size", strconv.Itoa(int(size)))
	}
	return newJobList(&v1.ListJobsResponse{Jobs: resp.GetJobs(), NextPageToken: resp.GetNextPageToken()}, params, "/jobs", after),
		resp.GetScanned(), nil
}

// bulkVerbs are the bulk actions the jobs page offers, in its menu's order.
var bulkVerbs = []struct {
	Name, Label string
	Verb        v1.BulkVerb
}{
	{"requeue", "Requeue", v1.BulkVerb_BULK_VERB_REQUEUE},
	{"hold", "Hold", v1.BulkVerb_BULK_VERB_HOLD},
	{"release", "Release", v1.BulkVerb_BULK_VERB_RELEASE},
	{"fail", "Fail", v1.BulkVerb_BULK_VERB_FAIL},
	{"delete", "Delete", v1.BulkVerb_BULK_VERB_DELETE},
	{"reprioritize", "Re-prioritise", v1.BulkVerb_BULK_VERB_REPRIORITIZE},
}

// verbField is a field of the bulk form an action takes, and how the
// confirmation says its value.
type verbField struct {
	name, label string
	words       func(v string) string
}

var (
	messageField = verbField{"message", "Message", func(v string) string {
		return cmp.Or(v, "(none: each job's message says an operator did it)")
	}}
	requeueField = verbField{"requeue_state", "Requeue at", func(v string) string {
		if v == "" {
			return "after each job's last successful state"
		}
		if st, err := parseJobState(v); err == nil && (st == v1.JobState_JOB_STATE_PENDING || st == v1.JobState_JOB_STATE_ESTIMATING) {
			return v + " (each job whose payload is an object manifest reads it again)"
		}
		return v
	}}
	priorityField = verbField{"priority", "Priority", func(v string) string { return v }}
	forceField    = verbField{"force", "Jobs of batches still open", func(v string) string {
		if v == "1" {
			return "deleted too (their depositors will never hear of them)"
		}
		return "left alone"
	}}
)

// verbFields are the fields each bulk action takes.
var verbFields = map[string][]verbField{
	"requeue":      {messageField, requeueField},
	"hold":         {messageField},
	"release":      {messageField},
	"fail":         {messageField},
	"delete":       {forceField},
	"reprioritize": {priorityField},
}

// bulkView is the bulk page: a dry run's count awaiting confirmation, or
// the outcome per job.
type bulkView struct {
	Verb, Label string
	Filter      string // the filter in words
	Matched     int32
	Truncated   bool
	// Jobs are the first jobs matched, on the confirmation, or every
	// job's outcome; MoreJobs how many the confirmation leaves out.
	Jobs     []bulkJob
	MoreJobs int
	Fields   []formField // the request again, for the confirmation's form
	// Settings are what the action will do besides its verb, in words
	// (the message, where a requeue resumes), on the confirmation.
	Settings []formField
	// Refused counts the jobs matched that the action would refuse now
	// (each says why), on the confirmation.
	Refused   int
	Done      bool
	Succeeded int32
	Failed    int32
	Back      string
}

// bulk counts (dry run) the jobs a bulk action would take and asks to
// confirm; confirmed, it acts and shows each job's outcome.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request) {
	form := readFilterForm(r.PostForm)
	verbName := r.PostForm.Get("verb")
	label := ""
	var verb v1.BulkVerb
	for _, v := range bulkVerbs {
		if v.Name == verbName {
			verb, label = v.Verb, v.Label
		}
	}
	// Only the fields of the action chosen count: a form sends every one.
	field := func(name string) string {
		for _, f := range verbFields[verbName] {
			if f.name == name {
				return strings.TrimSpace(r.PostForm.Get(name))
			}
		}
		return ""
	}
	req := &v1.BulkActionRequest{Verb: verb, Message: field("message"), Force: field("force") == "1"}
	back := withQuery("/jobs", form.values())
	if label == "" {
		c.refuse(w, r, http.StatusBadRequest, "No such bulk action", fmt.Sprintf("%q is not a bulk action of the console", verbName))
		return
	}
	jf, err := form.filter()
	if err != nil {
		c.finish(w, r, "jobs.bulk."+verbName, "", err, back, flash{})
		return
	}
	req.Filter = jf
	if p := field("priority"); p != "" {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil {
			c.finish(w, r, "jobs.bulk."+verbName, "", badRequest("priority %q is not a number", p), back, flash{})
			return
		}
		req.Priority = new(int32(n))
	}
	if s := field("requeue_state"); s != "" {
		st, err := parseJobState(s)
		if err != nil {
			c.finish(w, r, "jobs.bulk."+verbName, "", badRequest("requeue_state: %v", err), back, flash{})
			return
		}
		req.State = st
	}
	confirmed := r.PostForm.Get("confirmed") == "1"
	req.DryRun = !confirmed
	resp, err := c.admin.BulkAction(r.Context(), req)
	if err != nil {
		c.finish(w, r, "jobs.bulk."+verbName, "", err, back, flash{})
		return
	}
	bv := bulkView{Verb: verbName, Label: label, Filter: describeFilter(form), Matched: resp.GetMatched(),
		Truncated: resp.GetTruncated(), Back: back}
	for _, res := range resp.GetResults() {
		bv.Jobs = append(bv.Jobs, newBulkJob(res))
	}
	if confirmed {
		bv.Done, bv.Succeeded, bv.Failed = true, resp.GetSucceeded(), resp.GetFailed()
		c.log.InfoContext(r.Context(), "console action", "action", "jobs.bulk."+verbName, "filter", bv.Filter,
			"remote", r.RemoteAddr, "matched", resp.GetMatched(), "succeeded", resp.GetSucceeded(), "failed", resp.GetFailed())
	} else {
		for _, j := range bv.Jobs {
			if j.Error != "" {
				bv.Refused++
			}
		}
		bv.Jobs = bv.Jobs[:min(len(bv.Jobs), reportListMax)]
		bv.MoreJobs = max(int(resp.GetMatched())-len(bv.Jobs), 0)
		bv.Fields = append(bv.Fields, formField{"verb", verbName})
		for _, f := range verbFields[verbName] {
			if v := r.PostForm.Get(f.name); v != "" {
				bv.Fields = append(bv.Fields, formField{f.name, v})
			}
			if text := f.words(r.PostForm.Get(f.name)); text != "" {
				bv.Settings = append(bv.Settings, formField{f.label, text})
			}
		}
		vals := form.values()
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			bv.Fields = append(bv.Fields, formField{k, vals.Get(k)})
		}
	}
	v := c.newView(r, label+" jobs", "jobs")
	v.Data = bv
	c.render(w, r, http.StatusOK, "bulk", v)
}

// bulkJob is one job of a bulk action: as it matched, or its outcome.
type bulkJob struct {
	ID, Batch, LocalIDs, State string
	Done                       bool
	Code, Error                string
}

func newBulkJob(r *v1.BulkJobResult) bulkJob {
	return bulkJob{ID: r.GetJobId(), Batch: r.GetBatchId(), LocalIDs: strings.Join(r.GetLocalIds(), ", "),
		State: stateName(r.GetState()), Done: r.GetOk(), Code: r.GetCode(), Error: r.GetError()}
}

// describeFilter says in words which jobs a filter takes.
func describeFilter(f filterForm) string {
	var parts []string
	for _, p := range []struct{ name, v string }{
		{"state", f.State}, {"batch", f.Batch}, {"collection", f.Collection}, {"profile", f.Profile},
		{"submitter", f.Submitter}, {"local id", f.LocalID}, {"ARK", f.ARK}, {"message contains", f.Message},
		{"failed in", f.FailingStage}, {"changed after", f.From}, {"changed before", f.To},
	} {
		if p.v != "" {
			parts = append(parts, fmt.Sprintf("%s %q", p.name, p.v))
		}
	}
	return strings.Join(parts, ", ")
}
