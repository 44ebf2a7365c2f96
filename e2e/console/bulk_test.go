package console

import (
	"net/http"
	"net/url"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// TestJobsPageSearchesWhatJobsHold: a field beyond state and batch makes
// the jobs list a search (SearchJobs): by submitter, local id and message
// text, with the fields kept in the form and in the next page's address.
func TestJobsPageSearchesWhatJobsHold(t *testing.T) {
	f := newFixture(t, "")
	_, jdoe := f.batch("jdoe", 3)
	_, asmith := f.batchOf(&v1.Submission{ProfileName: "demo", Submitter: "asmith", PayloadUrl: "http://127.0.0.1/b.checkm",
		Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, Collection: "demo_coll"}, 2, "")
	f.fail(jdoe[2], "digest mismatch on a.txt")

	a := f.get("/jobs?submitter=asmith")
	wantBody(t, a, `<a href="/jobs/`+asmith[0]+`">`, `<a href="/jobs/`+asmith[1]+`">`, `name="submitter" value="asmith"`,
		"Jobs matching every field given")
	wantNot(t, a, `<a href="/jobs/`+jdoe[0]+`">`)
	b := f.get("/jobs?local_id=loc-1")
	wantBody(t, b, `<a href="/jobs/`+jdoe[1]+`">`, `<a href="/jobs/`+asmith[1]+`">`)
	wantNot(t, b, `<a href="/jobs/`+jdoe[0]+`">`)
	c := f.get("/jobs?message_text=DIGEST&size=1")
	wantBody(t, c, `<a href="/jobs/`+jdoe[2]+`">`)
	paged := f.get("/jobs?collection=demo_coll&size=2")
	wantBody(t, paged, `href="/jobs?after=`+jdoe[1]+`&amp;collection=demo_coll&amp;size=2" rel="next"`)
	// Read-only: no bulk form.
	wantNot(t, a, `action="/bulk"`)
	if bad := f.get("/jobs?collection=x&from=yesterday"); bad.code != http.StatusBadRequest {
		t.Errorf("a time that is not one: %d, want 400", bad.code)
	}
}

// TestBulkRequeueShowsTheCountThenActsOnConfirmation: the jobs page of a
// filter offers the bulk form; its first POST is a dry run that moves
// nothing and shows the count and the jobs with a confirmation; the
// confirmation requeues each, saying so per job; a second run finds none.
func TestBulkRequeueShowsTheCountThenActsOnConfirmation(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	_, jids := f.batch("jdoe", 4)
	for _, jid := range jids[:3] {
		f.fail(jid, "digest mismatch on a.txt")
	}
	wantBody(t, f.get("/jobs?message_text=digest"), `action="/bulk"`, `<input type="hidden" name="message_text" value="digest">`)

	form := url.Values{"verb": {"requeue"}, "message_text": {"digest"}, "message": {"fixed upstream"}}
	dry := f.act("/bulk", form)
	if dry.code != http.StatusOK {
		t.Fatalf("dry run: %d\n%s", dry.code, dry.body)
	}
	wantBody(t, dry, `<p class="flash warn" role="alert" id="bulk-count">3 job(s) match. Requeue them?</p>`,
		`<input type="hidden" name="confirmed" value="1">`, `<input type="hidden" name="message" value="fixed upstream">`,
		`<button class="danger">Requeue 3 job(s)</button>`, `<a href="/jobs/`+jids[0]+`">`)
	for _, jid := range jids[:3] {
		if got := f.jobState(jid); got != "Failed" {
			t.Fatalf("after the dry run %s is %s", jid, got)
		}
	}

	form = url.Values{"verb": {"requeue"}, "message_text": {"digest"}, "message": {"fixed upstream"}, "confirmed": {"1"}}
	done := f.act("/bulk", form)
	wantBody(t, done, `id="bulk-outcome">Requeue: 3 of 3 job(s) done.</p>`)
	for _, jid := range jids[:3] {
		if got := f.jobState(jid); got != "Downloading" {
			t.Errorf("after the requeue %s is %s, want Downloading", jid, got)
		}
		if msg := f.job(jid).GetStatus().GetMessage(); msg != "fixed upstream" {
			t.Errorf("%s message %q", jid, msg)
		}
	}
	if got := f.jobState(jids[3]); got != "Pending" {
		t.Errorf("the job the filter does not take is %s", got)
	}
	again := f.act("/bulk", url.Values{"verb": {"requeue"}, "message_text": {"digest"}})
	wantBody(t, again, `id="bulk-count">0 job(s) match.`)
	wantNot(t, again, `name="confirmed"`)
}

// TestBulkReleaseCountSaysWhichJobsItWouldRefuse: the count of a bulk
// release of held jobs whose collection is held says that the release
// would refuse them, and why, beside each.
func TestBulkReleaseCountSaysWhichJobsItWouldRefuse(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	_, jids := f.batch("jdoe", 2)
	for _, jid := range jids {
		if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: jid}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	dry := f.act("/bulk", url.Values{"verb": {"release"}, "state": {"Held"}, "collection": {"demo_coll"}})
	wantBody(t, dry, `id="bulk-count">2 job(s) match. Release them? 2 of them would be refused now: each says why below.</p>`,
		`would be refused: its collection demo_coll is held: release the collection first, which releases the job with it`)
}
