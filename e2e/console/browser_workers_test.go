package console

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/credentials/insecure"
)

// TestBrowserPausesAndResumesAReplicaFromTheWorkersTable: in Chromium, a
// signed-in operator's open queue page follows a replica paused elsewhere
// (the script rebuilds its row, with the Resume control, without a
// reload); Resume there resumes it, and Pause pauses it again. The
// queue's cleanup asks before it runs. A screenshot at a phone's width is
// kept.
func TestBrowserPausesAndResumesAReplicaFromTheWorkersTable(t *testing.T) {
	f := newFixtureWith(t, testToken, insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	id, runner := startReplica(t, f)
	pause := `#workers form[action="` + workerURL(id) + `/pause"] button`
	resume := `#workers form[action="` + workerURL(id) + `/resume"] button`
	err := chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/"),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(pause),
		chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "queue page"`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	runner.Pause()
	if err := chromedp.Do(b, chromedp.WaitVisible(resume)); err != nil {
		t.Fatalf("waiting for the paused row: %v", err)
	}
	waitText(b, t, `#workers tr td:nth-child(4)`, "paused")
	if m := marker(b, t); m != "queue page" {
		t.Fatalf("the queue page was reloaded (marker %q)", m)
	}
	err = chromedp.Do(b, chromedp.Click(resume), chromedp.WaitVisible(`#flash`), chromedp.WaitVisible(pause))
	if err != nil {
		t.Fatalf("resuming: %v", err)
	}
	waitText(b, t, `#workers tr td:nth-child(4)`, "working")
	if w := workerState(t, f, id); w.GetPaused() {
		t.Fatalf("after Resume the registry says %v", w)
	}
	err = chromedp.Do(b, chromedp.Click(pause), chromedp.WaitVisible(`#flash`), chromedp.WaitVisible(resume))
	if err != nil {
		t.Fatalf("pausing: %v", err)
	}
	if w := workerState(t, f, id); !w.GetPaused() {
		t.Fatalf("after Pause the registry says %v", w)
	}
	// The cleanup asks first, naming what goes; accepted, it runs.
	asked := make(chan string, 1)
	go func() {
		for d, err := range chromedp.Events(b, page.JavascriptDialogOpening) {
			if err != nil {
				return
			}
			asked <- d.Message
			chromedp.Call(b, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			return
		}
	}()
	err = chromedp.Do(b, chromedp.Click(`form[action="/queue/cleanup"] button`), chromedp.WaitVisible(`#flash`))
	if err != nil {
		t.Fatalf("cleaning up: %v", err)
	}
	if q := <-asked; !strings.Contains(q, "Remove the completed batches older than the age given now") {
		t.Errorf("the cleanup asked %q", q)
	}
	waitText(b, t, `#flash`, "Cleaned up 0 completed batch(es) older than 24h0m0s, with 0 job(s).")
	err = chromedp.Do(b, chromedp.EmulateViewport(narrowWidth, 844), chromedp.Navigate(f.srv.URL+"/"), chromedp.WaitVisible(resume))
	if err != nil {
		t.Fatal(err)
	}
	// The controls say they act on the replica, and are on the screen.
	labels, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#workers form:not([hidden]) button")).map(e => e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(labels, ", ") != "Resume replica, Drain replica" {
		t.Errorf("the paused replica's controls are %q", labels)
	}
	noColumnOffScreen(b, t, "queue", narrowWidth)
	right, err := chromedp.Run(b, chromedp.Evaluate[float64](`Math.max(...Array.from(document.querySelectorAll("#workers form:not([hidden]) button")).map(e => e.getBoundingClientRect().right))`))
	if err != nil || right > narrowWidth {
		t.Errorf("the workers' controls reach %.0f px on a %d px screen (%v)", right, narrowWidth, err)
	}
	png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), "console-workers-narrow.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
