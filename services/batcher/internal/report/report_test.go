package report

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestTheReportKeyStaysTheSameUntilAReportIsStored(t *testing.T) {
	prev := &v1.StatusReport{LastModified: timestamppb.New(time.Date(2026, 11, 22, 3, 51, 7, 0, time.UTC))}
	if k := reportKey("bid0000000042", nil); k != "bid0000000042-report" {
		t.Errorf("first report key %q", k)
	}
	if k := reportKey("bid0000000042", prev); k != "bid0000000042-report-after-20261122T035107Z" {
		t.Errorf("update report key %q", k)
	}
	later := &v1.StatusReport{LastModified: timestamppb.New(prev.GetLastModified().AsTime().Add(time.Hour))}
	if reportKey("bid0000000042", later) == reportKey("bid0000000042", prev) {
		t.Error("two update reports share a key")
	}
}

func TestAnUpdateReportListsWhatChangedAndWhatIsStillOpen(t *testing.T) {
	prof := &profile.Profile{Name: "demo", Collection: "demo_coll", NotificationAddresses: []string{"depositor@example.org"}}
	sub := &v1.Submission{ProfileName: "demo", Submitter: "jdoe", PayloadUrl: "https://example.org/b.checkm",
		Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, BatchId: "u-1"}
	r := &Report{
		Bid: "bid0000000042", Update: true, Key: "bid0000000042-report-after-20261122T035107Z",
		Completed:  Section{Total: 1, Lines: []Line{{JobID: "jid0000000002", ARK: "ark:/99999/fk4b", LocalIDs: []string{"loc-b"}}}},
		Failed:     Section{Total: 1, Lines: []Line{{JobID: "jid0000000003", Message: "GET http://127.0.0.1/c: HTTP 404\nNot Found"}}},
		InProgress: Section{Total: 1, Lines: []Line{{JobID: "jid0000000004"}}},
		Deleted:    1,
	}
	if r.Final() != queue.BatchFailed {
		t.Errorf("Final() = %s with a failed and a live job", r.Final())
	}
	m := r.Mail(sub, prof)
	if m.Key != r.Key || m.To[0] != "depositor@example.org" || !strings.Contains(m.Subject, "(update)") {
		t.Errorf("mail %q to %v key %s", m.Subject, m.To, m.Key)
	}
	for _, want := range []string{
		"Update report on ingestq batch bid0000000042",
		"Result:      failed: 1 more object(s) completed, 1 still failed, 1 in progress",
		"Completed since the last report (1):\n  jid0000000002  ark:/99999/fk4b  local id loc-b\n",
		"Failed (1):\n  jid0000000003  (no ARK)\n      GET http://127.0.0.1/c: HTTP 404 Not Found\n",
		"Still in progress (1):\n  jid0000000004  (no ARK)\n",
		"Deleted:     1 job(s)",
		"(batch uuid u-1)",
	} {
		if !strings.Contains(m.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, m.Body)
		}
	}
	r.Failed, r.InProgress = Section{}, Section{}
	if r.Final() != queue.BatchCompleted || !strings.HasPrefix(r.Summary(), "completed: 1 more") {
		t.Errorf("with nothing open: %s %q", r.Final(), r.Summary())
	}
}

func TestALongSectionIsCutWithACount(t *testing.T) {
	var b strings.Builder
	s := Section{Total: MaxListed + 5, Lines: make([]Line, MaxListed)}
	writeSection(&b, "Completed", s, false)
	if !strings.Contains(b.String(), "… and 5 more") {
		t.Errorf("no count of the jobs left out:\n%s", b.String()[len(b.String())-200:])
	}
}

