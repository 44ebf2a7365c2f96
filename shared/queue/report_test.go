package queue

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/proto"
)

// jids makes n jids numbered from first.
func jids(first, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("jid%010d", first+i)
	}
	return out
}

// A report that fits its node is written exactly as before: no totals.
func TestStatusReportThatFitsIsWrittenAsThePeersWriteIt(t *testing.T) {
	r := &v1.StatusReport{LastModified: stamp, FailedJobs: jids(2, 1), SuccessfulJobs: []string{"jid0000000001", "jid0000000003"}}
	want := `{"last_modified":"2026-11-22 03:51:07 +0000","failed_jobs":["jid0000000002"],"successful_jobs":["jid0000000001","jid0000000003"]}`
	if got := string(encodeStatusReport(r)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Totals that only repeat the lists' lengths (or say 0) add nothing.
	r.FailedJobsTotal, r.SuccessfulJobsTotal = 1, 0
	if got := string(encodeStatusReport(r)); got != want {
		t.Errorf("with totals equal to the lists: got %s", got)
	}
	// 55,000 jobs still fit a node whole.
	big := &v1.StatusReport{LastModified: stamp, FailedJobs: jids(1, 5), SuccessfulJobs: jids(10, 55000)}
	got, _ := fitStatusReport(big, MaxNodeBytes)
	if len(got.GetSuccessfulJobs()) != 55000 || len(got.GetFailedJobs()) != 5 {
		t.Errorf("55,005 jobs trimmed to %d+%d", len(got.GetSuccessfulJobs()), len(got.GetFailedJobs()))
	}
}

// TestStatusReportTrimmedToItsLimit checks the trimming itself at limits
// small enough to reason about: failed_jobs whole if it fits, the longest
// prefix of successful_jobs that fits, the totals, and never over.
func TestStatusReportTrimmedToItsLimit(t *testing.T) {
	r := &v1.StatusReport{LastModified: stamp, FailedJobs: jids(100, 2), SuccessfulJobs: jids(1, 5)}
	full := len(encodeStatusReport(r))
	t.Run("exact bytes", func(t *testing.T) {
		whole := `{"last_modified":"2026-11-22 03:51:07 +0000","failed_jobs":["jid0000000100","jid0000000101"],` +
			`"successful_jobs":[],"successful_jobs_total":5}`
		for _, tt := range []struct {
			limit int
			want  string
		}{
			{full - 1, `{"last_modified":"2026-11-22 03:51:07 +0000","failed_jobs":["jid0000000100","jid0000000101"],` +
				`"successful_jobs":["jid0000000001","jid0000000002","jid0000000003"],"successful_jobs_total":5}`},
			{len(whole), whole},
			// One failed jid less, but failed_jobs_total more: nothing fits.
			{len(whole) - 1, `{"last_modified":"2026-11-22 03:51:07 +0000","failed_jobs":[],"successful_jobs":[],` +
				`"failed_jobs_total":2,"successful_jobs_total":5}`},
		} {
			_, data := fitStatusReport(r, tt.limit)
			if got := string(data); got != tt.want {
				t.Errorf("limit %d: got  %s\nwant %s", tt.limit, got, tt.want)
			}
		}
	})
	for limit := 0; limit <= full+2; limit++ {
		got, data := fitStatusReport(r, limit)
		n := len(marshal(statusReportWire(got)))
		if string(data) != string(marshal(statusReportWire(got))) {
			t.Fatalf("limit %d: returned %s, but the report it kept is written %s", limit, data, marshal(statusReportWire(got)))
		}
		fitsEmpty := len(marshal(statusReportWire(&v1.StatusReport{LastModified: stamp, FailedJobsTotal: 2, SuccessfulJobsTotal: 5}))) <= limit
		if n > limit && fitsEmpty {
			t.Fatalf("limit %d: %d bytes", limit, n)
		}
		if got.GetFailedJobsTotal() != 2 || got.GetSuccessfulJobsTotal() != 5 {
			t.Fatalf("limit %d: totals %d, %d", limit, got.GetFailedJobsTotal(), got.GetSuccessfulJobsTotal())
		}
		if !slices.Equal(got.GetFailedJobs(), r.FailedJobs[:len(got.GetFailedJobs())]) ||
			!slices.Equal(got.GetSuccessfulJobs(), r.SuccessfulJobs[:len(got.GetSuccessfulJobs())]) {
			t.Fatalf("limit %d: lists are not prefixes: %v", limit, got)
		}
		if len(got.GetFailedJobs()) < 2 && len(got.GetSuccessfulJobs()) > 0 {
			t.Fatalf("limit %d: failed_jobs trimmed while successful_jobs kept some: %v", limit, got)
		}
		if limit >= full && (len(got.GetFailedJobs()) != 2 || len(got.GetSuccessfulJobs()) != 5) {
			t.Fatalf("limit %d ≥ %d: trimmed: %v", limit, full, got)
		}
		// Maximal: one more jid would not have fit.
		if fitsEmpty && limit < full {
			more := proto.Clone(got).(*v1.StatusReport)
			if len(got.GetFailedJobs()) < 2 {
				more.FailedJobs = r.FailedJobs[:len(got.GetFailedJobs())+1]
			} else {
				more.SuccessfulJobs = r.SuccessfulJobs[:len(got.GetSuccessfulJobs())+1]
			}
			if m := len(marshal(statusReportWire(more))); m <= limit {
				t.Fatalf("limit %d: %v is not the most that fits (%v takes %d)", limit, got, more, m)
			}
		}
		// What is written reads back as what the claim keeps.
		back, err := decodeStatusReport("/x", marshal(statusReportWire(got)))
		if err != nil || !proto.Equal(back, got) {
			t.Fatalf("limit %d: %v read back as %v (%v)", limit, got, back, err)
		}
	}
	// A jid that needs escaping is measured as written.
	odd := &v1.StatusReport{LastModified: stamp, SuccessfulJobs: []string{"jid\"1", "jid\u00e92", "jid\n3", "jid0000000004"}}
	empty := len(marshal(statusReportWire(&v1.StatusReport{LastModified: stamp, SuccessfulJobsTotal: 4})))
	for limit := empty; limit < empty+80; limit++ {
		got, _ := fitStatusReport(odd, limit)
		if n := len(marshal(statusReportWire(got))); n > limit {
			t.Fatalf("limit %d: %d bytes", limit, n)
		}
		more := proto.Clone(got).(*v1.StatusReport)
		if k := len(got.GetSuccessfulJobs()); k < 4 {
			more.SuccessfulJobs = odd.SuccessfulJobs[:k+1]
			if m := len(marshal(statusReportWire(more))); m <= limit {
				t.Fatalf("limit %d: %d jids kept, %d would fit", limit, k, k+1)
			}
		}
	}
}

func TestStatusReportTotalsAsRead(t *testing.T) {
	tests := []struct {
		name               string
		node               string
		failed, successful int32
		failedN, successfN int
	}{
		{"a peer's report: totals are the lists' lengths",
			`{"last_modified":"2026-11-22 03:51:07 +0000","failed_jobs":["jid0000000002"],"successful_jobs":["jid0000000001","jid0000000003"]}`, 1, 2, 1, 2},
		{"a peer's report with keys of its own",
			`{"failed_jobs":[],"successful_jobs":["jid0000000001"],"note":"x","failed_count":{"a":1}}`, 0, 1, 0, 1},
		{"trimmed: the totals written",
			`{"failed_jobs":["jid0000000002"],"successful_jobs":[],"failed_jobs_total":70000,"successful_jobs_total":30000}`, 70000, 30000, 1, 0},
		{"a total less than its list reads as the list's length",
			`{"failed_jobs":["jid0000000002","jid0000000003"],"successful_jobs":[],"failed_jobs_total":1}`, 2, 0, 2, 0},
		{"totals that are not counts are ignored",
			`{"failed_jobs":["jid0000000002"],"successful_jobs":["jid0000000001"],"failed_jobs_total":"9","successful_jobs_total":-4}`, 1, 1, 1, 1},
		{"nor are fractions, nulls or counts past int32",
			`{"failed_jobs":null,"successful_jobs":["jid0000000001"],"failed_jobs_total":1e3,"successful_jobs_total":3000000000}`, 0, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := decodeStatusReport("/x", []byte(tt.node))
			if err != nil {
				t.Fatal(err)
			}
			if r.GetFailedJobsTotal() != tt.failed || r.GetSuccessfulJobsTotal() != tt.successful ||
				len(r.GetFailedJobs()) != tt.failedN || len(r.GetSuccessfulJobs()) != tt.successfN {
				t.Errorf("read %v", r)
			}
		})
	}
}

