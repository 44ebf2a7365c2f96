package queue

import (
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
	got, _ := FitStatusReport(big, MaxNodeBytes)
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
			_, data := FitStatusReport(r, tt.limit)
			if got := string(data); got != tt.want {
				t.Errorf("limit %d: got  %s\nwant %s", tt.limit, got, tt.want)
			}
		}
	})
	for limit := 0; limit <= full+2; limit++ {
		got, data := FitStatusReport(r, limit)
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
		back, err := DecodeStatusReport("/x", marshal(statusReportWire(got)))
		if err != nil || !proto.Equal(back, got) {
			t.Fatalf("limit %d: %v read back as %v (%v)", limit, got, back, err)
		}
	}
	// A jid that needs escaping is measured as written.
	odd := &v1.StatusReport{LastModified: stamp, SuccessfulJobs: []string{"jid\"1", "jid\u00e92", "jid\n3", "jid0000000004"}}
	empty := len(marshal(statusReportWire(&v1.StatusReport{LastModified: stamp, SuccessfulJobsTotal: 4})))
	for limit := empty; limit < empty+80; limit++ {
		got, _ := FitStatusReport(odd, limit)
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
			r, err := DecodeStatusReport("/x", []byte(tt.node))
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
