package web

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Every action is a POST that the action wrapper let through (token
// configured, sign-in, CSRF). It calls one AdminService method; on success
// it sends the browser back (303) with the outcome in a one-time flash, on
// a refusal it answers the refusal's HTTP status and message.

// finish logs an action and answers it: on success, a redirect to the
// form's return page (ret when it names none).
func (c *Console) finish(w http.ResponseWriter, r *http.Request, action, item string, err error, ret string, f flash) {
	c.finishAt(w, r, action, item, err, safeReturn(r.PostForm.Get("return"), ret), f)
}

// finishAt is finish with a fixed page to go to: after a deletion the
// page the form came from is gone.
func (c *Console) finishAt(w http.ResponseWriter, r *http.Request, action, item string, err error, to string, f flash) {
	if err != nil {
		rf := refusalOf(err)
		c.log.InfoContext(r.Context(), "console action refused", "action", action, "item", item, "remote", r.RemoteAddr,
			"code", rf.Code, "error", rf.Message)
		c.fail(w, r, err)
		return
	}
	c.log.InfoContext(r.Context(), "console action", "action", action, "item", item, "remote", r.RemoteAddr)
	setFlash(w, r, f)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (c *Console) unknownAction(w http.ResponseWriter, r *http.Request) {
	c.refuse(w, r, http.StatusNotFound, "No such action", fmt.Sprintf("%s is not an action of the console", r.URL.Path))
}

func (c *Console) queueAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	switch a := r.PathValue("action"); a {
	case "pause":
		_, err := c.admin.PauseQueue(ctx, &v1.PauseQueueRequest{})
		c.finish(w, r, "queue.pause", "", err, "/",
			flash{"ok", "The queue is paused: no stage takes a new batch or job; work in hand finishes its step."})
	case "unpause":
		_, err := c.admin.UnpauseQueue(ctx, &v1.UnpauseQueueRequest{})
		c.finish(w, r, "queue.unpause", "", err, "/", flash{"ok", "The queue runs again."})
	case "cleanup":
		raw := strings.TrimSpace(r.PostForm.Get("older_than"))
		d, err := time.ParseDuration(raw)
		if err != nil {
			c.refuse(w, r, http.StatusBadRequest, "Not a duration",
				fmt.Sprintf("older_than %q is not a duration: write it as 24h, 90m or 0s", raw))
			return
		}
		if r.PostForm.Get("confirmed") != "1" {
			c.confirm(w, r, fmt.Sprintf("Remove every completed batch older than %v now, with its jobs and their working folders "+
				"(up to 100 batches)? Their reports were sent; nothing of them stays in the queue.", d), "Clean up")
			return
		}
		resp, err := c.admin.CleanupBatches(ctx, &v1.CleanupBatchesRequest{OlderThan: durationpb.New(d)})
		msg := fmt.Sprintf("Cleaned up %d completed batch(es) older than %v, with %d job(s).", len(resp.GetBatchIds()), d, resp.GetJobs())
		if n := len(resp.GetWorkingDirsLeft()); n > 0 {
			msg += fmt.Sprintf(" %d working folder(s) could not be removed (the batcher's log says why).", n)
		}
		if n := len(resp.GetBatchIds()); n == v1.CleanupBatchesDefault {
			msg += " There may be more: clean up again."
		}
		c.finish(w, r, "queue.cleanup", raw, err, "/", flash{"ok", msg})
	default:
		c.unknownAction(w, r)
	}
}

func (c *Console) collectionAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	m := strings.TrimSpace(r.PostForm.Get("collection"))
	switch r.PathValue("action") {
	case "hold":
		_, err := c.admin.HoldCollection(ctx, &v1.HoldCollectionRequest{Collection: m})
		c.finish(w, r, "collection.hold", m, err, "/",
			flash{"ok", fmt.Sprintf("Collection %s is held: its pending batches and jobs go to Held when a stage meets them.", m)})
	case "release":
		resp, err := c.admin.ReleaseCollection(ctx, &v1.ReleaseCollectionRequest{Collection: m})
		f := flash{"ok", fmt.Sprintf("Collection %s released: %d batch(es) and %d job(s) back to Pending.", m,
			len(resp.GetReleasedBatches()), len(resp.GetReleasedJobs()))}
		if nr := resp.GetNotReleased(); len(nr) > 0 {
			f = flash{"warn", f.Text + " Not released (release them again): " + strings.Join(nr, "; ")}
		}
		c.finish(w, r, "collection.release", m, err, "/", f)
	default:
		c.unknownAction(w, r)
	}
}

