package batchrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/waittest"
)

// rowsManifest is a manifest of manifests of n rows, listed in the order
// given (nil: 0..n-1); row i names obj<i>.checkm.
func rowsManifest(n int, order []int) string {
	if order == nil {
		for i := range n {
			order = append(order, i)
		}
	}
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n" + batchFields)
	for _, i := range order {
		fmt.Fprintf(&b, "{{base}}/obj%04d.checkm | | | | | obj%04d.checkm | | loc%04d | | |\n", i, i, i)
	}
	return b.String() + "#%eof\n"
}

// reversed is n-1 … 0.
func reversed(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = n - 1 - i
	}
	return out
}

// served is the document the depositor serves at path, as served.
func (d *depositor) served(path string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.docs[path]
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// startBatcher runs a batcher with cfg on a session of its own; crash ends
// it as a crash would: its session is closed under it in the middle of
// whatever it does (its lock goes, nothing more it writes lands), then it
// is stopped.
func (h *harness) startBatcher(cfg Config) (crash func()) {
	h.t.Helper()
	q := h.connect()
	cfg.Session = q
	r := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	var once sync.Once
	crash = func() {
		once.Do(func() {
			q.Close()
			cancel()
			r.Abort()
			<-done
		})
	}
	h.t.Cleanup(crash)
	return crash
}

// crashMidSpawn submits a manifest of manifests of n rows and runs a
// batcher that creates its jobs one at a time until at least least of them
// exist, then crashes. It returns the bid and the jobs left, which are
// fewer than n: the batch is half spawned.
func (h *harness) crashMidSpawn(path string, n, least int) (string, int) {
	h.t.Helper()
	u := h.dep.put(path, rowsManifest(n, nil))
	cfg := h.cfg
	cfg.Chunk = 1
	crash := h.startBatcher(cfg)
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c, err := batches.New(h.q).BatchCounts(ctx, bid)
		if err != nil {
			h.t.Fatal(err)
		}
		if c.GetProcessing() >= int32(least) {
			break
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("batch %s has %d jobs; the batcher never made %d", bid, c.GetProcessing(), least)
		case <-time.After(2 * time.Millisecond):
		}
	}
	crash()
	c, err := batches.New(h.q).BatchCounts(ctx, bid)
	if err != nil {
		h.t.Fatal(err)
	}
	made := int(c.GetProcessing())
	if made >= n {
		h.t.Fatalf("the batcher created all %d jobs before it crashed: the batch is not half spawned", n)
	}
	h.t.Logf("batcher crashed with %d of %d jobs created", made, n)
	return bid, made
}

// jobsByURL lists the batch's jobs by payload URL.
func (h *harness) jobsByURL(bid string) map[string][]string {
	h.t.Helper()
	out := map[string][]string{}
	token := ""
	for {
		page, next, err := jobs.NewReader(h.q).ListJobs(context.Background(), jobs.JobFilter{Batch: bid, PageSize: 1000, PageToken: token})
		if err != nil {
			h.t.Fatal(err)
		}
		for _, j := range page {
			u := j.GetConfiguration().GetPayloadUrl()
			out[u] = append(out[u], j.GetId())
		}
		if token = next; token == "" {
			return out
		}
	}
}

// checkEachRowOnce fails unless the batch has exactly one job per row
// listed in rows (indexes into the manifest of crashMidSpawn), and no other.
func (h *harness) checkEachRowOnce(bid string, rows []int) map[string][]string {
	h.t.Helper()
	byURL := h.jobsByURL(bid)
	twice := 0
	for u, jids := range byURL {
		if len(jids) > 1 {
			twice++
			if twice <= 3 {
				h.t.Errorf("%s has %d jobs: %v", u, len(jids), jids)
			}
		}
	}
	missing := 0
	for _, i := range rows {
		if len(byURL[h.dep.url(fmt.Sprintf("/obj%04d.checkm", i))]) == 0 {
			missing++
		}
	}
	if twice > 0 || missing > 0 || len(byURL) != len(rows) {
		h.t.Fatalf("batch %s: %d row(s) have more than one job, %d row(s) none, %d payload URLs for %d rows", bid, twice, missing, len(byURL), len(rows))
	}
	return byURL
}

