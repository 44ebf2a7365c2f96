package console

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"google.golang.org/grpc/credentials/insecure"
)

// Widths the layout is checked at: a desktop window and a phone.
const (
	desktopWidth = 1400
	narrowWidth  = 390
)

// screenshot keeps a full-page screenshot of what b shows as an artifact.
func screenshot(b context.Context, t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// noOverflow fails the test when the page b shows is wider than the
// window (it would scroll sideways), naming the elements that stick out
// other than the content of a box that scrolls.
func noOverflow(b context.Context, t *testing.T, page string, width int) {
	t.Helper()
	sizes, err := chromedp.Run(b, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, window.innerWidth]`))
	if err != nil {
		t.Fatal(err)
	}
	if sizes[0] <= sizes[1] {
		return
	}
	culprits, _ := chromedp.Run(b, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("body *")).filter(e => e.getBoundingClientRect().right > window.innerWidth && !e.parentElement.closest(".scroll, .raw")).slice(0, 8).map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.replace(/ /g, ".") : "") + " right " + Math.round(e.getBoundingClientRect().right))`))
	t.Errorf("at %d px the %s page is %d px wide, wider than the window (%d px): %v", width, page, sizes[0], sizes[1], culprits)
}

// noColumnOffScreen fails the test when a cell of a list on the page b
// shows lies, even in part, outside the window (a column scrolled off or
// cut) or shows nothing of itself: at a phone's width every row is a card
// with every column in it, the status columns first of all. It returns
// the columns it checked, by their labels.
func noColumnOffScreen(b context.Context, t *testing.T, page string, width int) []string {
	t.Helper()
	type cell struct {
		Label, Table string
		Left, Right  float64
		Width        float64
	}
	cells, err := chromedp.Run(b, chromedp.Evaluate[[]cell](`Array.from(document.querySelectorAll("table.list td[data-label]"))
		.filter(td => td.textContent.trim() !== "" && td.offsetParent !== null)
		.map(td => { const r = td.getBoundingClientRect(); return {Label: td.getAttribute("data-label"),
			Table: (td.closest("table").id || td.closest("table").className), Left: r.left, Right: r.right, Width: r.width}; })`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range cells {
		seen[c.Label] = true
		if c.Left < 0 || c.Right > float64(width)+0.5 || c.Width <= 0 {
			t.Errorf("at %d px the %s page's %s column (table %s) lies at %.0f..%.0f px, off the screen", width, page, c.Label, c.Table, c.Left, c.Right)
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// TestBrowserJobPageFillsTheARKStoreAndInventoryLive: a job page open in
// Chromium while the storer and the recorder move the job on fills in the
// store and inventory manifests, the ARK and the metadata without a
// reload, at a desktop width and at a phone's, where it stays within the
// screen. Screenshots of both are kept.
func TestBrowserJobPageFillsTheARKStoreAndInventoryLive(t *testing.T) {
	f := newFixture(t, testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	_, jids := f.batch("jdoe", 2)

	err := chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/jobs/"+jids[0]),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`#ark`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	for i, width := range []int{desktopWidth, narrowWidth} {
		jid := jids[i]
		f.move(jid, "", queue.Estimating, queue.Provisioning, queue.Downloading)
		err := chromedp.Do(b,
			chromedp.EmulateViewport(int64(width), 900),
			chromedp.Navigate(f.srv.URL+"/jobs/"+jid),
			chromedp.WaitVisible(`#ark`),
			chromedp.Evaluate[chromedp.Void](`window.consoleMarker = "job page"`),
		)
		if err != nil {
			t.Fatal(err)
		}
		waitText(b, t, `[data-field="state"]`, "Downloading")
		waitText(b, t, `#ark`, "—")
		waitText(b, t, `#store`, "—")

		ark := fmt.Sprintf("ark:/99999/fk4live%d", i)
		f.move(jid, "", queue.Processing, queue.Storing, queue.Recording)
		queuetest.Move(t, f.q, jid, jobs.Change{To: queue.Notify, Message: "recorded",
			Identifiers: &v1.Identifiers{PrimaryId: ark, LocalId: []string{"loc-0"}},
			Metadata:    &v1.Metadata{Who: "Doe, J.", What: "a test object"}})
		waitText(b, t, `[data-field="state"]`, "Notify")
		waitText(b, t, `#ark`, ark)
		waitText(b, t, `#store`, "add file:///store/manifest.checkm")
		waitText(b, t, `#inventory`, "add version 1 file:///store/manifest.checkm")
		waitText(b, t, `[data-field="metadata.who"]`, "Doe, J.")
		shown, err := chromedp.Run(b, chromedp.Evaluate[[]bool](`["who", "where"].map(k => !document.querySelector('[data-if="metadata.' + k + '"]').hidden)`))
		if err != nil {
			t.Fatal(err)
		}
		if !shown[0] || shown[1] {
			t.Errorf("metadata rows shown (who, where): %v; want the one with a value only", shown)
		}
		if m := marker(b, t); m != "job page" {
			t.Fatalf("the job page was reloaded (marker %q)", m)
		}
		noOverflow(b, t, "job", width)
		screenshot(b, t, fmt.Sprintf("console-job-live-%d.png", width))
	}
}

// TestBrowserNoPageIsWiderThanTheScreen opens every page a signed-in
// operator sees, with long values in its tables, at a desktop width and at
// a phone's: none is wider than the window (wide tables scroll in their
// box). Screenshots of each are kept.
func TestBrowserNoPageIsWiderThanTheScreen(t *testing.T) {
	f := newFixtureWith(t, testToken, insecure.NewCredentials())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := browser(ctx, t)
	bid, jids := f.batch("jdoe", 3)
	long := "digest mismatch on " + strings.Repeat("a-very-long-file-name-without-spaces-", 6) + "txt"
	f.fail(jids[0], long)
	f.move(jids[1], "notified", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing,
		queue.Recording, queue.Notify, queue.Completed)
	reported, _ := f.reportedBatch()
	// A worker for the workers table; it takes jobs from Estimating,
	// which the jobs above have left.
	startReplica(t, f)
	// A damage for fsck to list: the pending job's state entry gone.
	conn := zkConn(t)
	entries, _, err := conn.Children(f.q.Paths().Root() + "/jobs/states/pending")
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %v %v", entries, err)
	}
	if err := conn.Delete(f.q.Paths().Root()+"/jobs/states/pending/"+entries[0], -1); err != nil {
		t.Fatal(err)
	}

	err = chromedp.Do(b,
		chromedp.Navigate(f.srv.URL+"/"),
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, testToken),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`#workers td`),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	pages := []struct {
		name, path, ready string
		status            []string // its status columns
	}{
		{"queue", "/", `#workers td[data-label="Stage"]`, []string{"Status", "State", "Control"}},
		{"batches", "/batches", `table.batches`, []string{"Status", "Jobs"}},
		{"batch", "/batches/" + bid, `#live-counts`, []string{"State"}},
		{"reported-batch", "/batches/" + reported, `#report-counts`, []string{"State"}},
		{"jobs", "/jobs", `table.jobs`, []string{"State"}},
		{"job", "/jobs/" + jids[0], `#history`, []string{"To", "Message"}},
		{"collections", "/collections", `#tally`, []string{"Failed", "All"}},
		{"collection", "/collections?collection=demo_coll", `#tally`, []string{"Failed", "All"}},
	}
	for _, width := range []int{desktopWidth, narrowWidth} {
		if err := chromedp.Do(b, chromedp.EmulateViewport(int64(width), 900)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			if err := chromedp.Do(b, chromedp.Navigate(f.srv.URL+p.path), chromedp.WaitVisible(p.ready)); err != nil {
				t.Fatalf("opening the %s page: %v", p.name, err)
			}
			noOverflow(b, t, p.name, width)
			if width == narrowWidth {
				labels := noColumnOffScreen(b, t, p.name, width)
				// The pages' status columns are among those seen whole.
				for _, status := range p.status {
					if !slices.Contains(labels, status) {
						t.Errorf("at %d px the %s page shows no %s column (it shows %v)", width, p.name, status, labels)
					}
				}
			}
			screenshot(b, t, fmt.Sprintf("console-%s-%d.png", p.name, width))
		}
		// Fsck's result lists the damage (below) in a table.
		err := chromedp.Do(b,
			chromedp.Navigate(f.srv.URL+"/fsck"),
			chromedp.WaitVisible(`form[action="/fsck"] button`),
			chromedp.Click(`form[action="/fsck"] button`),
			chromedp.WaitVisible(`table.damages`),
		)
		if err != nil {
			t.Fatalf("running fsck: %v", err)
		}
		noOverflow(b, t, "fsck", width)
		if width == narrowWidth {
			noColumnOffScreen(b, t, "fsck", width)
		}
		screenshot(b, t, fmt.Sprintf("console-fsck-%d.png", width))
	}
}
