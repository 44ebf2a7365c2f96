package console

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserBulkRequeueAtDesktopAndNarrowWidths drives the jobs page in
// headless Chromium: a filter by message text lists the failed jobs, the
// bulk form shows the fields of the action chosen and counts the jobs
// first (nothing moves), the confirmation shows the count, the message
// and where the requeue resumes, and confirming requeues them all; the collections page counts
// them. At a phone's width neither page widens past the screen (their
// tables scroll in their box).
// Screenshots of both widths are kept as artifacts.
func TestBrowserBulkRequeueAtDesktopAndNarrowWidths(t *testing.T) {
	f := newFixture(t, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	_, jids := f.batch("jdoe", 4)
	for _, jid := range jids[:3] {
		f.fail(jid, "digest mismatch on a.txt")
	}
	dir := artifactDir(t)
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", filepath.Join(dir, name), len(png))
	}

	err := chromedp.Do(b,
		chromedp.EmulateViewport(desktopWidth, 900),
		chromedp.Navigate(f.srv.URL+"/jobs"),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`#job-filter`),
		chromedp.SendKeys(`#job-filter input[name="message_text"]`, "digest"),
		chromedp.Submit(`#job-filter input[name="message_text"]`),
		chromedp.WaitVisible(`#bulk-form`),
	)
	if err != nil {
		t.Fatalf("filtering the jobs: %v", err)
	}
	shoot("console-jobs-filter.png")
	// The form shows the fields of the action chosen, and only those.
	fields := func(verb string) []string {
		t.Helper()
		shown, err := chromedp.Run(b, chromedp.Evaluate[[]string](`(function(){var v=document.querySelector('#bulk-form select[name="verb"]');
			v.value=`+strconv.Quote(verb)+`; v.dispatchEvent(new Event("change"));
			return Array.from(document.querySelectorAll("#bulk-form [name]")).filter(e => e.type !== "hidden" && e.offsetParent !== null).map(e => e.name);})()`))
		if err != nil {
			t.Fatal(err)
		}
		return shown
	}
	for verb, want := range map[string]string{"requeue": "verb message requeue_state", "reprioritize": "verb priority",
		"delete": "verb force", "hold": "verb message"} {
		if got := strings.Join(fields(verb), " "); got != want {
			t.Errorf("the bulk form for %s shows %s, want %s", verb, got, want)
		}
	}
	fields("requeue")
	err = chromedp.Do(b,
		chromedp.SetValue(`#bulk-form select[name="verb"]`, "requeue"),
		chromedp.SendKeys(`#bulk-form input[name="message"]`, "fixed upstream"),
		chromedp.Click(`#bulk-form button`),
		chromedp.WaitVisible(`#bulk-count`),
	)
	if err != nil {
		t.Fatalf("counting: %v", err)
	}
	waitText(b, t, `#bulk-count`, "3 job(s) match. Requeue them?")
	// The confirmation says what the action will do besides its verb.
	settings, err := chromedp.Run(b, chromedp.Evaluate[string](`document.getElementById("bulk-settings").innerText.replace(/\s+/g, " ").trim()`))
	if err != nil || settings != "Message fixed upstream Requeue at after each job's last successful state" {
		t.Errorf("the confirmation's settings say %q (%v), want the message and where the requeue resumes", settings, err)
	}
	// The jobs it would take, each with its batch, local id and state.
	matched, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#bulk-matched tbody tr")).map(r => r.textContent.replace(/\s+/g, " ").trim())`))
	if err != nil {
		t.Fatal(err)
	}
	if len(matched) != 3 || !strings.Contains(matched[0], jids[0]) || !strings.Contains(matched[0], "loc-0") || !strings.HasSuffix(matched[0], "Failed") {
		t.Errorf("the confirmation lists %q; want each job with its batch, local id and state", matched)
	}
	for _, jid := range jids[:3] {
		if got := f.jobState(jid); got != "Failed" {
			t.Fatalf("after the count %s is %s", jid, got)
		}
	}
	shoot("console-bulk-confirm.png")
	err = chromedp.Do(b,
		chromedp.Click(`form[action="/bulk"] button.danger`),
		chromedp.WaitVisible(`#bulk-outcome`),
	)
	if err != nil {
		t.Fatalf("confirming: %v", err)
	}
	waitText(b, t, `#bulk-outcome`, "Requeue: 3 of 3 job(s) done.")
	outcomes, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#bulk-results td[data-label="Outcome"]')).map(td => td.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(outcomes, "|") != "done: now Downloading|done: now Downloading|done: now Downloading" {
		t.Errorf("the outcomes say %q; want each job done and where it went", outcomes)
	}
	for _, jid := range jids[:3] {
		if got := f.jobState(jid); got != "Downloading" {
			t.Errorf("after the requeue %s is %s, want Downloading", jid, got)
		}
	}
	shoot("console-bulk-done.png")
	err = chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/collections"), chromedp.WaitVisible(`#tally`))
	if err != nil {
		t.Fatal(err)
	}
	waitText(b, t, `#tally tbody td:last-child strong`, "4")
	shoot("console-collections.png")

	// A phone's width: the jobs list scrolls in its box, the page does not.
	err = chromedp.Do(b,
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(f.srv.URL+"/jobs?collection=demo_coll"),
		chromedp.WaitVisible(`#bulk-form`),
	)
	if err != nil {
		t.Fatal(err)
	}
	notWider := func(page string) {
		t.Helper()
		wide, err := chromedp.Run(b, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if wide {
			culprits, _ := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("body *")).filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth && !e.closest(".scroll table")).slice(0, 8).map(e => e.tagName + "." + e.className + " " + e.getBoundingClientRect().right)`))
			t.Errorf("at 390 px the %s page is wider than the screen: %v", page, culprits)
		}
	}
	notWider("jobs")
	noColumnOffScreen(b, t, "jobs", narrowWidth)
	shoot("console-jobs-narrow.png")
	if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/collections"), chromedp.WaitVisible(`#tally`)); err != nil {
		t.Fatal(err)
	}
	notWider("collections")
	noColumnOffScreen(b, t, "collections", narrowWidth)
	shoot("console-collections-narrow.png")
}