// checkNoJobWithoutStatus fails unless every job node has a status: the
// ids a crashed batcher reserved and never wrote went when the batch's
// spawning ended.
func (h *harness) checkNoJobWithoutStatus() {
	h.t.Helper()
	ctx := context.Background()
	names, _, err := h.q.Nodes().Children(ctx, h.q.Paths().Jobs())
	if err != nil {
		h.t.Fatal(err)
	}
	var ps []string
	for _, n := range names {
		if queue.ValidJobID(n) {
			ps = append(ps, h.q.Paths().Job(n).Status())
		}
	}
	read, err := h.q.Nodes().Read(ctx, ps)
	if err != nil {
		h.t.Fatal(err)
	}
	var left []string
	for i, r := range read {
		if r.Stat == nil {
			left = append(left, ps[i])
		}
	}
	if len(left) > 0 {
		h.t.Errorf("%d job node(s) without status: %v", len(left), left[:min(5, len(left))])
	}
}

// waitSpawned waits until the batch is Processing with n jobs and its lock
// released: the batcher finished creating them.
func (h *harness) waitSpawned(bid string, n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		b, err := batches.New(h.q).GetBatch(ctx, bid)
		if err != nil {
			h.t.Fatal(err)
		}
		c := b.GetCounts()
		total := c.GetProcessing() + c.GetCompleted() + c.GetFailed()
		switch {
		case b.GetStatus().GetStatus() != queue.BatchProcessing:
			h.t.Fatalf("batch %s is %s (%q), want Processing with %d jobs", bid, queue.BatchStateName(b.GetStatus().GetStatus()),
				b.GetStatus().GetMessage(), n)
		case !b.GetLocked() && int(total) >= n:
			return
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("batch %s has %d jobs (locked %v), want %d: %q", bid, total, b.GetLocked(), n, b.GetStatus().GetMessage())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// completeAll drives every listed job to Completed, standing in for the
// other stages, many at once.
func (h *harness) completeAll(byURL map[string][]string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	jids := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 16 {
		wg.Go(func() {
			for jid := range jids {
				if err := completeJob(ctx, h.q, jid); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
				}
			}
		})
	}
	for _, ids := range byURL {
		for _, jid := range ids {
			jids <- jid
		}
	}
	close(jids)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		h.t.Fatal(err)
	}
}

func completeJob(ctx context.Context, q *session.Session, jid string) error {
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
		queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
		cl, err := jobs.New(q).ClaimJob(ctx, jid)
		if err != nil {
			return fmt.Errorf("claiming %s for %s: %w", jid, queue.JobStateName(to), err)
		}
		ch := jobs.Change{To: to}
		switch to {
		case queue.Storing: // as processing leaves a job
			ch.Identifiers = &v1.Identifiers{PrimaryId: "ark:/99999/fk4" + jid, LocalId: cl.Job.GetIdentifiers().GetLocalId()}
			ch.Store = &v1.Store{ManifestUrl: "file:///work/" + jid + "/storage-manifest.checkm", Mode: "add"}
		case queue.Recording: // as storing leaves it
			ch.Inventory = &v1.Inventory{ManifestUrl: "file:///store/" + jid + "/manifest.checkm", Mode: "add", Version: 1}
		}
		if err := cl.Commit(ctx, ch); err != nil {
			return fmt.Errorf("moving %s to %s: %w", jid, queue.JobStateName(to), err)
		}
	}
	return nil
}

// restartMidSpawn crashes a batcher while it creates the jobs of a
// 1,500-row manifest of manifests, lets change alter what the depositor's
// server answers, and starts another batcher. The batch must be finished
// from the payload as first read (kept in the work root): every row has
// exactly one job, and the batch completes.
func restartMidSpawn(t *testing.T, change func(h *harness, path string)) {
	const n = 1500
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	h := newHarness(t)
	const path = "/big.checkm"
	bid, _ := h.crashMidSpawn(path, n, 45)
	change(h, path)

	h.start()
	h.waitSpawned(bid, n)
	byURL := h.checkEachRowOnce(bid, all)
	h.checkNoJobWithoutStatus()
	if got := h.dep.fetches(path); got != 1 {
		t.Errorf("the payload was fetched %d times, want once: the restarted batcher works from the copy kept", got)
	}
	h.completeAll(byURL)
	b := h.waitBatch(bid, queue.BatchCompleted)
	if want := fmt.Sprintf("completed: all %d object(s) completed", n); b.GetStatus().GetMessage() != want {
		t.Errorf("status message %q, want %q", b.GetStatus().GetMessage(), want)
	}
}