func (c *Console) jobAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	jid := r.PathValue("jid")
	msg := r.PostForm.Get("message")
	ret := jobURL(jid)
	switch a := r.PathValue("action"); a {
	case "hold":
		resp, err := c.admin.HoldJob(ctx, &v1.HoldJobRequest{JobId: jid, Message: msg})
		c.finish(w, r, "job.hold", jid, err, ret, flash{"ok", "Job " + jid + " is held." + nowIn(resp.GetJob())})
	case "release":
		resp, err := c.admin.ReleaseJob(ctx, &v1.ReleaseJobRequest{JobId: jid, Message: msg})
		c.finish(w, r, "job.release", jid, err, ret, flash{"ok", "Job " + jid + " released." + nowIn(resp.GetJob())})
	case "fail":
		resp, err := c.admin.FailJob(ctx, &v1.FailJobRequest{JobId: jid, Message: msg})
		c.finish(w, r, "job.fail", jid, err, ret, flash{"ok", "Job " + jid + " failed." + nowIn(resp.GetJob())})
	case "requeue":
		req := &v1.RequeueJobRequest{JobId: jid, Message: msg}
		if s := r.PostForm.Get("state"); s != "" {
			st, err := parseJobState(s)
			if err != nil {
				c.finish(w, r, "job.requeue", jid, badRequest("state: %v", err), ret, flash{})
				return
			}
			req.State = st
		}
		resp, err := c.admin.RequeueJob(ctx, req)
		c.finish(w, r, "job.requeue", jid, err, ret, flash{"ok", fmt.Sprintf("Job %s requeued.%s Retry %d.", jid,
			nowIn(resp.GetJob()), resp.GetJob().GetStatus().GetRetryCount())})
	case "delete":
		c.deleteJob(w, r, jid)
	default:
		c.unknownAction(w, r)
	}
}

// nowIn says where a job is after an action.
func nowIn(j *v1.Job) string {
	if j == nil {
		return ""
	}
	return " It is now " + jobStateName(j.GetStatus().GetStatus()) + "."
}

// deleteJob deletes a failed or held job. If its batch is still open, its
// depositor will never hear of the job: the operator must confirm, and the
// deletion then passes force.
func (c *Console) deleteJob(w http.ResponseWriter, r *http.Request, jid string) {
	ctx := r.Context()
	got, err := c.admin.GetJob(ctx, &v1.GetJobRequest{JobId: jid})
	if err != nil {
		c.finish(w, r, "job.delete", jid, err, "/jobs", flash{})
		return
	}
	j := got.GetJob()
	ret := "/jobs"
	if j.GetBid() != "" {
		ret = batchURL(j.GetBid())
	}
	rules, err := c.rules(ctx)
	if err != nil {
		c.finish(w, r, "job.delete", jid, err, ret, flash{})
		return
	}
	force := false
	deletable := rules.jobAllows(j.GetStatus().GetStatus(), v1.BulkVerb_BULK_VERB_DELETE)
	if bid := j.GetBid(); bid != "" && deletable {
		b, err := c.admin.GetBatch(ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
		if err == nil && rules.batchOpen(b.GetBatch().GetStatus().GetStatus()) {
			if r.PostForm.Get("confirmed") != "1" {
				c.confirm(w, r, jobDeleteWarning(jid, bid, b.GetBatch(), rules), "Delete the job")
				return
			}
			force = true
		}
	}
	resp, err := c.admin.DeleteJob(ctx, &v1.DeleteJobRequest{JobId: jid, Force: force})
	text := "Job " + jid + " deleted."
	if d := resp.GetWorkingDir(); d != "" {
		text += " Its working directory " + d + " is removed."
	}
	c.finishAt(w, r, "job.delete", jid, err, ret, flash{"ok", text})
}

func (c *Console) batchAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	bid := r.PathValue("bid")
	ret := batchURL(bid)
	switch r.PathValue("action") {
	case "release":
		resp, err := c.admin.ReleaseBatch(ctx, &v1.ReleaseBatchRequest{BatchId: bid})
		c.finish(w, r, "batch.release", bid, err, ret, flash{"ok", "Batch " + bid + " released: it is now " +
			batchStateName(resp.GetBatch().GetStatus().GetStatus()) + " and a batcher will take it."})
	case "update-report":
		resp, err := c.admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: bid})
		c.finish(w, r, "batch.update-report", bid, err, ret, flash{"ok", "Batch " + bid + " is " +
			batchStateName(resp.GetBatch().GetStatus().GetStatus()) + ": a batcher sends its second report."})
	case "delete":
		c.deleteBatch(w, r, bid)
	default:
		c.unknownAction(w, r)
	}
}