func TestCompletedSinceAReportWholeOrTrimmed(t *testing.T) {
	ctx := context.Background()
	jid := func(n int) string { return fmt.Sprintf("jid%010d", n) }
	tests := []struct {
		name      string
		prev      *v1.StatusReport
		completed []string
		want      []string
	}{
		{"whole lists: the failed ones now completed, and those in progress then",
			&v1.StatusReport{FailedJobs: []string{jid(2), jid(3)}, SuccessfulJobs: []string{jid(1)}},
			[]string{jid(1), jid(2), jid(4)}, []string{jid(2), jid(4)}},
		{"successful_jobs trimmed, and the count says nothing else completed",
			&v1.StatusReport{FailedJobs: []string{jid(2)}, SuccessfulJobs: []string{jid(1)}, SuccessfulJobsTotal: 3},
			[]string{jid(1), jid(2), jid(3), jid(4)}, []string{jid(2)}},
		{"failed_jobs trimmed, and the count says every unlisted job completed since",
			&v1.StatusReport{FailedJobs: []string{jid(2)}, FailedJobsTotal: 3},
			[]string{jid(2), jid(5), jid(6)}, []string{jid(2), jid(5), jid(6)}},
		{"nothing completed since",
			&v1.StatusReport{FailedJobs: []string{jid(2)}, FailedJobsTotal: 3, SuccessfulJobsTotal: 1},
			[]string{jid(1)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No read is needed in these cases: a nil client would panic.
			got, err := completedSince(ctx, Reads{}, "bid0000000042", tt.prev, tt.completed)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("got %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}

// TestAReportOnNothingCompletedNeverSaysCompleted: a batch that has no
// completed object (no job at all, or every job deleted) is reported
// Failed, in a first report and in an update report alike, and says so.
func TestAReportOnNothingCompletedNeverSaysCompleted(t *testing.T) {
	for _, r := range []*Report{
		{Bid: "bid0000000001"},
		{Bid: "bid0000000001", Update: true},
		{Bid: "bid0000000001", Deleted: 2},
		{Bid: "bid0000000001", Update: true, Deleted: 2},
	} {
		if got := r.Final(); got != queue.BatchFailed {
			t.Errorf("%+v: final state %s, want Failed", r, queue.BatchStateName(got))
		}
		if s := r.Summary(); !strings.HasPrefix(s, "failed: ") {
			t.Errorf("%+v: summary %q does not say failed", r, s)
		}
	}
	done := &Report{Bid: "bid0000000001", AllCompleted: 1, Completed: Section{Total: 1}}
	if got := done.Final(); got != queue.BatchCompleted {
		t.Errorf("a batch whose one job completed: final state %s, want Completed", queue.BatchStateName(got))
	}
}

// TestAPayloadThatCouldNotBeUsedIsReportedWithItsReasonAndWhatToDo: the
// report of a batch that has no job because its payload could not be used
// names the reason and tells the depositor what to do.
func TestAPayloadThatCouldNotBeUsedIsReportedWithItsReasonAndWhatToDo(t *testing.T) {
	prof := &profile.Profile{Name: "demo", Collection: "demo_coll", NotificationAddresses: []string{"depositor@example.org"}}
	sub := &v1.Submission{ProfileName: "demo", Submitter: "jdoe", PayloadUrl: "https://example.org/b.checkm",
		Type: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}
	r := &Report{Bid: "bid0000000007", Key: "bid0000000007-report", SpawnStopped: "fetching payload https://example.org/b.checkm: 404 Not Found; no job was created"}
	if got := r.Final(); got != queue.BatchFailed {
		t.Errorf("final state %s, want Failed", queue.BatchStateName(got))
	}
	reason := "fetching payload https://example.org/b.checkm: 404 Not Found; no job was created"
	if got := r.Summary(); got != reason {
		t.Errorf("summary %q, want the reason %q", got, reason)
	}
	want := "failed: " + reason
	m := r.Mail(sub, prof)
	for _, w := range []string{"Result:      " + want, "What to do:  correct the payload (https://example.org/b.checkm) as the result says, and submit it again as a new batch"} {
		if !strings.Contains(m.Body, w) {
			t.Errorf("mail lacks %q:\n%s", w, m.Body)
		}
	}
	if !strings.Contains(m.Subject, want) {
		t.Errorf("subject %q", m.Subject)
	}
}

// TestAReportNamesTheVersionEachObjectGot: a completed object's line names
// the version its job stored, and an object stored before (a version
// after the first) is called out, so that a depositor who submitted it
// again learns that it became a new version.
func TestAReportNamesTheVersionEachObjectGot(t *testing.T) {
	prof := &profile.Profile{Name: "demo", Collection: "demo_coll", NotificationAddresses: []string{"depositor@example.org"}}
	sub := &v1.Submission{ProfileName: "demo", Submitter: "jdoe", PayloadUrl: "https://example.org/b.checkm",
		Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS}
	r := &Report{Bid: "bid0000000042", Key: "bid0000000042-report", AllCompleted: 2, Completed: Section{Total: 2, Lines: []Line{
		{JobID: "jid0000000001", ARK: "ark:/99999/fk4a", Version: 1, LocalIDs: []string{"loc-a"}},
		{JobID: "jid0000000002", ARK: "ark:/99999/fk4b", Version: 4, LocalIDs: []string{"loc-b"}},
	}}}
	m := r.Mail(sub, prof)
	for _, want := range []string{
		"  jid0000000001  ark:/99999/fk4a  version 1  local id loc-a\n",
		"  jid0000000002  ark:/99999/fk4b  version 4  local id loc-b\n",
		"Versions:    1 completed object(s) had been stored before: each got a new version, whose number is listed below\n",
	} {
		if !strings.Contains(m.Body, want) {
			t.Errorf("body lacks %q:\n%s", want, m.Body)
		}
	}
	r.Completed.Lines[1].Version = 1
	if m := r.Mail(sub, prof); strings.Contains(m.Body, "Versions:") {
		t.Errorf("a report of first versions only speaks of versions stored before:\n%s", m.Body)
	}
}

// A job completed without its callback (the notifier gave it up) is a
// completed object: the report says completed, and says which callback
// was not delivered.
func TestAJobCompletedWithoutItsCallbackIsReportedCompletedSayingSo(t *testing.T) {
	prof := &profile.Profile{Name: "demo", Collection: "demo_coll"}
	sub := &v1.Submission{ProfileName: "demo", PayloadUrl: "https://example.org/b.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS}
	msg := queue.CallbackNotDelivered + " to https://cb.example.org/x in 24h0m0s of attempts (callback https://cb.example.org/x: HTTP 503 Service Unavailable after 3 attempts); working folder removed"
	r := &Report{Bid: "bid0000000042", Key: "bid0000000042-report", AllCompleted: 2,
		Completed: Section{Total: 2, Lines: []Line{{JobID: "jid0000000001", ARK: "ark:/99999/fk4a", Message: msg},
			{JobID: "jid0000000002", ARK: "ark:/99999/fk4b", Message: "callback https://cb.example.org/x delivered; working folder removed"}}}}
	if r.Final() != queue.BatchCompleted {
		t.Errorf("Final() = %s", r.Final())
	}
	m := r.Mail(sub, prof)
	if want := "ingestq batch bid0000000042: completed: all 2 object(s) completed; 1 callback(s) not delivered"; m.Subject != want {
		t.Errorf("subject %q, want %q", m.Subject, want)
	}
	want := "Completed (2):\n  jid0000000001  ark:/99999/fk4a\n      " + queue.CallbackNotDelivered +
		" to https://cb.example.org/x in 24h0m0s of attempts (callback https://cb.example.org/x: HTTP 503 Service Unavailable after 3 attempts)\n  jid0000000002  ark:/99999/fk4b\n"
	if !strings.Contains(m.Body, want) {
		t.Errorf("body lacks\n%s\nin\n%s", want, m.Body)
	}
}
