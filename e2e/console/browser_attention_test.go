package console

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// phoneHeight is the height of the phone's screen the first screen is
// judged at (390 × 844).
const phoneHeight = 844

// signInAt signs b in through the sign-in page that path sends to.
func signInAt(b context.Context, t *testing.T, f *fixture, path, ready string) {
	t.Helper()
	err := chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+path),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(ready),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
}

// attentionShown is the text of each item of the attention strip that
// lies wholly on the first screen (the page scrolled to its top).
func attentionShown(b context.Context, t *testing.T) []string {
	t.Helper()
	items, err := chromedp.Run(b, chromedp.Evaluate[[]string](`(function(){window.scrollTo(0, 0);
		return Array.from(document.querySelectorAll("#attention li")).filter(li => { const r = li.getBoundingClientRect();
			return li.offsetParent !== null && r.top >= 0 && r.bottom <= window.innerHeight; }).map(li => li.textContent.trim());})()`))
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestBrowserWhatNeedsAttentionIsOnTheFirstScreenAndStays opens the queue
// page in Chromium, at a desktop width and a phone's, with a stage stalled
// (jobs wait in Downloading, its one replica paused), a collection held
// and a batch failed: the first screen shows all three in the "needs
// attention" strip, each with its link to what to do, the header says so
// rather than "running", and the strip stays the same after the page's
// live update.
func TestBrowserWhatNeedsAttentionIsOnTheFirstScreenAndStays(t *testing.T) {
	f := newFixture(t, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	_, jids := f.batch("jdoe", 2)
	for _, jid := range jids {
		f.move(jid, "", queue.Estimating, queue.Provisioning, queue.Downloading)
	}
	reg, err := jobs.New(f.q).RegisterWorker(f.ctx, &v1.WorkerInfo{Id: "downloader-test-1", Host: "host-d", Service: "downloader",
		Stage: "Downloading", Version: "v1", Concurrency: 2, Paused: true, Heartbeat: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(f.ctx)
	if _, err := f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	f.failedBatch()

	want := []struct{ kind, text, href string }{
		{"a-stalled", "Stalled: 2 job(s) wait in Downloading", "#workers"},
		{"a-held-collection", "Held collection demo_coll", "#held"},
		{"a-failed-batches", "1 batch(es) failed", "/batches?status=Failed"},
	}
	check := func(width int, when string) {
		t.Helper()
		shown := attentionShown(b, t)
		for _, w := range want {
			found := false
			for _, s := range shown {
				found = found || strings.HasPrefix(s, w.text)
			}
			if !found {
				t.Errorf("at %d px, %s, the first screen's strip lacks %q: it shows %q", width, when, w.text, shown)
			}
			if !visible(b, t, fmt.Sprintf(`#attention li.%s a[href=%q]`, w.kind, w.href)) {
				t.Errorf("at %d px, %s, the %s item has no link to %s", width, when, w.kind, w.href)
			}
		}
		if !visible(b, t, `h1 .badge.attention`) || visible(b, t, `h1 .badge.running`) {
			t.Errorf("at %d px, %s, the header does not say it needs attention (or says running)", width, when)
		}
	}
	signInAt(b, t, f, "/", `#attention`)
	for _, size := range []struct{ width, height int }{{desktopWidth, 900}, {narrowWidth, phoneHeight}} {
		err := chromedp.Do(b, chromedp.EmulateViewport(int64(size.width), int64(size.height)), chromedp.Navigate(f.srv.URL+"/"),
			chromedp.WaitVisible(`#attention`), chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "queue page"`))
		if err != nil {
			t.Fatal(err)
		}
		check(size.width, "as served")
		// The live update has rebuilt the strip from its JSON.
		for {
			updated, err := chromedp.Run(b, chromedp.Evaluate[bool](
				`document.getElementById("attention").hasAttribute("data-key") && document.getElementById("live-status").textContent.indexOf("live: updated") === 0`))
			if err != nil {
				t.Fatal(err)
			}
			if updated {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the queue page never updated itself")
			case <-time.After(100 * time.Millisecond):
			}
		}
		check(size.width, "after the live update")
		if m := marker(b, t); m != "queue page" {
			t.Fatalf("the queue page was reloaded (marker %q)", m)
		}
		screenshot(b, t, fmt.Sprintf("console-attention-%d.png", size.width))
	}

	// What is dealt with leaves the strip without a reload.
	if _, err := f.admin.ReleaseCollection(f.ctx, &v1.ReleaseCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	waitShown(b, t, `#attention li.a-held-collection`, false)
}

// TestBrowserEveryButtonOfferedIsOneTheAdminServiceTakes opens, in
// Chromium, the page of every batch and job of a queue with items the
// admin methods refuse some actions on (a held batch and a held job of a
// held collection, a failed batch with nothing new since its report, one
// that never had a job), then the queue page, and clicks every action
// button each offers, one after the other, accepting every confirmation:
// none is answered FailedPrecondition. The actions withheld say why
// beside where their button would be.
func TestBrowserEveryButtonOfferedIsOneTheAdminServiceTakes(t *testing.T) {
	f := newFixtureWith(t, testToken, insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	acceptDialogs(b)

	heldBid := f.heldBatch()
	heldJobBid, held := f.batch("jdoe", 1)
	if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: held[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.HoldCollection(f.ctx, &v1.HoldCollectionRequest{Collection: "demo_coll"}); err != nil {
		t.Fatal(err)
	}
	reported, _ := f.reportedBatch()
	jobless, err := batches.New(f.q).CreateBatch(f.ctx, &v1.Submission{ProfileName: "demo", Submitter: "jdoe",
		PayloadUrl: "http://127.0.0.1/gone.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, Collection: "demo_coll"})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := batches.New(f.q).ClaimBatch(f.ctx, jobless)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchProcessing, KeepLock: true}, {To: queue.BatchReporting, KeepLock: true},
		{To: queue.BatchFailed, Message: "failed: fetching payload http://127.0.0.1/gone.checkm: 404 Not Found"}} {
		if err := bc.Commit(f.ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	mixedBid, mixed := f.batch("jdoe", 4)
	f.fail(mixed[0], "digest mismatch")
	f.move(mixed[1], "notified", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing,
		queue.Recording, queue.Notify, queue.Completed)
	f.move(mixed[2], "", queue.Estimating, queue.Provisioning, queue.Downloading)
	// mixed[3] stays Pending. A replica for the workers' controls; it
	// takes jobs from Estimating, which the jobs above have left.
	startReplica(t, f)

	signInAt(b, t, f, "/", `#attention`)

	// Withheld, with the reason beside: releasing the held batch and the
	// held job, update-reporting the batch with nothing new and the one
	// without jobs.
	for _, width := range []int{narrowWidth, desktopWidth} {
		if err := chromedp.Do(b, chromedp.EmulateViewport(int64(width), 900)); err != nil {
			t.Fatal(err)
		}
		for _, w := range []struct{ page, action, reason string }{
			{"/batches/" + heldBid, "release", "its collection demo_coll is held: release the collection first"},
			{"/jobs/" + held[0], "release", "its collection demo_coll is held: release the collection first"},
			{"/batches/" + reported, "update-report", "has nothing new to report"},
			{"/batches/" + jobless, "update-report", "has no job"},
		} {
			if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+w.page), chromedp.WaitReady(`footer`)); err != nil {
				t.Fatal(err)
			}
			if visible(b, t, fmt.Sprintf(`form[data-action=%q]`, w.action)) {
				t.Errorf("at %d px %s offers %s", width, w.page, w.action)
			}
			reason, err := chromedp.Run(b, chromedp.Evaluate[string](fmt.Sprintf(
				`(function(){var p=document.querySelector('p[data-reason=%q]');return p && p.offsetParent !== null ? p.textContent : "(not shown)"})()`, w.action)))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(reason, w.reason) {
				t.Errorf("at %d px %s says beside %s %q; want it to say %q", width, w.page, w.action, reason, w.reason)
			}
			noOverflow(b, t, w.page, width)
		}
	}

	pages := []string{"/batches/" + heldBid, "/batches/" + reported, "/batches/" + jobless}
	for _, jid := range append(held, mixed...) {
		pages = append(pages, "/jobs/"+jid)
	}
	pages = append(pages, "/batches/"+heldJobBid, "/batches/"+mixedBid, "/")
	clicked := 0
	for _, p := range pages {
		tried := map[string]bool{}
		for range 20 {
			if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+p), chromedp.WaitReady(`footer`)); err != nil {
				t.Fatal(err)
			}
			// The first action button shown that was not clicked yet on
			// this page; a form's empty required field gets a value.
			next, err := chromedp.Run(b, chromedp.Evaluate[string](fmt.Sprintf(`(function(){
				var tried = %s;
				var forms = Array.from(document.querySelectorAll("main form[method=post]")).filter(f => f.offsetParent !== null);
				for (var i = 0; i < forms.length; i++) {
					var b = forms[i].querySelector("button");
					var item = forms[i].querySelector("input[name=collection][type=hidden]");
					var key = forms[i].getAttribute("action") + " " + b.textContent.trim() + (item ? " " + item.value : "");
					if (tried.indexOf(key) >= 0) { continue; }
					forms[i].querySelectorAll("input[required]").forEach(function (inp) { if (!inp.value) { inp.value = "other_coll"; } });
					b.setAttribute("data-next", "");
					window.consoleMarker = "before the click";
					return key;
				}
				return "";
			})()`, jsList(tried))))
			if err != nil {
				t.Fatal(err)
			}
			if next == "" {
				break
			}
			tried[next] = true
			clicked++
			answer := clickAndRead(b, t)
			if strings.HasPrefix(answer, "Confirm") {
				if err := chromedp.Do(b, chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "before the click"; document.querySelector("main form button").setAttribute("data-next", "")`)); err != nil {
					t.Fatal(err)
				}
				answer = clickAndRead(b, t)
			}
			if strings.Contains(answer, "FailedPrecondition") || strings.Contains(answer, "Conflict") {
				t.Errorf("%s: clicking %q was refused:\n%s", p, next, answer)
			}
		}
	}
	if clicked < 15 {
		t.Errorf("only %d buttons were clicked: the pages offered fewer actions than they should", clicked)
	}
}

// clickAndRead clicks the button marked data-next and returns the text of
// the page the browser lands on.
func clickAndRead(b context.Context, t *testing.T) string {
	t.Helper()
	if err := chromedp.Do(b, chromedp.Click(`[data-next]`)); err != nil {
		t.Fatal(err)
	}
	for {
		text, err := chromedp.Run(b, chromedp.Evaluate[string](
			`window.consoleMarker === undefined && document.readyState === "complete" && document.querySelector("footer") ? document.querySelector("main").innerText : ""`))
		if err == nil && text != "" {
			return text
		}
		select {
		case <-b.Done():
			t.Fatal("no page came after the click")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// jsList is a JavaScript array of the keys of set.
func jsList(set map[string]bool) string {
	var out []string
	for k := range set {
		out = append(out, fmt.Sprintf("%q", k))
	}
	return "[" + strings.Join(out, ",") + "]"
}
