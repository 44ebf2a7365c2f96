package console

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
)

func TestReadOnlyConsoleShowsButRefusesEveryAction(t *testing.T) {
	f := newFixture(t, "")
	bid, jids := f.batch("jdoe", 1)
	f.fail(jids[0], "broken")
	wantBody(t, f.get("/"), `<span class="badge readonly"`)
	wantBody(t, f.get("/signin"), "nothing to sign in to")
	// The fsck page says what the admin API does without a token: it runs
	// Fsck for anyone, where the console runs none.
	fsckPage := f.get("/fsck")
	wantBody(t, fsckPage, "ingestq.v1.AdminService/Fsck", "for anyone who reaches the batcher")
	wantNot(t, fsckPage, "only for a signed-in operator", `action="/fsck"`)
	posts := []struct {
		path string
		form url.Values
	}{
		{"/queue/pause", nil},
		{"/queue/cleanup", url.Values{"older_than": {"0s"}}},
		{"/collections/hold", url.Values{"collection": {"demo_coll"}}},
		{"/jobs/" + jids[0] + "/requeue", nil},
		{"/jobs/" + jids[0] + "/delete", url.Values{"confirmed": {"1"}}},
		{"/batches/" + bid + "/delete", url.Values{"confirmed": {"1"}}},
		{"/fsck", url.Values{"repair": {"1"}}},
		{"/bulk", url.Values{"verb": {"delete"}, "state": {"Failed"}, "confirmed": {"1"}}},
		{"/signin", url.Values{"token": {"anything"}}},
		{"/signout", nil},
	}
	for _, p := range posts {
		t.Run(p.path, func(t *testing.T) {
			a := f.post(p.path, p.form)
			if a.code != http.StatusForbidden {
				t.Fatalf("POST %s: %d, want 403\n%s", p.path, a.code, a.body)
			}
			wantBody(t, a, "INGESTQ_ADMIN_TOKEN")
		})
	}
	if paused, err := jobs.New(f.q).Paused(f.ctx); err != nil || paused {
		t.Errorf("paused %v %v", paused, err)
	}
	if held, err := jobs.New(f.q).CollectionHeld(f.ctx, "demo_coll"); err != nil || held {
		t.Errorf("held %v %v", held, err)
	}
	if got := f.jobState(jids[0]); got != "Failed" {
		t.Errorf("job is %s", got)
	}
}