// TestABatcherRestartedMidSpawnCreatesEachRowOnceThoughTheServerReordersThem:
// when the next batcher finishes the batch, the server lists the rows in
// another order.
func TestABatcherRestartedMidSpawnCreatesEachRowOnceThoughTheServerReordersThem(t *testing.T) {
	restartMidSpawn(t, func(h *harness, path string) {
		h.dep.put(path, rowsManifest(1500, reversed(1500)))
	})
}

// TestABatcherRestartedMidSpawnCreatesEachRowOnceThoughTheServerAnswers404:
// when the next batcher finishes the batch, the payload is gone from the
// server.
func TestABatcherRestartedMidSpawnCreatesEachRowOnceThoughTheServerAnswers404(t *testing.T) {
	restartMidSpawn(t, func(h *harness, path string) {
		h.dep.mu.Lock()
		h.dep.fails[path] = 404
		h.dep.mu.Unlock()
	})
}

// TestABatchWhosePayloadChangedAndWhoseKeptCopyIsGoneStopsSpawningAndFails:
// the copy of the payload kept in the work root is lost while the batch is
// half spawned, and the depositor's server now serves another document.
// The rows not yet created cannot be known: none is created, nothing
// twice; the jobs made go on and, once they end, the batch fails with a
// message naming the payload and both digests.
func TestABatchWhosePayloadChangedAndWhoseKeptCopyIsGoneStopsSpawningAndFails(t *testing.T) {
	const n = 1500
	h := newHarness(t)
	const path = "/big.checkm"
	bid, made := h.crashMidSpawn(path, n, 45)
	first := sha256Hex(h.dep.served(path))
	before := h.jobsByURL(bid)
	if err := os.Remove(h.root.Payload(bid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("removing the kept copy: %v", err)
	}
	u := h.dep.put(path, rowsManifest(n, reversed(n)))
	now := sha256Hex(h.dep.served(path))

	h.start()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b *v1.Batch
	for {
		var err error
		if b, err = batches.New(h.q).GetBatch(ctx, bid); err != nil {
			t.Fatal(err)
		}
		if !b.GetLocked() && strings.Contains(b.GetStatus().GetMessage(), "changed") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("batch %s is %s: %q; want it to say its payload changed", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
		case <-time.After(20 * time.Millisecond):
		}
	}
	msg := b.GetStatus().GetMessage()
	for _, want := range []string{u, first, now, "missing", fmt.Sprintf("%d job(s) had been created", made)} {
		if !strings.Contains(msg, want) {
			t.Errorf("status message %q does not contain %q", msg, want)
		}
	}
	if st := b.GetStatus().GetStatus(); st != queue.BatchProcessing {
		t.Errorf("batch is %s, want Processing until its %d jobs end", queue.BatchStateName(st), made)
	}
	after := h.jobsByURL(bid)
	if len(after) != len(before) || len(after) != made {
		t.Fatalf("the batch had %d jobs (%d URLs) and now has %d URLs: jobs were created after the payload changed", made, len(before), len(after))
	}
	for row, jids := range after {
		if !slices.Equal(jids, before[row]) {
			t.Errorf("%s: jobs %v, before %v", row, jids, before[row])
		}
	}

	h.completeAll(after)
	b = h.waitBatch(bid, queue.BatchFailed)
	final := b.GetStatus().GetMessage()
	for _, want := range []string{"not every row of the payload became a job", u, first, now, fmt.Sprintf("all %d object(s) completed", made)} {
		if !strings.Contains(final, want) {
			t.Errorf("final status message %q does not contain %q", final, want)
		}
	}
	if rep := b.GetStatusReport(); len(rep.GetSuccessfulJobs()) != made || len(rep.GetFailedJobs()) != 0 {
		t.Errorf("status report lists %d successful and %d failed jobs, want %d and 0", len(rep.GetSuccessfulJobs()), len(rep.GetFailedJobs()), made)
	}
	if body := body(t, reportMail(t, h, bid+"-report")); !strings.Contains(body, first) {
		t.Errorf("the report mailed does not say why the batch failed:\n%s", body)
	}
}

// TestAHalfSpawnedBatchTakenWithoutARecordedReadingStopsWhenItsRowsMoved:
// a batch half spawned before its reading was recorded (no copy, no
// digest) is finished from a new fetch, whose rows must still be where its
// jobs came from; when they moved, spawning stops and nothing is created
// twice.
func TestAHalfSpawnedBatchTakenWithoutARecordedReadingStopsWhenItsRowsMoved(t *testing.T) {
	const n, made = 100, 45
	h := newHarness(t)
	ctx := context.Background()
	const path = "/legacy.checkm"
	u := h.dep.put(path, rowsManifest(n, nil))
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)

	// A batcher that records no reading: takes the batch, creates 45 jobs, dies.
	first := h.connect()
	bc, err := batches.New(first).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	prof, _ := h.profiles.Get("demo")
	planned, _, err := h.cfg.Planner.Plan(ctx, bid, bc.Batch.GetSubmission(), bc.Merritt, prof)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.CreateJobs(ctx, planned[:made]); err != nil {
		t.Fatal(err)
	}
	first.Close()
	before := h.jobsByURL(bid)
	h.dep.put(path, rowsManifest(n, reversed(n)))

	h.start()
	var b *v1.Batch
	waittest.Until(t, 30*time.Second, func() error {
		if b = h.waitBatch(bid, queue.BatchProcessing); !strings.Contains(b.GetStatus().GetMessage(), "changed") {
			return fmt.Errorf("batch %s says %q; want it to say its payload changed", bid, b.GetStatus().GetMessage())
		}
		return nil
	})
	msg := b.GetStatus().GetMessage()
	for _, want := range []string{u, "row 0", h.dep.url("/obj0000.checkm"), h.dep.url(fmt.Sprintf("/obj%04d.checkm", n-1))} {
		if !strings.Contains(msg, want) {
			t.Errorf("status message %q does not contain %q", msg, want)
		}
	}
	after := h.jobsByURL(bid)
	if len(after) != made || len(before) != made {
		t.Fatalf("%d jobs before, %d after, want %d: jobs were created from the moved rows", len(before), len(after), made)
	}
	h.completeAll(after)
	b = h.waitBatch(bid, queue.BatchFailed)
	if !strings.Contains(b.GetStatus().GetMessage(), "not every row of the payload became a job") {
		t.Errorf("final status message %q", b.GetStatus().GetMessage())
	}
}

