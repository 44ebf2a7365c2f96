package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestBrowserListsNameTheARKAndAJobIsVerifiedFromItsPage drives Chromium
// at a desktop width and a phone's: the job lists have an ARK column; the
// jobs filter's "Failed in" offers only the states a job can fail in; a
// stored job's page has a Verify button that checks its version's fixity
// (the result page says every file matches); the collections page counts
// the days the batcher keeps completed batches and says so. Every cell of
// their tables is on the screen at the phone's width; screenshots of both
// widths are kept.
func TestBrowserListsNameTheARKAndAJobIsVerifiedFromItsPage(t *testing.T) {
	f := newFixture(t, testToken)
	f.admin.Retention = 7 * 24 * time.Hour
	storeVersion(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	acceptDialogs(b)
	bid, jids := f.batch("jdoe", 2)
	f.move(jids[0], "", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording)
	queuetest.Move(t, f.q, jids[0], jobs.Change{To: queue.Notify, Message: "recorded",
		Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4c", LocalId: []string{"loc-0"}}})
	f.fail(jids[1], "digest mismatch")

	err := chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/jobs?batch="+bid),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`table.jobs`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	for _, width := range []int{desktopWidth, narrowWidth} {
		if err := chromedp.Do(b, chromedp.EmulateViewport(int64(width), 900), chromedp.Navigate(f.srv.URL+"/jobs?batch="+bid),
			chromedp.WaitVisible(`table.jobs`)); err != nil {
			t.Fatal(err)
		}
		arks, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('table.jobs td[data-label="ARK"]')).map(td => td.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(arks, " ") != "ark:/99999/fk4c —" {
			t.Errorf("at %d px the ARK column shows %v", width, arks)
		}
		failedIn, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('select[name="failing_stage"] option')).map(o => o.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(failedIn, " "); got != "any Pending Estimating Provisioning Downloading Processing Storing Recording Notify" {
			t.Errorf("Failed in offers %s", got)
		}
		if width == narrowWidth {
			noColumnOffScreen(b, t, "jobs", width)
		}
		screenshot(b, t, fmt.Sprintf("console-jobs-ark-%d.png", width))

		// The job's page: Verify checks its version.
		err = chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/jobs/"+jids[0]), chromedp.WaitVisible(`#verify button`))
		if err != nil {
			t.Fatal(err)
		}
		waitText(b, t, `#verify button`, "Verify version 1 of ark:/99999/fk4c")
		if err := chromedp.Do(b, chromedp.Click(`#verify button`), chromedp.WaitVisible(`main h3`)); err != nil {
			t.Fatalf("verifying: %v", err)
		}
		waitText(b, t, `main h3`, "Version 1 of ark:/99999/fk4c")
		verdict, err := chromedp.Run(b, chromedp.Text(`main h3 + p strong`))
		if err != nil || verdict != "every file matches" {
			t.Errorf("the verdict %q, %v", verdict, err)
		}
		screenshot(b, t, fmt.Sprintf("console-verify-%d.png", width))

		// The daily counts cover the retention, and say so.
		if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/collections"), chromedp.WaitVisible(`#per-day`)); err != nil {
			t.Fatal(err)
		}
		days, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("#per-day tbody tr").length`))
		if err != nil || days != 7 {
			t.Errorf("%d days counted, %v; want the 7 of the retention", days, err)
		}
		note, err := chromedp.Run(b, chromedp.Text(`#per-day-note`))
		if err != nil || note != "The last 7 days: the batcher cleans completed batches up after 7 days, and their jobs go with them." {
			t.Errorf("the daily counts' note %q, %v", note, err)
		}
		if width == narrowWidth {
			noColumnOffScreen(b, t, "collections", width)
		}
		screenshot(b, t, fmt.Sprintf("console-collections-days-%d.png", width))
	}
}

// TestBrowserListsKeepARKsOnOneLineAndNumbersUnderTheirHeaders: at a
// desktop width, beside a long message, a job list's ARKs stay on one line
// and each numeric column's header sits over its numbers, right-aligned
// as they are; a batch's page lists its jobs without a column repeating
// the batch's id.
func TestBrowserListsKeepARKsOnOneLineAndNumbersUnderTheirHeaders(t *testing.T) {
	f := newFixture(t, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	bid, jids := f.batch("jdoe", 2)
	f.move(jids[0], "", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording)
	queuetest.Move(t, f.q, jids[0], jobs.Change{To: queue.Notify, Message: "recorded " + strings.Repeat("with a long story to tell ", 12),
		Identifiers: &v1.Identifiers{PrimaryId: "ark:/13030/m5z60m5kqz3x", LocalId: []string{"loc-0"}}})
	f.fail(jids[1], "digest mismatch on "+strings.Repeat("a-very-long-file-name-", 8)+"txt")
	signInAt(b, t, f, "/jobs?batch="+bid, `table.jobs`)
	if err := chromedp.Do(b, chromedp.EmulateViewport(desktopWidth, 900)); err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"/jobs?batch=" + bid, "/batches/" + bid} {
		if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+page), chromedp.WaitVisible(`table.jobs`)); err != nil {
			t.Fatal(err)
		}
		lines, err := chromedp.Run(b, chromedp.Evaluate[float64](`(function(){var td=document.querySelector("table.jobs td.ark");
			var r=document.createRange(); r.selectNodeContents(td); return r.getClientRects().length;})()`))
		if err != nil || lines != 1 {
			t.Errorf("%s: the ARK takes %v line(s) (%v), want 1", page, lines, err)
		}
		// Each numeric header's right edge is its numbers' (both right-aligned in one column).
		off, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table.jobs thead th")).map((th, i) => {
			var td = document.querySelector("table.jobs tbody tr td:nth-child(" + (i + 1) + ")");
			if (!td || !td.classList.contains("num")) { return ""; }
			var text = r => { var g = document.createRange(); g.selectNodeContents(r); var rs = g.getClientRects(); return rs[rs.length - 1].right; };
			return Math.abs(text(th) - text(td)) > 1 || getComputedStyle(th).textAlign !== "right" ? th.textContent : "";
		}).filter(s => s)`))
		if err != nil || len(off) != 0 {
			t.Errorf("%s: numeric headers not over their numbers: %v (%v)", page, off, err)
		}
		headers, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table.jobs thead th")).map(th => th.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if inBatch := strings.HasPrefix(page, "/batches/"); inBatch == slices.Contains(headers, "Batch") {
			t.Errorf("%s: the job list's columns %v (a batch's page repeats no batch id; the jobs list names each job's batch)", page, headers)
		}
		screenshot(b, t, "console-lists-"+strings.Trim(strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(page), "-")+".png")
	}
}
