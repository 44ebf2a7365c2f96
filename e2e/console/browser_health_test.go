package console

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// acceptDialogs accepts every confirmation dialog b opens.
func acceptDialogs(b context.Context) {
	go func() {
		for _, err := range chromedp.Events(b, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			chromedp.Call(b, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
}

// visible reports whether the element sel selects is shown.
func visible(b context.Context, t *testing.T, sel string) bool {
	t.Helper()
	shown, err := chromedp.Run(b, chromedp.Evaluate[bool](fmt.Sprintf(`(function(){var e=document.querySelector(%q);return !!e && e.offsetParent !== null})()`, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return shown
}

// waitVisible polls until the element sel selects is shown (or hidden).
func waitShown(ctx context.Context, t *testing.T, sel string, want bool) {
	t.Helper()
	for visible(ctx, t, sel) != want {
		select {
		case <-ctx.Done():
			t.Fatalf("%s is never %s", sel, map[bool]string{true: "shown", false: "hidden"}[want])
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestBrowserQueuePageTellsHealthAtAGlance opens the queue page in
// Chromium at a desktop width and a phone's: the Downloading stage, whose
// only worker is paused while jobs wait, is flagged stalled (badge, a line
// saying so, its row), so the header says stalled, not running; the bars
// of the few jobs at work are not flattened by many completed ones; the
// batches are counted per state; pausing the queue raises a banner and
// the rows of workers that are not paused themselves say they wait for
// the queue, without a reload; the figures' time is UTC. Every cell of
// its tables is on the screen at the phone's width. Screenshots of both
// are kept.
func TestBrowserQueuePageTellsHealthAtAGlance(t *testing.T) {
	f := newFixtureWith(t, testToken, insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	acceptDialogs(b)
	_, jids := f.batch("jdoe", 23)
	for _, jid := range jids[:20] {
		f.move(jid, "notified", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing,
			queue.Recording, queue.Notify, queue.Completed)
	}
	for _, jid := range jids[20:22] {
		f.move(jid, "", queue.Estimating, queue.Provisioning, queue.Downloading)
	}
	f.heldBatch()
	// A working estimator replica, whose row the queue's pause changes.
	estimator, _ := startReplica(t, f)
	// The only downloader, paused by an operator: the jobs in Downloading
	// wait with no one to take them.
	reg, err := jobs.New(f.q).RegisterWorker(f.ctx, &v1.WorkerInfo{Id: "downloader-test-1", Host: "host-d", Service: "downloader",
		Stage: "Downloading", Version: "v1", Concurrency: 2, Paused: true, Heartbeat: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(f.ctx)

	err = chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/"),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`#stages`),
		chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "queue page"`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	for _, width := range []int{desktopWidth, narrowWidth} {
		if err := chromedp.Do(b, chromedp.EmulateViewport(int64(width), 900)); err != nil {
			t.Fatal(err)
		}
		if !visible(b, t, `h1 .badge.stalled`) || visible(b, t, `h1 .badge.running`) {
			t.Errorf("at %d px the header does not say stalled (and not running)", width)
		}
		waitText(b, t, `[data-field="stages.Downloading.status"]`, "stalled")
		waitText(b, t, `[data-field="stages.Estimating.status"]`, "idle")
		stalled, err := chromedp.Run(b, chromedp.Evaluate[string](`(Array.from(document.querySelectorAll("#attention li.a-stalled")).find(li => li.textContent.indexOf(" in Downloading ") >= 0) || {textContent: "(none)"}).textContent`))
		if err != nil {
			t.Fatal(err)
		}
		if want := "Stalled: 2 job(s) wait in Downloading and none of its 1 replica(s) takes them (1 paused): resume one (StageService/Resume, or the console's workers table), or start one. Resume a replica in the workers table"; stalled != want ||
			!visible(b, t, `#attention li.a-stalled a[href="#workers"]`) {
			t.Errorf("at %d px the stalled stage's line says %q, want %q", width, stalled, want)
		}
		waitText(b, t, `[data-field="batches.Held"]`, "1")
		waitText(b, t, `[data-field="batches.Processing"]`, "1")
		// 2 jobs downloading beside 20 completed: the live states' bars
		// are scaled among themselves.
		bars, err := chromedp.Run(b, chromedp.Evaluate[[]string](`["Downloading", "Completed", "Pending"].map(s => document.querySelector('[data-bar="bars.' + s + '"]').getAttribute("width"))`))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(bars, " ") != "100 100 50" {
			t.Errorf("bar widths of Downloading, Completed, Pending: %v; want 100 100 50", bars)
		}
		if width == narrowWidth {
			noOverflow(b, t, "queue", width)
			noColumnOffScreen(b, t, "queue", width)
		}
		screenshot(b, t, fmt.Sprintf("console-health-%d.png", width))
	}

	// The queue paused: a banner, and the working replica's row says it
	// waits for the queue; the paused downloader's says paused.
	if err := chromedp.Do(b, chromedp.EmulateViewport(desktopWidth, 900), chromedp.Click(`form[action="/queue/pause"] button`),
		chromedp.WaitVisible(`#flash`)); err != nil {
		t.Fatalf("pausing the queue: %v", err)
	}
	waitShown(b, t, `#paused-banner`, true)
	if !visible(b, t, `h1 .badge.paused`) || visible(b, t, `h1 .badge.running`) {
		t.Error("the paused queue's header does not say paused")
	}
	rowState := func(id string) string {
		t.Helper()
		js := fmt.Sprintf(`(function(){var r=Array.from(document.querySelectorAll("#workers tr")).find(r=>r.textContent.indexOf(%q)>=0);return r?r.querySelector('[data-label="State"]').textContent:"(no row)"})()`, id)
		got, err := chromedp.Run(b, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := rowState(estimator); got != "waiting: the queue is paused" {
		t.Errorf("the working replica's row says %q under a paused queue", got)
	}
	if got := rowState("downloader-test-1"); got != "paused" {
		t.Errorf("the paused replica's row says %q", got)
	}
	screenshot(b, t, "console-health-paused-1400.png")

	// Unpaused elsewhere (grpcurl, another console): the open page follows.
	if err := chromedp.Do(b, chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "paused page"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.UnpauseQueue(f.ctx, &v1.UnpauseQueueRequest{}); err != nil {
		t.Fatal(err)
	}
	waitShown(b, t, `#paused-banner`, false)
	for rowState(estimator) != "working" {
		select {
		case <-ctx.Done():
			t.Fatalf("the replica's row still says %q after the unpause", rowState(estimator))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if m := marker(b, t); m != "paused page" {
		t.Errorf("the queue page was reloaded (marker %q)", m)
	}
	status, err := chromedp.Run(b, chromedp.Text(`#live-status`))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^live: updated \d\d:\d\d:\d\d UTC$`).MatchString(status) {
		t.Errorf("the footer says %q; want the time of the last update in UTC, as the page's own", status)
	}
}
