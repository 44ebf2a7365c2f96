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
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// bigDownload is the progress a downloader reports of a 50 GB file: done
// bytes, at 12.5 MB/s, its bytes last moved at moved.
func bigDownload(done int64, moved time.Time) *v1.Progress {
	const total, rate = 50_000_000_000, 12_500_000
	return &v1.Progress{Phase: "downloading", BytesDone: done, BytesExpected: total, BytesPerSecond: rate,
		Remaining: durationpb.New(time.Duration((total-done)/rate) * time.Second), Resumes: 3,
		Updated: timestamppb.Now(), Moved: timestamppb.New(moved)}
}

// TestBrowserADownloadsProgressShowsOnItsJobPageAndInTheJobsList: a
// downloader replica reports a big download moving and another stuck;
// the job page shows the moving one's bar and figures and follows them
// without a reload, the stuck one says so, and the jobs list shows both
// bars, at a desktop width and at a phone's, within the screen.
// Screenshots of both are kept.
func TestBrowserADownloadsProgressShowsOnItsJobPageAndInTheJobsList(t *testing.T) {
	f := newFixture(t, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	_, jids := f.batch("jdoe", 3)
	for _, jid := range jids[:2] {
		f.move(jid, "", queue.Estimating, queue.Provisioning, queue.Downloading)
	}
	moving := &v1.InFlightJob{JobId: jids[0], Since: timestamppb.New(time.Now().Add(-time.Hour)), Progress: bigDownload(7_000_000_000, time.Now())}
	stuck := &v1.InFlightJob{JobId: jids[1], Since: timestamppb.New(time.Now().Add(-time.Hour)),
		Progress: bigDownload(3_000_000_000, time.Now().Add(-20*time.Minute))}
	stuck.Progress.BytesPerSecond, stuck.Progress.Remaining = 0, nil
	reg, err := jobs.New(f.q).RegisterWorker(f.ctx, &v1.WorkerInfo{Id: "downloader-test-1", Host: "h", Service: "downloader",
		Stage: "Downloading", InFlight: []*v1.InFlightJob{moving, stuck}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(f.ctx)
	report := func(done int64) {
		p := bigDownload(done, time.Now())
		reg.Update(func(w *v1.WorkerInfo) {
			w.InFlight = []*v1.InFlightJob{{JobId: jids[0], Since: moving.Since, Progress: proto.Clone(p).(*v1.Progress)}, stuck}
		})
	}

	err = chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/jobs/"+jids[0]),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`#transfer`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	for _, width := range []int{desktopWidth, narrowWidth} {
		report(7_000_000_000)
		err := chromedp.Do(b,
			chromedp.EmulateViewport(int64(width), 900),
			chromedp.Navigate(f.srv.URL+"/jobs/"+jids[0]),
			chromedp.WaitVisible(`#transfer`),
			chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "job page"`),
		)
		if err != nil {
			t.Fatal(err)
		}
		waitText(b, t, `#transfer-summary`, "7.0 GB of 50.0 GB (14%) at 12.5 MB/s, about 57 min left")
		waitText(b, t, `[data-field="progress.detail"]`, "Downloading; resumed 3 times where a transfer stopped")
		if w := barWidth(b, t, `#transfer rect`); w != "14" {
			t.Errorf("the bar is %q wide, want 14", w)
		}
		// The replica reports more bytes: the page follows.
		report(20_000_000_000)
		waitText(b, t, `#transfer-summary`, "20.0 GB of 50.0 GB (40%) at 12.5 MB/s, about 40 min left")
		if w := barWidth(b, t, `#transfer rect`); w != "40" {
			t.Errorf("after the update the bar is %q wide, want 40", w)
		}
		if m := marker(b, t); m != "job page" {
			t.Fatalf("the job page was reloaded (marker %q)", m)
		}
		if hidden(b, t, `#transfer p.stuck`) != true {
			t.Error("a moving download is said to be stuck")
		}
		noOverflow(b, t, "job", width)
		screenshot(b, t, fmt.Sprintf("console-job-progress-%d.png", width))

		// The stuck one says so.
		if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/jobs/"+jids[1]), chromedp.WaitVisible(`#transfer`)); err != nil {
			t.Fatal(err)
		}
		waitText(b, t, `[data-field="progress.detail"]`, "Downloading; resumed 3 times where a transfer stopped; no bytes for 20 min")
		if hidden(b, t, `#transfer p.stuck`) != false {
			t.Error("a download whose bytes have not moved for 20 minutes is not said to be stuck")
		}

		// The jobs list: a bar under each downloading job's state.
		if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+"/jobs?state=Downloading"), chromedp.WaitVisible(`table.jobs .transfer-cell`)); err != nil {
			t.Fatal(err)
		}
		cells, err := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table.jobs .transfer-cell small")).map(e => e.textContent.trim())`))
		if err != nil {
			t.Fatal(err)
		}
		if len(cells) != 2 || !strings.HasPrefix(cells[0], "20.0 GB of 50.0 GB (40%)") || !strings.Contains(cells[1], "no bytes for 20 min") {
			t.Errorf("the jobs list's progress: %q", cells)
		}
		noOverflow(b, t, "jobs", width)
		if width == narrowWidth {
			noColumnOffScreen(b, t, "jobs", width)
		}
		screenshot(b, t, fmt.Sprintf("console-jobs-progress-%d.png", width))
	}
}

// barWidth is the width attribute of the SVG element sel.
func barWidth(b context.Context, t *testing.T, sel string) string {
	t.Helper()
	w, err := chromedp.Run(b, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).getAttribute("width")`, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// hidden reports whether the element sel is hidden.
func hidden(b context.Context, t *testing.T, sel string) bool {
	t.Helper()
	h, err := chromedp.Run(b, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).hidden`, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
