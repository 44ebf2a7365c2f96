package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestJobJSONCarriesWhatTheStagesAdd: the job page's JSON, which its
// script polls, carries the ARK, store, inventory and metadata the stages
// add as the job moves on, under the names of the page's data-field
// attributes; empty metadata rows start hidden, empty configuration rows
// are left out.
func TestJobJSONCarriesWhatTheStagesAdd(t *testing.T) {
	f := newFixture(t, "")
	_, jids := f.batch("jdoe", 1)
	jid := jids[0]
	f.move(jid, "", queue.Estimating, queue.Provisioning, queue.Downloading)
	a := f.get("/jobs/" + jid)
	wantBody(t, a, `<dd data-field="ark" id="ark">—</dd>`,
		`<span data-field="store.summary">—</span> <span class="url" data-field="store.url"></span>`,
		`<span data-field="inventory.summary">—</span> <span class="url" data-field="inventory.url"></span>`,
		`<div data-if="metadata.who" hidden><dt>Who</dt><dd data-field="metadata.who"></dd></div>`)
	live := func() map[string]any {
		t.Helper()
		ja := f.get("/api/jobs/" + jid)
		var m map[string]any
		if err := json.Unmarshal([]byte(ja.body), &m); err != nil || ja.code != http.StatusOK {
			t.Fatalf("%d %v\n%s", ja.code, err, ja.body)
		}
		return m
	}
	if m := live(); m["ark"] != "—" || lookupJSON(m, "store.summary") != "—" || lookupJSON(m, "store.url") != "" {
		t.Fatalf("before the storer: %v", m)
	}

	f.move(jid, "", queue.Processing, queue.Storing, queue.Recording)
	queuetest.Move(t, f.q, jid, jobs.Change{To: queue.Notify, Message: "recorded",
		Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4live", LocalId: []string{"loc-0"}},
		Metadata:    &v1.Metadata{Who: "Doe, J.", What: "a test object"}})
	m := live()
	for field, want := range map[string]string{
		"ark": "ark:/99999/fk4live", "local_ids": "loc-0",
		"store.summary": "add", "store.url": "file:///store/manifest.checkm",
		"inventory.summary": "add version 1", "inventory.url": "file:///store/manifest.checkm",
		"metadata.who": "Doe, J.", "metadata.what": "a test object", "metadata.where": "",
	} {
		if got := lookupJSON(m, field); got != want {
			t.Errorf("%s is %q, want %q (%v)", field, got, want, m)
		}
	}
	wantBody(t, f.get("/jobs/"+jid), `<dd data-field="ark" id="ark">ark:/99999/fk4live</dd>`,
		`<div data-if="metadata.who"><dt>Who</dt><dd data-field="metadata.who">Doe, J.</dd></div>`,
		`<div data-if="metadata.where" hidden>`)
	// Configuration rows without a value (the fixture's jobs name no
	// response type or submission mode) are left out.
	wantNot(t, f.get("/jobs/"+jid), "<dt>Response type</dt>", "<dt>Submission mode</dt>", "<dd></dd>", "<dd>—</dd>")
}

// lookupJSON follows a data-field path ("store.url") through decoded JSON,
// as the page's script does; "(absent)" when it leads nowhere.
func lookupJSON(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return "(absent)"
		}
		if v, ok = obj[k]; !ok {
			return "(absent)"
		}
	}
	return v
}

// TestBatchPageTellsLiveCountsFromTheReportsFigures: the batch page heads
// with the live counts, labelled so; the batch's message (after a report,
// the report's headline) is a labelled row of the last change; the
// report's figures are the report's, with a note (live, data-if) once the
// jobs have moved since. Rows with no value are left out.
func TestBatchPageTellsLiveCountsFromTheReportsFiguresAndHidesEmptyRows(t *testing.T) {
	f := newFixture(t, "")
	bid, jid := f.reportedBatch()
	a := f.get("/batches/" + bid)
	wantBody(t, a, `<strong>Jobs now</strong> <small>(live)</small>: <span data-field="total">1</span> job(s)`,
		`<dt>Its message</dt><dd class="msg" data-field="message">1 job(s): 0 completed, 1 failed</dd>`,
		`the report's figures: 1 failed job(s), 0 successful.`,
		`<p class="note" id="report-differs" data-if="report_differs" hidden>`,
		"<dt>Submitter</dt><dd>jdoe</dd>")
	// The fixture's submission names no batch uuid, metadata or mode.
	wantNot(t, a, `<p class="msg" data-field="message">`)
	wantNot(t, a, "<dt>Who</dt>", "<dt>What</dt>", "<dt>Where</dt>", "<dt>When</dt>",
		"<dt>Mode</dt>", "<dt>Batch uuid</dt>", "<dd>—</dd>", "<dd></dd>", "<dd> <span")
	differs := func() bool {
		t.Helper()
		var live map[string]any
		ja := f.get("/api/batches/" + bid)
		if err := json.Unmarshal([]byte(ja.body), &live); err != nil || ja.code != http.StatusOK {
			t.Fatalf("%d %v\n%s", ja.code, err, ja.body)
		}
		return live["report_differs"] == true
	}
	if differs() {
		t.Fatal("the report's figures are the live counts, yet the JSON says they differ")
	}

	// The failed job is requeued and completes: the report is behind.
	f.move(jid, "notified", queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify, queue.Completed)
	if !differs() {
		t.Fatal("the job completed since the report, yet the JSON says the report's figures are the live counts")
	}
	wantBody(t, f.get("/batches/"+bid), `<span data-field="segments.completed.count">1</span> completed`,
		`the report's figures: 1 failed job(s), 0 successful.`,
		`<p class="note" id="report-differs" data-if="report_differs">Jobs have moved since this report`)
}

// TestEveryTableScrollsInItsBox: on every page a signed-in operator sees,
// each table sits in a .scroll box, which scrolls it on a narrow screen
// instead of widening the page (the browser test measures it).
func TestEveryTableScrollsInItsBox(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	bid, jids := f.batch("jdoe", 2)
	f.fail(jids[0], "digest mismatch on a.txt")
	// A damage for fsck to list: a job's state entry gone.
	conn := zkConn(t)
	entries, _, err := conn.Children(f.q.Paths().Root() + "/jobs/states/pending")
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %v %v", entries, err)
	}
	if err := conn.Delete(f.q.Paths().Root()+"/jobs/states/pending/"+entries[0], -1); err != nil {
		t.Fatal(err)
	}
	pages := map[string]answer{}
	for _, p := range []string{"/", "/batches", "/batches/" + bid, "/jobs", "/jobs?collection=demo_coll", "/jobs/" + jids[0],
		"/collections", "/collections?collection=demo_coll"} {
		pages[p] = f.get(p)
	}
	pages["fsck result"] = f.act("/fsck", url.Values{"repair": {"0"}})
	pages["bulk result"] = f.act("/bulk", url.Values{"verb": {"requeue"}, "state": {"Failed"}, "confirmed": {"1"}})
	for name, a := range pages {
		if a.code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", name, a.code, a.body)
		}
		tables := strings.Count(a.body, "<table")
		boxed := strings.Count(a.body, `<div class="scroll"><table`)
		if tables != boxed {
			t.Errorf("%s: %d of %d table(s) outside a .scroll box", name, tables-boxed, tables)
		}
	}
	wantBody(t, pages["fsck result"], `<div class="scroll"><table class="list damages">`)
	wantBody(t, pages["bulk result"], `id="bulk-outcome"`, `<div class="scroll"><table`)
	wantBody(t, pages["/jobs/"+jids[0]], `<div class="scroll"><table class="list files">`)
}