func TestSignInGuardsPagesAndActions(t *testing.T) {
	f := newFixture(t, testToken)
	_, jids := f.batch("jdoe", 1)

	// Signed out: pages send to the sign-in page and back, JSON is 401,
	// actions are 401 (with or without a CSRF token of someone else's).
	a := f.get("/jobs?state=Failed")
	if a.code != http.StatusSeeOther || a.header.Get("Location") != "/signin?return=%2Fjobs%3Fstate%3DFailed" {
		t.Fatalf("signed-out page: %d %q", a.code, a.header.Get("Location"))
	}
	if a := f.get("/api/queue"); a.code != http.StatusUnauthorized || !strings.Contains(a.body, `"code":"Unauthenticated"`) {
		t.Fatalf("signed-out JSON: %d %s", a.code, a.body)
	}
	if a := f.post("/queue/pause", url.Values{"csrf": {"forged"}}); a.code != http.StatusUnauthorized {
		t.Fatalf("signed-out action: %d %s", a.code, a.body)
	}
	a = f.get("/signin?return=%2Fjobs%3Fstate%3DFailed")
	wantBody(t, a, `name="token"`, `type="password"`, `name="return" value="/jobs?state=Failed"`)

	// A wrong token: refused, no cookie.
	a = f.post("/signin", url.Values{"token": {testToken + "x"}})
	if a.code != http.StatusForbidden || len(a.header.Values("Set-Cookie")) != 0 {
		t.Fatalf("wrong token: %d cookies %v", a.code, a.header.Values("Set-Cookie"))
	}
	wantBody(t, a, "That is not the admin token.")

	// The right token: a sign-in cookie that is not the token, HttpOnly
	// and SameSite=Strict, and back where the operator was going.
	a = f.post("/signin", url.Values{"token": {testToken}, "return": {"/jobs?state=Failed"}})
	if a.code != http.StatusSeeOther || a.header.Get("Location") != "/jobs?state=Failed" {
		t.Fatalf("sign-in: %d %q", a.code, a.header.Get("Location"))
	}
	cookie := a.header.Get("Set-Cookie")
	if !strings.HasPrefix(cookie, signInCookie+"=") || !strings.Contains(cookie, "HttpOnly") ||
		!strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, testToken) {
		t.Fatalf("sign-in cookie %q", cookie)
	}
	wantBody(t, f.get("/jobs?state=Failed"), `action="/signout"`)

	// Signed in, an action needs the sign-in's CSRF token.
	for _, csrf := range []string{"", "forged", f.csrf() + "x"} {
		a := f.post("/jobs/"+jids[0]+"/hold", url.Values{"csrf": {csrf}})
		if a.code != http.StatusForbidden {
			t.Fatalf("CSRF %q: %d\n%s", csrf, a.code, a.body)
		}
		wantBody(t, a, "CSRF token")
	}
	if got := f.jobState(jids[0]); got != "Pending" {
		t.Fatalf("job is %s after refused actions", got)
	}
	if a := f.act("/jobs/"+jids[0]+"/hold", nil); a.code != http.StatusSeeOther {
		t.Fatalf("hold with CSRF: %d\n%s", a.code, a.body)
	}

	// Another console's sign-in (another key, the same queue) and a
	// tampered one are no sign-ins (services/console/web tests an expired
	// one, which needs the key to make).
	others := copySignIn(t, newFixtureAt(t, testToken, f.zkRoot)).cookie
	valid := copySignIn(t, f).cookie
	exp, rest, _ := strings.Cut(valid, ".")
	for name, value := range map[string]string{"another console's": others,
		"tampered expiry": "9" + valid, "no mac": exp + "." + strings.Split(rest, ".")[0],
		"another id": exp + ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA." + strings.Split(rest, ".")[1]} {
		c := newClient(t)
		u, _ := url.Parse(f.srv.URL)
		c.Jar.SetCookies(u, []*http.Cookie{{Name: signInCookie, Value: value}})
		resp, err := c.Get(f.srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s sign-in: %d", name, resp.StatusCode)
		}
	}

	// Signing out ends the sign-in in this browser.
	if a := f.act("/signout", nil); a.code != http.StatusSeeOther || !strings.Contains(a.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign-out: %d %q", a.code, a.header.Get("Set-Cookie"))
	}
	if a := f.get("/"); a.code != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d", a.code)
	}
}

