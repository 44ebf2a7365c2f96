package web

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// aggregatesView is the collections page: jobs by collection (or, drilled
// down, by batch of one collection) and state, and the jobs ended per hour
// and day.
type aggregatesView struct {
	Collection string // drilled down to this one; "" for every collection
	Found      bool   // the collection drilled down to has jobs
	States     []string
	Rows       []tallyRow
	Total      tallyRow
	Hours      []endedRow
	Days       []endedRow
	JobsRead   int32
	AsOf       string
	// Retention is how long the batcher keeps completed batches ("" when
	// it does not say): the daily counts go back that far.
	Retention string
}

type tallyRow struct {
	Name, Link string // the collection or batch, and where its name links to
	Cells      []tallyCell
	Jobs       int32
	Space      string
}

type tallyCell struct {
	Jobs  int32
	Space string
	Link  string // its jobs
}

type endedRow struct {
	Start             string
	Completed, Failed int32
}

func (c *Console) collectionsPage(w http.ResponseWriter, r *http.Request) {
	coll := r.URL.Query().Get("collection")
	resp, err := c.admin.GetAggregates(r.Context(), &v1.GetAggregatesRequest{})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	av := aggregatesView{Collection: coll, JobsRead: resp.GetJobsRead(), AsOf: when(resp.GetAsOf())}
	if d := resp.GetRetention(); d != nil {
		av.Retention = days(d.AsDuration())
	}
	// The columns: the states any job of the table is in, in pipeline order.
	used := map[string]bool{}
	type source struct {
		name, link string
		states     []*v1.StateTally
		filter     url.Values
	}
	var sources []source
	for _, ct := range resp.GetCollections() {
		if coll == "" {
			sources = append(sources, source{ct.GetCollection(), "/collections?collection=" + url.QueryEscape(ct.GetCollection()),
				ct.GetStates(), url.Values{"collection": {ct.GetCollection()}}})
			continue
		}
		if ct.GetCollection() != coll {
			continue
		}
		av.Found = true
		for _, bt := range ct.GetBatches() {
			sources = append(sources, source{bt.GetBatchId(), batchURL(bt.GetBatchId()), bt.GetStates(),
				url.Values{"collection": {coll}, "batch": {bt.GetBatchId()}}})
		}
	}
	for _, s := range sources {
		for _, st := range s.states {
			used[st.GetState()] = true
		}
	}
	for _, st := range jobStates() {
		if used[jobStateName(st)] {
			av.States = append(av.States, jobStateName(st))
		}
	}
	totals := make([]tallyCell, len(av.States))
	var totalSpace int64
	for _, s := range sources {
		row := tallyRow{Name: s.name, Link: s.link}
		var space int64
		for i, name := range av.States {
			cell := tallyCell{}
			for _, st := range s.states {
				if st.GetState() == name {
					q := url.Values{"state": {name}}
					for k, v := range s.filter {
						q[k] = v
					}
					cell = tallyCell{Jobs: st.GetJobs(), Space: humanBytes(st.GetSpaceNeeded()), Link: withQuery("/jobs", q)}
					space += st.GetSpaceNeeded()
					totals[i].Jobs += st.GetJobs()
				}
			}
			row.Cells = append(row.Cells, cell)
			row.Jobs += cell.Jobs
		}
		row.Space = humanBytes(space)
		totalSpace += space
		av.Rows = append(av.Rows, row)
		av.Total.Jobs += row.Jobs
	}
	av.Total.Cells, av.Total.Space = totals, humanBytes(totalSpace)
	for _, h := range resp.GetHours() {
		if h.GetCompleted()+h.GetFailed() > 0 {
			av.Hours = append(av.Hours, endedRow{h.GetStart().AsTime().UTC().Format("2006-01-02 15:00 UTC"), h.GetCompleted(), h.GetFailed()})
		}
	}
	for _, d := range resp.GetDays() {
		av.Days = append(av.Days, endedRow{d.GetStart().AsTime().UTC().Format(time.DateOnly), d.GetCompleted(), d.GetFailed()})
	}
	title := "Collections"
	if coll != "" {
		title = "Collection " + coll
	}
	v := c.pageView(w, r, title, "collections")
	v.Data = av
	c.render(w, r, http.StatusOK, "collections", v)
}

// days says a retention in days when it is whole days ("7 days"), as a
// duration otherwise.
func days(d time.Duration) string {
	if n := d / (24 * time.Hour); n > 0 && d%(24*time.Hour) == 0 {
		if n == 1 {
			return "1 day"
		}
		return fmt.Sprintf("%d days", n)
	}
	return d.String()
}
