package web

import (
	"net/http"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// The JSON endpoints an open page polls (static/console.js). Each answers
// the figures of one page, formatted as the page shows them, under the
// names of the page's data-field attributes.

func (c *Console) liveQueue(w http.ResponseWriter, r *http.Request) {
	resp, err := c.admin.GetQueue(r.Context(), &v1.GetQueueRequest{})
	if err != nil {
		failJSON(w, err)
		return
	}
	rules, err := c.rules(r.Context())
	if err != nil {
		failJSON(w, err)
		return
	}
	writeJSON(w, http.StatusOK, newQueueView(resp, rules, time.Now()))
}

// batchLive is what the batch page's script polls.
type batchLive struct {
	ID       string             `json:"id"`
	State    string             `json:"state"`
	Message  string             `json:"message"`
	Modified string             `json:"last_modified"`
	Total    int32              `json:"total"`
	Segments map[string]segment `json:"segments"`
	// ReportDiffers: the last report's figures are not the live counts.
	ReportDiffers bool `json:"report_differs"`
	// Actions are the batch's actions now, as its page's forms show them;
	// NoAction: its state takes none.
	Actions  actions `json:"actions"`
	NoAction bool    `json:"no_action"`
}

func (c *Console) liveBatch(w http.ResponseWriter, r *http.Request) {
	resp, err := c.admin.GetBatch(r.Context(), &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: r.PathValue("bid")}})
	if err != nil {
		failJSON(w, err)
		return
	}
	b := resp.GetBatch()
	segs, total := progress(b.GetCounts())
	live := batchLive{ID: b.GetId(), State: batchStateName(b.GetStatus().GetStatus()), Message: b.GetStatus().GetMessage(),
		Modified: when(b.GetStatus().GetLastModified()), Total: total, Segments: map[string]segment{},
		ReportDiffers: reportDiffers(b.GetStatusReport(), b.GetCounts()), Actions: newBatchActionViews(resp.GetActions())}
	for _, s := range segs {
		live.Segments[s.Name] = s
	}
	live.NoAction = len(live.Actions) == 0
	writeJSON(w, http.StatusOK, live)
}

func (c *Console) liveJob(w http.ResponseWriter, r *http.Request) {
	resp, err := c.admin.GetJob(r.Context(), &v1.GetJobRequest{JobId: r.PathValue("jid")})
	if err != nil {
		failJSON(w, err)
		return
	}
	writeJSON(w, http.StatusOK, newJobLive(resp))
}
