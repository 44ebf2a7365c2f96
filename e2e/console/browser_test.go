package console

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// chromium finds the browser the end-to-end test drives: INGESTQ_CHROMIUM,
// else Debian's chromium on PATH. Its absence fails the test: a console
// test that skips silently proves nothing.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("INGESTQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("Chromium is not installed: run `make deps` (it installs Debian's chromium package: apt-get install chromium), " +
		"or set INGESTQ_CHROMIUM to a Chrome or Chromium binary")
	return ""
}

// artifactDir is where the test keeps its screenshots: INGESTQ_ARTIFACTS_DIR
// when set (make test sets it), else the test's artifact directory (kept
// with go test -artifacts).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("INGESTQ_ARTIFACTS_DIR")
	if dir == "" {
		return t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts a headless Chromium for the test. The flags keep it off
// the network beyond the console: this machine has no outside network,
// and without them Chromium hangs on its own connection attempts.
func browser(ctx context.Context, t *testing.T) context.Context {
	t.Helper()
	// Chromium makes its singleton socket in TMPDIR, and a socket's path
	// must fit in 108 bytes: under a TMPDIR of some 60 characters (a CI
	// job's workspace) it would not start. It gets a short folder of its
	// own in /tmp.
	socketDir, err := os.MkdirTemp("/tmp", "iqc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(socketDir) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.Env("TMPDIR=" + socketDir),
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(desktopWidth, 1100),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-proxy-server", true),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	b, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	if err := chromedp.Do(b); err != nil {
		t.Fatalf("starting Chromium %s: %v", chromium(t), err)
	}
	return b
}

// waitText polls until the text of the element selected by sel is want,
// failing with what it showed last when ctx ends.
func waitText(ctx context.Context, t *testing.T, sel, want string) {
	t.Helper()
	js := fmt.Sprintf(`(function(){var e=document.querySelector(%q);return e?e.textContent.trim():"(no element)"})()`, sel)
	for {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		if got == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s shows %q, never %q", sel, got, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// marker reads window.consoleMarker: set once on a page, it survives
// only as long as the page is not reloaded.
func marker(ctx context.Context, t *testing.T) string {
	t.Helper()
	m, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(window.consoleMarker)`))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBrowserRequeuesAFailedJobAndSeesItMoveOn drives the console in
// headless Chromium like an operator: sign in, watch the queue page count
// a job that fails, follow the Failed bar to the job, requeue it with a
// click (accepting the confirmation), and watch the job page follow it to
// Completed as the stages (played by a consumer here) take it on, its
// history row by row, without a reload. Screenshots are kept as artifacts.
func TestBrowserRequeuesAFailedJobAndSeesItMoveOn(t *testing.T) {
	f := newFixture(t, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	_, jids := f.batch("jdoe", 1)
	jid := jids[0]
	f.move(jid, "", queue.Estimating, queue.Provisioning, queue.Downloading)

	// Every confirmation dialog is accepted, and its question kept.
	var mu sync.Mutex
	var questions []string
	dialogs := chromedp.Events(b, page.JavascriptDialogOpening)
	go func() {
		for d, err := range dialogs {
			if err != nil {
				return
			}
			mu.Lock()
			questions = append(questions, d.Message)
			mu.Unlock()
			if _, err := chromedp.Call(b, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				t.Errorf("accepting %q: %v", d.Message, err)
			}
		}
	}()

	// Sign in: the queue page sends to the sign-in page and back.
	err := chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/"),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`[data-field="counts.Downloading"]`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	waitText(b, t, `[data-field="counts.Downloading"]`, "1")
	waitText(b, t, `[data-field="counts.Failed"]`, "0")
	if err := chromedp.Do(b, chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "queue page"`)); err != nil {
		t.Fatal(err)
	}

	// The download fails; the open queue page counts it by itself.
	const failure = "digest mismatch on a.txt: expected md5 0cc175b9c0f1b6a831c399e269772661, got 92eb5ffee6ae2fec3ad71c777531578f"
	f.move(jid, failure, queue.Failed)
	waitText(b, t, `[data-field="counts.Failed"]`, "1")
	waitText(b, t, `[data-field="counts.Downloading"]`, "0")
	if m := marker(b, t); m != "queue page" {
		t.Fatalf("the queue page was reloaded (marker %q)", m)
	}

	// The stages, played here: the job is taken from Downloading once
	// the requeue puts it there, and moved on when the test says so.
	proceed := make(chan struct{})
	played := make(chan error, 1)
	go func() { played <- playStages(ctx, f.q, jid, proceed) }()

	// Follow the Failed bar to the job, then requeue it.
	err = chromedp.Do(b,
		chromedp.Click(`a[href="/jobs?state=Failed"]`),
		chromedp.WaitVisible(`a[href="/jobs/`+jid+`"]`),
	)
	if err != nil {
		t.Fatalf("opening the failed jobs: %v", err)
	}
	listed, err := chromedp.Run(b, chromedp.Text(`table.jobs tbody`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(listed, failure) {
		t.Fatalf("the failed job's row does not say why: %q", listed)
	}
	err = chromedp.Do(b,
		chromedp.Click(`a[href="/jobs/`+jid+`"]`),
		chromedp.WaitVisible(`#requeue button`),
		chromedp.Click(`#requeue button`),
		chromedp.WaitVisible(`#flash`),
	)
	if err != nil {
		t.Fatalf("requeueing: %v", err)
	}
	waitText(b, t, `#flash`, "Job "+jid+" requeued. It is now Downloading. Retry 1.")
	waitText(b, t, `[data-field="state"]`, "Downloading")
	waitText(b, t, `[data-field="retry_count"]`, "1")
	mu.Lock()
	asked := strings.Join(questions, "|")
	mu.Unlock()
	if asked != "Requeue job "+jid+"?" {
		t.Errorf("confirmation dialogs: %q", asked)
	}

	// The stages take it on; the job page follows without a reload, at a
	// phone's width now.
	if err := chromedp.Do(b, chromedp.EmulateViewport(narrowWidth, 844), chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "job page"`)); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	waitText(b, t, `[data-field="state"]`, "Completed")
	waitText(b, t, `[data-field="last_successful_status"]`, "Notify")
	waitText(b, t, `[data-field="message"]`, "notified")
	// The history follows: the requeue, then each step, to Completed.
	waitText(b, t, `#history tbody tr:last-child td[data-label="To"]`, "Completed")
	steps, err := chromedp.Run(b, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("#history tbody tr")).slice(-6).map(tr => tr.querySelector('[data-label="From"]').textContent + " → " + tr.querySelector('[data-label="To"]').textContent + ": " + tr.querySelector('[data-label="Message"]').textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Failed → Downloading: requeued by an operator to Downloading", "Downloading → Processing: downloaded",
		"Processing → Storing: processed", "Storing → Recording: stored", "Recording → Notify: recorded", "Notify → Completed: notified"}; strings.Join(steps, "|") != strings.Join(want, "|") {
		t.Errorf("the history's last rows: %q, want %q", steps, want)
	}
	if m := marker(b, t); m != "job page" {
		t.Fatalf("the job page was reloaded (marker %q)", m)
	}
	requeueHidden, err := chromedp.Run(b, chromedp.Evaluate[bool](`document.getElementById("requeue").hidden`))
	if err != nil {
		t.Fatal(err)
	}
	if !requeueHidden {
		t.Error("the requeue form is still offered for a completed job")
	}
	noAction, err := chromedp.Run(b, chromedp.Evaluate[bool](`!document.querySelector('p.note[data-if="no_action"]').hidden`))
	if err != nil {
		t.Fatal(err)
	}
	if !noAction {
		t.Error("the completed job's page does not say that no action applies")
	}
	if err := <-played; err != nil {
		t.Fatalf("stages: %v", err)
	}
	noOverflow(b, t, "job", narrowWidth)
	if err := chromedp.Do(b, chromedp.EmulateViewport(desktopWidth, 1100)); err != nil {
		t.Fatal(err)
	}

	dir := artifactDir(t)
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
	shoot("console-job-requeued.png")
	if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/"), chromedp.WaitVisible(`[data-field="counts.Completed"]`)); err != nil {
		t.Fatal(err)
	}
	waitText(b, t, `[data-field="counts.Completed"]`, "1")
	shoot("console-queue.png")
}

// playStages stands in for the downloader, processor, recorder and
// notifier: it takes the job from Downloading as a downloader would (a
// consumer of that state), holds it until proceed, then moves it on to
// Completed one step at a time.
func playStages(ctx context.Context, q *session.Session, jid string, proceed <-chan struct{}) error {
	cl, err := jobs.New(q).NewConsumer(queue.Downloading, jobs.ConsumerOptions{Spread: 1}).Next(ctx)
	if err != nil {
		return fmt.Errorf("taking a job from Downloading: %w", err)
	}
	if cl.ID() != jid {
		cl.Release(context.WithoutCancel(ctx))
		return fmt.Errorf("took %s from Downloading, want %s", cl.ID(), jid)
	}
	select {
	case <-proceed:
	case <-ctx.Done():
		cl.Release(context.WithoutCancel(ctx))
		return ctx.Err()
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Processing, Message: "downloaded"}); err != nil {
		return err
	}
	for _, step := range []struct {
		to  queue.JobState
		msg string
	}{{queue.Storing, "processed"}, {queue.Recording, "stored"}, {queue.Notify, "recorded"}, {queue.Completed, "notified"}} {
		cl, err := jobs.New(q).ClaimJob(ctx, jid)
		if err != nil {
			return err
		}
		if err := cl.Commit(ctx, jobs.Change{To: step.to, Message: step.msg}); err != nil {
			return err
		}
	}
	return nil
}