func TestActionsChangeTheQueueThroughTheAdminService(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	_, jids := f.batch("jdoe", 5)
	failedBid, failedJob := f.failedBatch()
	held := f.heldBatch()
	f.fail(jids[3], "download failed")
	f.fail(jids[4], "download failed")

	tests := []struct {
		name    string
		setup   func()
		path    string
		form    url.Values
		to      string // where the browser is sent
		flash   string // what the next page says
		applied func() string
		want    string
	}{
		{name: "pause the queue", path: "/queue/pause", to: "/", flash: "The queue is paused",
			applied: func() string { p, _ := jobs.New(f.q).Paused(f.ctx); return strings.Repeat("paused", btoi(p)) }, want: "paused"},
		{name: "unpause the queue", path: "/queue/unpause", to: "/", flash: "The queue runs again.",
			applied: func() string { p, _ := jobs.New(f.q).Paused(f.ctx); return strings.Repeat("paused", btoi(p)) }, want: ""},
		{name: "hold a collection", path: "/collections/hold", form: url.Values{"collection": {" other_coll "}}, to: "/",
			flash:   "Collection other_coll is held",
			applied: func() string { h, _ := admin.New(f.q).Queue.HeldCollections(f.ctx); return strings.Join(h, ",") }, want: "other_coll"},
		{name: "release a collection", path: "/collections/release", form: url.Values{"collection": {"other_coll"}}, to: "/",
			flash:   "Collection other_coll released: 0 batch(es) and 0 job(s) back to Pending.",
			applied: func() string { h, _ := admin.New(f.q).Queue.HeldCollections(f.ctx); return strings.Join(h, ",") }, want: ""},
		{name: "hold a pending job", path: "/jobs/" + jids[0] + "/hold", form: url.Values{"message": {"wait for the depositor"}},
			to: "/jobs/" + jids[0], flash: "Job " + jids[0] + " is held. It is now Held.",
			applied: func() string { return f.job(jids[0]).GetStatus().GetMessage() }, want: "wait for the depositor"},
		{name: "release a held job", path: "/jobs/" + jids[0] + "/release", to: "/jobs/" + jids[0],
			flash: "It is now Pending.", applied: func() string { return f.jobState(jids[0]) }, want: "Pending"},
		{name: "fail a waiting job", path: "/jobs/" + jids[1] + "/fail", form: url.Values{"message": {"bad deposit"}},
			to: "/jobs/" + jids[1], flash: "It is now Failed.",
			applied: func() string { return f.jobState(jids[1]) + ": " + f.job(jids[1]).GetStatus().GetMessage() }, want: "Failed: bad deposit"},
		{name: "requeue a failed job after its last successful state", path: "/jobs/" + jids[3] + "/requeue",
			form: url.Values{"return": {"/jobs?state=Failed"}}, to: "/jobs?state=Failed", flash: "It is now Downloading. Retry 1.",
			applied: func() string { return f.jobState(jids[3]) }, want: "Downloading"},
		{name: "requeue a failed job at a state named", path: "/jobs/" + jids[4] + "/requeue", form: url.Values{"state": {"Pending"}},
			to: "/jobs/" + jids[4], flash: "It is now Pending.",
			applied: func() string { return f.jobState(jids[4]) }, want: "Pending"},
		{name: "delete a failed job of a closed batch", path: "/jobs/" + failedJob + "/delete", to: "/batches/" + failedBid,
			flash: "Job " + failedJob + " deleted.", applied: func() string {
				_, err := jobs.NewReader(f.q).GetJob(f.ctx, failedJob)
				return errName(err)
			}, want: "not found"},
		{name: "update-report a failed batch", path: "/batches/" + failedBid + "/update-report", to: "/batches/" + failedBid,
			flash: "a batcher sends its second report", applied: func() string { return f.batchState(failedBid) }, want: "UpdateReporting"},
		{name: "release a held batch", path: "/batches/" + held + "/release", to: "/batches/" + held,
			flash: "it is now Pending", applied: func() string { return f.batchState(held) }, want: "Pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.act(tt.path, tt.form)
			if a.code != http.StatusSeeOther {
				t.Fatalf("POST %s: %d\n%s", tt.path, a.code, a.body)
			}
			if loc := a.header.Get("Location"); loc != tt.to {
				t.Errorf("sent to %q, want %q", loc, tt.to)
			}
			if got := tt.applied(); got != tt.want {
				t.Errorf("after the action: %q, want %q", got, tt.want)
			}
			next := f.get(a.header.Get("Location"))
			wantBody(t, next, `class="flash ok"`, tt.flash)
			// The flash is shown once.
			wantNot(t, f.get(a.header.Get("Location")), tt.flash)
		})
	}
}