// TestAReportOfAHundredThousandJobsFitsItsNode commits the report of a
// batch of 100,000 successful and a few failed jobs to the test ZooKeeper,
// and one whose failed jobs alone do not fit.
func TestAReportOfAHundredThousandJobsFitsItsNode(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name               string
		failed, successful int
	}{
		{"100,000 successful, 3 failed", 3, 100000},
		{"80,000 failed, 20,000 successful", 80000, 20000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bid, spawned := spawn(t, c, 1, 5)
			step(t, c, spawned[0], Change{To: Failed, Message: "bad digest"})
			bc, err := c.ClaimBatch(ctx, bid)
			if err != nil {
				t.Fatal(err)
			}
			if err := bc.Commit(ctx, BatchChange{To: BatchReporting, KeepLock: true}); err != nil {
				t.Fatal(err)
			}
			failed := append(spawned, jids(2_000_000, tc.failed-1)...)
			successful := jids(1_000_000, tc.successful)
			report := &v1.StatusReport{LastModified: nowStamp(), FailedJobs: failed, SuccessfulJobs: successful}
			if err := bc.Commit(ctx, BatchChange{To: BatchFailed, Report: report}); err != nil {
				t.Fatalf("committing the report: %v", err)
			}
			if len(report.GetSuccessfulJobs()) != tc.successful || len(report.GetFailedJobs()) != tc.failed {
				t.Error("Commit changed the caller's report")
			}

			raw := nodeData(t, c, c.p.batchNode(bid, nodeStatusReport))
			if len(raw) > MaxNodeBytes {
				t.Errorf("status-report takes %d bytes, over %d", len(raw), MaxNodeBytes)
			}
			var keys map[string]json.RawMessage
			if err := json.Unmarshal([]byte(raw), &keys); err != nil {
				t.Fatal(err)
			}
			if got := string(keys["successful_jobs_total"]); got != fmt.Sprint(tc.successful) {
				t.Errorf("successful_jobs_total = %s", got)
			}
			b, err := c.GetBatch(ctx, bid)
			if err != nil {
				t.Fatal(err)
			}
			got := b.GetStatusReport()
			if !proto.Equal(got, bc.Batch.GetStatusReport()) {
				t.Error("the claim keeps another report than the node's")
			}
			if got.GetFailedJobsTotal() != int32(tc.failed) || got.GetSuccessfulJobsTotal() != int32(tc.successful) {
				t.Errorf("totals %d failed, %d successful", got.GetFailedJobsTotal(), got.GetSuccessfulJobsTotal())
			}
			kf, ks := len(got.GetFailedJobs()), len(got.GetSuccessfulJobs())
			t.Logf("%d bytes: %d of %d failed, %d of %d successful", len(raw), kf, tc.failed, ks, tc.successful)
			if !slices.Equal(got.GetFailedJobs(), failed[:kf]) || !slices.Equal(got.GetSuccessfulJobs(), successful[:ks]) {
				t.Error("the lists kept are not the first of the given ones")
			}
			if tc.failed < 50000 {
				// The failed list is whole; successful_jobs has what fits.
				if kf != tc.failed || ks == 0 || ks >= tc.successful {
					t.Errorf("kept %d failed, %d successful", kf, ks)
				}
				if _, ok := keys["failed_jobs_total"]; ok {
					t.Error("failed_jobs_total written for a whole list")
				}
			} else {
				if kf == 0 || kf >= tc.failed || ks != 0 {
					t.Errorf("kept %d failed, %d successful", kf, ks)
				}
				if got := string(keys["failed_jobs_total"]); got != fmt.Sprint(tc.failed) {
					t.Errorf("failed_jobs_total = %s", got)
				}
			}
			// Room left over is less than one more jid.
			if len(raw)+16 <= MaxNodeBytes {
				t.Errorf("%d bytes: another jid would have fit", len(raw))
			}
		})
	}
}