// deleteBatch deletes a held or failed batch after the operator confirmed
// the warning (a held batch's depositor is never told; a failed batch goes
// only once recovery is over).
func (c *Console) deleteBatch(w http.ResponseWriter, r *http.Request, bid string) {
	ctx := r.Context()
	got, err := c.admin.GetBatch(ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
	if err != nil {
		c.finish(w, r, "batch.delete", bid, err, "/batches", flash{})
		return
	}
	rules, err := c.rules(ctx)
	if err != nil {
		c.finish(w, r, "batch.delete", bid, err, "/batches", flash{})
		return
	}
	if warn := deleteBatchWarning(got.GetBatch(), rules); warn != "" && r.PostForm.Get("confirmed") != "1" {
		c.confirm(w, r, warn, "Delete the batch")
		return
	}
	resp, err := c.admin.DeleteBatch(ctx, &v1.DeleteBatchRequest{BatchId: bid})
	c.finishAt(w, r, "batch.delete", bid, err, "/batches",
		flash{"ok", fmt.Sprintf("Batch %s deleted with %d job(s).", bid, len(resp.GetDeletedJobs()))})
}

// confirmView asks the operator to confirm an action: the same form again,
// with confirmed=1.
type confirmView struct {
	Warning string
	Action  string
	Button  string
	Fields  []formField
	Back    string
}

type formField struct{ Name, Value string }

// confirm answers the page that asks for confirmation. Without JavaScript
// this is the only way through; with it, the script asked already and
// sent confirmed=1.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, warning, button string) {
	cv := confirmView{Warning: warning, Action: r.URL.Path, Button: button, Back: safeReturn(r.PostForm.Get("return"), "/")}
	for _, k := range slices.Sorted(maps.Keys(r.PostForm)) {
		if k == "csrf" || k == "confirmed" {
			continue
		}
		for _, v := range r.PostForm[k] {
			cv.Fields = append(cv.Fields, formField{k, v})
		}
	}
	v := c.newView(r, "Confirm", "")
	v.Data = cv
	c.render(w, r, http.StatusOK, "confirm", v)
}

// verify checks the fixity of a stored version (AdminService.VerifyObject).
func (c *Console) verify(w http.ResponseWriter, r *http.Request) {
	ark := strings.TrimSpace(r.PostForm.Get("ark"))
	// No version: the latest one stored.
	var version int64
	if raw := strings.TrimSpace(r.PostForm.Get("version")); raw != "" {
		var err error
		if version, err = strconv.ParseInt(raw, 10, 32); err != nil {
			c.finish(w, r, "verify", ark, badRequest("version %q is not a number", raw), "/fsck", flash{})
			return
		}
	}
	resp, err := c.admin.VerifyObject(r.Context(), &v1.VerifyObjectRequest{Ark: ark, Version: int32(version)})
	if err != nil {
		c.finish(w, r, "verify", ark, err, "/fsck", flash{})
		return
	}
	c.log.InfoContext(r.Context(), "console action", "action", "verify", "item", ark, "version", version, "remote", r.RemoteAddr,
		"checked", resp.GetVersion(), "mismatches", len(resp.GetMismatches()))
	v := c.newView(r, "Fsck", "fsck")
	v.Data = fsckView{Verified: resp, ARK: ark}
	c.render(w, r, http.StatusOK, "fsck", v)
}

func (c *Console) fsck(w http.ResponseWriter, r *http.Request) {
	repair := r.PostForm.Get("repair") == "1"
	resp, err := c.admin.Fsck(r.Context(), &v1.FsckRequest{Repair: repair})
	action := "fsck"
	if repair {
		action = "fsck.repair"
	}
	if err != nil {
		c.finish(w, r, action, "", err, "/fsck", flash{})
		return
	}
	c.log.InfoContext(r.Context(), "console action", "action", action, "remote", r.RemoteAddr,
		"damages", len(resp.GetDamages()), "jobs_checked", resp.GetJobsChecked())
	v := c.newView(r, "Fsck", "fsck")
	v.Data = fsckView{Result: resp, Repair: repair}
	c.render(w, r, http.StatusOK, "fsck", v)
}