// TestAHalfSpawnedBatchWhoseKeptCopyIsDamagedIsFinishedFromThePayloadFetchedAgain:
// the copy kept in the work root no longer has the recorded digest; the
// payload fetched again has it, so the batch is finished from that, each
// row once, and the copy is kept again.
func TestAHalfSpawnedBatchWhoseKeptCopyIsDamagedIsFinishedFromThePayloadFetchedAgain(t *testing.T) {
	const n, made = 100, 45
	h := newHarness(t)
	ctx := context.Background()
	const path = "/damaged.checkm"
	u := h.dep.put(path, rowsManifest(n, nil))
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)

	// A batcher takes the batch as the Batcher does, creates 45 jobs, dies.
	first := h.connect()
	bc, err := batches.New(first).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := h.profiles.Get("demo")
	planned, reading, err := h.cfg.Planner.Plan(ctx, bid, bc.Batch.GetSubmission(), bc.Merritt, prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cfg.Planner.Keep(ctx, bid, reading); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing, Payload: reading.Record()}); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.CreateJobs(ctx, planned[:made]); err != nil {
		t.Fatal(err)
	}
	first.Close()
	damaged := strings.Replace(string(reading.Data), "obj0050", "obj9999", 1)
	if err := os.WriteFile(h.root.Payload(bid), []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}

	h.start()
	h.waitSpawned(bid, n)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	h.checkEachRowOnce(bid, all)
	h.checkNoJobWithoutStatus()
	if got := h.dep.fetches(path); got != 2 {
		t.Errorf("the payload was fetched %d times, want twice (taken, then the damaged copy replaced)", got)
	}
	if kept, err := os.ReadFile(h.root.Payload(bid)); err != nil || string(kept) != string(reading.Data) {
		t.Errorf("the copy kept is not the payload again (%v)", err)
	}
}