func TestCompletedAfterReportComparesTheReferencesWithTheReport(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	bid, js := spawn(t, c, 3, 5)
	done := []JobState{Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Completed}
	for _, to := range done {
		step(t, c, js[0], Change{To: to})
	}
	step(t, c, js[1], Change{To: Failed, Message: "bad digest"})
	step(t, c, js[2], Change{To: Failed, Message: "bad digest"})
	// No report yet: every completed job counts.
	got, err := c.CompletedAfterReport(ctx, bid, js)
	if err != nil || !slices.Equal(got, js[:1]) {
		t.Fatalf("before any report: %v, %v", got, err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, BatchChange{To: BatchReporting, KeepLock: true}); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, BatchChange{To: BatchFailed, Report: &v1.StatusReport{LastModified: nowStamp(),
		FailedJobs: js[1:], SuccessfulJobs: js[:1]}}); err != nil {
		t.Fatal(err)
	}
	// The operator resumes one failed job; it completes.
	if _, err := requeue(ctx, c, js[2], ""); err != nil {
		t.Fatal(err)
	}
	for _, to := range done[1:] {
		step(t, c, js[2], Change{To: to})
	}
	got, err = c.CompletedAfterReport(ctx, bid, js)
	if err != nil || !slices.Equal(got, js[2:]) {
		t.Fatalf("after the report: %v, %v; want %v", got, err, js[2:])
	}
	if f, s := ReportTotals(&v1.StatusReport{FailedJobs: js, SuccessfulJobsTotal: 9}); f != 3 || s != 9 {
		t.Errorf("ReportTotals = %d, %d", f, s)
	}
	if !ReportTrimmed(&v1.StatusReport{SuccessfulJobsTotal: 1}) || ReportTrimmed(&v1.StatusReport{FailedJobs: js, FailedJobsTotal: 2}) {
		t.Error("ReportTrimmed")
	}
}