// TestAFailedJobIsRequeuedAtStoringFromItsPage: Storing is among the
// states a failed job's page offers (and no state past it, which the
// requeue would refuse: the job has no inventory), and the requeue lands
// there.
func TestAFailedJobIsRequeuedAtStoringFromItsPage(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	_, jids := f.batch("jdoe", 1)
	f.move(jids[0], "store full", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Failed)
	wantBody(t, f.get("/jobs/"+jids[0]), `<option value="" data-field="resume">Storing</option>`,
		"<option>Processing</option><option>Storing</option></select>")
	a := f.act("/jobs/"+jids[0]+"/requeue", url.Values{"state": {"Storing"}})
	if a.code != http.StatusSeeOther {
		t.Fatalf("POST requeue at Storing: %d\n%s", a.code, a.body)
	}
	if got := f.jobState(jids[0]); got != "Storing" {
		t.Errorf("after the requeue the job is %s, want Storing", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func errName(err error) string {
	if err == nil {
		return "found"
	}
	if strings.Contains(err.Error(), "not found") {
		return "not found"
	}
	return err.Error()
}

func TestFsckReportsAndRepairs(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	_, jids := f.batch("jdoe", 1)
	// Damage the tree: the job's state entry disappears, as a crash of a
	// writer that did not use one multi-operation could leave it.
	conn := zkConn(t)
	entries, _, err := conn.Children(f.q.Paths().Root() + "/jobs/states/pending")
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %v %v", entries, err)
	}
	if err := conn.Delete(f.q.Paths().Root()+"/jobs/states/pending/"+entries[0], -1); err != nil {
		t.Fatal(err)
	}

	a := f.act("/fsck", url.Values{"repair": {"0"}})
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	wantBody(t, a, "Result (report only)", "1 job(s) and 1 batch(es) checked", "1 damage(s)",
		`<td data-label="Kind">job-in-no-state</td><td data-label="Item">`+jids[0]+"</td>", `<td data-label="Repaired">no</td>`)
	a = f.act("/fsck", url.Values{"repair": {"1"}})
	wantBody(t, a, "Result (with repair)", `<td data-label="Kind">job-in-no-state</td><td data-label="Item">`+jids[0]+"</td>", `<td data-label="Repaired">yes</td>`)
	wantBody(t, f.act("/fsck", nil), "<strong>clean</strong>")
}

func TestRefusedActionsShowTheAdminServiceRefusal(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	bid, jids := f.batch("jdoe", 3)
	held := f.heldBatch()
	if err := admin.New(f.q).Queue.HoldCollection(f.ctx, "demo_coll"); err != nil {
		t.Fatal(err)
	}
	locked, err := jobs.New(f.q).ClaimJob(f.ctx, jids[2])
	if err != nil {
		t.Fatal(err)
	}
	defer locked.Release(f.ctx)

	tests := []struct {
		name string
		path string
		form url.Values
		code int
		want []string
	}{
		{"requeue a job that has not failed", "/jobs/" + jids[0] + "/requeue", nil, http.StatusConflict,
			[]string{"<code>FailedPrecondition</code>", "job " + jids[0] + " is Pending, not Failed"}},
		{"release a batch whose collection is held", "/batches/" + held + "/release", nil, http.StatusConflict,
			[]string{"FailedPrecondition", "which is still held: release the collection (ReleaseCollection) first"}},
		{"update-report a batch that has not failed", "/batches/" + bid + "/update-report", nil, http.StatusConflict,
			[]string{"FailedPrecondition", "Processing"}},
		{"delete a batch that is processing", "/batches/" + bid + "/delete", nil, http.StatusConflict,
			[]string{"FailedPrecondition", "is Processing, not Held or Failed"}},
		{"fail a job a stage holds", "/jobs/" + jids[2] + "/fail", nil, http.StatusConflict,
			[]string{"<code>Aborted</code>", "a consumer is working on it now; try again"}},
		{"hold a collection with a slash", "/collections/hold", url.Values{"collection": {"a/b"}}, http.StatusBadRequest,
			[]string{"<code>InvalidArgument</code>", "contains &#39;/&#39;"}},
		{"hold no collection", "/collections/hold", nil, http.StatusBadRequest, []string{"InvalidArgument", "collection"}},
		{"a message over the limit", "/jobs/" + jids[0] + "/hold", url.Values{"message": {strings.Repeat("m", 1025)}},
			http.StatusBadRequest, []string{"InvalidArgument", "message"}},
		{"requeue at an unknown state", "/jobs/" + jids[0] + "/requeue", url.Values{"state": {"Sideways"}},
			http.StatusBadRequest, []string{"unknown job state"}},
		{"act on a job that does not exist", "/jobs/jid0000099999/release", nil, http.StatusNotFound,
			[]string{"NotFound", "job jid0000099999 not found"}},
		{"delete a job that does not exist", "/jobs/jid0000099999/delete", nil, http.StatusNotFound, []string{"NotFound"}},
		{"an action the console does not have", "/jobs/" + jids[0] + "/explode", nil, http.StatusNotFound,
			[]string{"not an action of the console"}},
		{"an action on the queue it does not have", "/queue/drop", nil, http.StatusNotFound, []string{"not an action"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.act(tt.path, tt.form)
			if a.code != tt.code {
				t.Fatalf("POST %s: %d, want %d\n%s", tt.path, a.code, tt.code, a.body)
			}
			wantBody(t, a, tt.want...)
		})
	}
	for _, jid := range jids[:2] {
		if got := f.jobState(jid); got != "Pending" {
			t.Errorf("%s is %s after refusals", jid, got)
		}
	}
}

func TestDeletingAJobOfAnOpenBatchAsksForConfirmationThenForces(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	bid, jids := f.batch("jdoe", 2)
	f.fail(jids[0], "broken")
	dir := f.job(jids[0]).GetConfiguration().GetWorkingDir()

	// The job page warns in the delete button's confirmation.
	wantBody(t, f.get("/jobs/"+jids[0]), `data-confirm="Batch `+bid+` is still Processing: if job `+jids[0]+
		` is deleted, its depositor will never hear of it. Delete the job anyway?"`)

	// Without confirmation (no script): a page that asks, the job kept.
	a := f.act("/jobs/"+jids[0]+"/delete", url.Values{"confirmed": {""}})
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	wantBody(t, a, "<h1>Confirm</h1>", "its depositor will never hear of it", `action="/jobs/`+jids[0]+`/delete"`,
		`<input type="hidden" name="confirmed" value="1">`, `name="csrf"`)
	if got := f.jobState(jids[0]); got != "Failed" {
		t.Fatalf("job is %s before confirmation", got)
	}
	// Confirmed: deleted with force, its working directory with it.
	a = f.act("/jobs/"+jids[0]+"/delete", url.Values{"confirmed": {"1"}})
	if a.code != http.StatusSeeOther || a.header.Get("Location") != "/batches/"+bid {
		t.Fatalf("%d %q\n%s", a.code, a.header.Get("Location"), a.body)
	}
	if _, err := jobs.NewReader(f.q).GetJob(f.ctx, jids[0]); errName(err) != "not found" {
		t.Fatalf("job after delete: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("working directory %s: %v", dir, err)
	}
	wantBody(t, f.get("/batches/"+bid), "Job "+jids[0]+" deleted. Its working directory "+dir+" is removed.")
	// A job that is not deletable is refused without asking.
	a = f.act("/jobs/"+jids[1]+"/delete", nil)
	if a.code != http.StatusConflict {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	wantBody(t, a, "is Pending, not Failed or Held")
}

func TestDeletingAHeldOrFailedBatchAsksForConfirmation(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	held := f.heldBatch()
	failed, failedJob := f.failedBatch()
	tests := []struct {
		name, bid, warning string
		jobs               []string
	}{
		{"held", held, "its depositor will NOT be notified", nil},
		{"failed", failed, "Do this only once every attempt to recover its failed jobs is over", []string{failedJob}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantBody(t, f.get("/batches/"+tt.bid), `data-confirm="Batch `+tt.bid, tt.warning)
			a := f.act("/batches/"+tt.bid+"/delete", nil)
			if a.code != http.StatusOK {
				t.Fatalf("%d\n%s", a.code, a.body)
			}
			wantBody(t, a, "<h1>Confirm</h1>", tt.warning, `action="/batches/`+tt.bid+`/delete"`)
			if got := f.batchState(tt.bid); got != map[string]string{"held": "Held", "failed": "Failed"}[tt.name] {
				t.Fatalf("batch is %s before confirmation", got)
			}
			a = f.act("/batches/"+tt.bid+"/delete", url.Values{"confirmed": {"1"}})
			if a.code != http.StatusSeeOther || a.header.Get("Location") != "/batches" {
				t.Fatalf("%d %q\n%s", a.code, a.header.Get("Location"), a.body)
			}
			if _, err := batches.New(f.q).GetBatch(f.ctx, tt.bid); errName(err) != "not found" {
				t.Fatalf("batch after delete: %v", err)
			}
			for _, jid := range tt.jobs {
				if _, err := jobs.NewReader(f.q).GetJob(f.ctx, jid); errName(err) != "not found" {
					t.Errorf("job %s after delete: %v", jid, err)
				}
			}
			wantBody(t, f.get("/batches"), fmt.Sprintf("Batch %s deleted with %d job(s).", tt.bid, len(tt.jobs)))
		})
	}
}

func TestCleanupOfCompletedBatchesFromTheQueuePage(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	wantBody(t, f.get("/"), `action="/queue/cleanup"`, `name="older_than"`)
	done, jids := f.batch("jdoe", 2)
	for _, jid := range jids {
		f.move(jid, "done", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
			queue.Storing, queue.Recording, queue.Notify, queue.Completed)
	}
	f.moveBatch(done, queue.BatchReporting, queue.BatchCompleted)
	open, _ := f.batch("jdoe", 1)

	a := f.act("/queue/cleanup", url.Values{"older_than": {"a day"}})
	if a.code != http.StatusBadRequest {
		t.Fatalf("older_than \"a day\": %d, want 400\n%s", a.code, a.body)
	}
	wantBody(t, a, "is not a duration: write it as 24h, 90m or 0s")

	// Unconfirmed (no script asked): a page asks first, and nothing goes.
	a = f.act("/queue/cleanup", url.Values{"older_than": {"0s"}})
	wantBody(t, a, "Remove every completed batch older than 0s now", `<input type="hidden" name="older_than" value="0s">`,
		`<input type="hidden" name="confirmed" value="1">`)
	if got := f.batchState(done); got != "Completed" {
		t.Fatalf("an unconfirmed cleanup left the completed batch %s", got)
	}

	a = f.act("/queue/cleanup", url.Values{"older_than": {"1h"}, "confirmed": {"1"}})
	if a.code != http.StatusSeeOther {
		t.Fatalf("older_than 1h: %d\n%s", a.code, a.body)
	}
	wantBody(t, f.get("/"), "Cleaned up 0 completed batch(es) older than 1h0m0s, with 0 job(s).")
	if got := f.batchState(done); got != "Completed" {
		t.Fatalf("a batch completed a moment ago is %s after a cleanup of those older than an hour", got)
	}

	a = f.act("/queue/cleanup", url.Values{"older_than": {"0s"}, "confirmed": {"1"}})
	if a.code != http.StatusSeeOther {
		t.Fatalf("older_than 0s: %d\n%s", a.code, a.body)
	}
	wantBody(t, f.get("/"), "Cleaned up 1 completed batch(es) older than 0s, with 2 job(s).")
	if _, err := batches.New(f.q).GetBatch(f.ctx, done); err == nil {
		t.Errorf("the completed batch %s is still there", done)
	}
	if got := f.batchState(open); got != "Processing" {
		t.Errorf("the open batch is %s", got)
	}
}

// storeVersion stores version 1 of ark:/99999/fk4c, one file holding
// "alpha", in a local store that f's AdminService reads, and returns the
// file's path.
func storeVersion(t *testing.T, f *fixture) string {
	t.Helper()
	storeRoot := t.TempDir()
	f.admin.Store = fixity.Location{Root: storeRoot}
	vdir := filepath.Join(storeRoot, "ark_99999_fk4c", "v1")
	p := filepath.Join(vdir, "producer", "a.txt")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("alpha"))
	mf, err := os.Create(filepath.Join(vdir, "manifest.checkm"))
	if err != nil {
		t.Fatal(err)
	}
	err = checkm.Write(mf, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256",
		HashValue: hex.EncodeToString(sum[:]), FileSize: 5, FileName: "producer/a.txt"}})
	mf.Close()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVerifyChecksAStoredVersionAndListsEachMismatch(t *testing.T) {
	f := newFixture(t, testToken)
	f.signIn()
	p := storeVersion(t, f)
	wantBody(t, f.act("/fsck", nil), "<h2>Fixity</h2>", `action="/verify"`)
	a := f.act("/verify", url.Values{"ark": {"ark:/99999/fk4c"}, "version": {"1"}})
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	wantBody(t, a, "Version 1 of ark:/99999/fk4c", "1 file(s), 5 bytes read", "<strong>every file matches</strong>")
	if err := os.WriteFile(p, []byte("ALPHA"), 0o644); err != nil {
		t.Fatal(err)
	}
	a = f.act("/verify", url.Values{"ark": {"ark:/99999/fk4c"}, "version": {"1"}})
	wantBody(t, a, "<strong>1 mismatch(es)</strong>", `<td data-label="File">producer/a.txt</td>`, "digest: sha256 of the stored file is",
		`<div class="scroll"><table class="list mismatches">`)
	// No version: the latest stored; not a number, not an ARK: refused.
	wantBody(t, f.act("/verify", url.Values{"ark": {"ark:/99999/fk4c"}, "version": {""}}), "Version 1 of ark:/99999/fk4c")
	if a := f.act("/verify", url.Values{"ark": {"ark:/99999/fk4c"}, "version": {"one"}}); a.code != http.StatusBadRequest {
		t.Errorf("version one: %d, want 400", a.code)
	}
	a = f.act("/verify", url.Values{"ark": {"not-an-ark"}})
	if a.code != http.StatusBadRequest {
		t.Errorf("not an ARK: %d, want 400", a.code)
	}
	wantBody(t, a, "is not an ARK: want ark:/NAAN/name")
}
