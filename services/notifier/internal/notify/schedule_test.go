package notify

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/telemetry"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// t0 is the clock's reading in the tests of the schedule.
var t0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// Attempts come a backoff after the first failure, then each doubled wait
// later up to the longest, and a last one when the time is up.
func TestRetriesComeEachDoubledWaitLaterUpToTheLongestAndOnceMoreAtTheEnd(t *testing.T) {
	r := Redelivery{For: time.Hour, Backoff: time.Minute, Max: 10 * time.Minute}
	var got []time.Duration
	for last := t0; len(got) < 12; {
		at := r.due(t0, last)
		got = append(got, at.Sub(t0))
		if !at.After(last) {
			break
		}
		last = at
	}
	m := time.Minute
	want := []time.Duration{m, 3 * m, 7 * m, 15 * m, 25 * m, 35 * m, 45 * m, 55 * m, 60 * m, 60 * m}
	if !slices.Equal(got, want) {
		t.Errorf("attempts at %v after the first failure, want %v", got, want)
	}
	// Taken between two of them: the next one.
	if at := r.due(t0, t0.Add(16*m)); at.Sub(t0) != 25*m {
		t.Errorf("after a take 16m in: next attempt %s in, want 25m", at.Sub(t0))
	}
}

// stays is a job status in Notify whose history ends with stays since
// since, the last at last, with message msg.
func stays(since, last time.Time, msg string) *v1.JobStatus {
	return &v1.JobStatus{Status: queue.Notify, Message: msg, LastModified: timestamppb.New(last),
		History: []*v1.JobStateChange{
			{At: timestamppb.New(since.Add(-time.Minute)), From: queue.Recording, To: queue.Notify},
			{At: timestamppb.New(since), From: queue.Notify, To: queue.Notify, Message: "callback x: HTTP 503 after 3 attempts"},
			{At: timestamppb.New(since.Add(time.Second)), From: queue.Notify, To: queue.Notify, Message: msg},
		}}
}

// The schedule is read from the job itself, its first failure from its
// history: a notifier started again (or another replica) that takes the
// job before its next attempt is due gives it back until then, posting
// nothing and writing nothing (stage.Wait without a message).
func TestAJobTakenBeforeItsNextAttemptWaitsUntilThenUnchanged(t *testing.T) {
	rcv := &receiver{script: []int{200}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	root := t.TempDir()
	claim, _ := notifyJob(t, root, "demo")
	msg := "callback x: connection refused after 3 attempts; pending"
	// First failure at t0, retried at t0+200ms, t0+600ms; now t0+1s: the
	// next is due at t0+1.4s.
	claim.Job.Status = stays(t0, t0.Add(600*time.Millisecond), msg)
	n := newNotifier(t, root, srv.URL+"/cb") // a notifier that knows nothing of the job
	n.Now = func() time.Time { return t0.Add(time.Second) }
	if out := n.Handle(context.Background(), claim); out.String() != "wait 400ms" || out.Change().Message != "" || rcv.calls() != 0 {
		t.Errorf("outcome %q after %d calls, want a wait of 400ms writing nothing, after none", out, rcv.calls())
	}
	// At its time it is posted.
	n.Now = func() time.Time { return t0.Add(1400 * time.Millisecond) }
	if out := n.Handle(context.Background(), claim); !strings.HasPrefix(out.String(), "next: callback "+srv.URL+"/cb delivered") || rcv.calls() != 1 {
		t.Errorf("outcome %q after %d calls, want the callback delivered", out, rcv.calls())
	}
}

// Once the time is up, a callback still not delivered is given up: the job
// completes (its object is stored), its message saying the callback was
// not delivered.
func TestACallbackStillNotDeliveredWhenTheTimeIsUpCompletesTheJobSayingSo(t *testing.T) {
	rcv := &receiver{script: []int{503}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	root := t.TempDir()
	claim, _ := notifyJob(t, root, "demo")
	claim.Job.Status = stays(t0, t0.Add(59*time.Minute), "callback x: HTTP 503 after 3 attempts; pending")
	n := newNotifier(t, root, srv.URL+"/cb")
	n.Now = func() time.Time { return t0.Add(time.Hour) }
	out := n.Handle(context.Background(), claim)
	want := "next: " + queue.CallbackNotDelivered + " to " + srv.URL + "/cb in 1h0m0s of attempts (callback " + srv.URL +
		"/cb: HTTP 503 Service Unavailable after 3 attempts); working folder removed"
	if out.String() != want || rcv.calls() != 3 {
		t.Errorf("outcome %q after %d calls, want %q after 3", out, rcv.calls(), want)
	}
}

// A job that came back to Notify (an operator's requeue) after stays in an
// earlier visit starts afresh: only the stays its history ends with count.
func TestOnlyTheStaysAJobsHistoryEndsWithCount(t *testing.T) {
	st := stays(t0, t0, "m")
	if got := pendingSince(st); !got.Equal(t0) {
		t.Errorf("pending since %v, want %v", got, t0)
	}
	st.History = append(st.History, &v1.JobStateChange{At: timestamppb.New(t0.Add(time.Hour)), From: queue.Notify, To: queue.Failed},
		&v1.JobStateChange{At: timestamppb.New(t0.Add(2 * time.Hour)), From: queue.Failed, To: queue.Notify})
	if got := pendingSince(st); !got.IsZero() {
		t.Errorf("pending since %v after a requeue, want none", got)
	}
}

// Each callback's outcome is counted: delivered, pending (tried again
// later), refused, failed (given up).
func TestCallbacksAreCountedByOutcome(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "notifier-test", "v0", telemetry.WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	root := t.TempDir()
	for _, c := range []struct {
		code    int
		pending bool // the job's callback failed an hour before
	}{{200, false}, {503, false}, {410, false}, {503, true}} {
		rcv := &receiver{script: []int{c.code}}
		srv := httptest.NewServer(rcv)
		claim, _ := notifyJob(t, root, "demo")
		if c.pending {
			claim.Job.Status = stays(t0.Add(-time.Hour), t0.Add(-time.Minute), "m")
		}
		n := newNotifier(t, root, srv.URL)
		n.Metrics, n.Now = tel.Metrics, func() time.Time { return t0 }
		n.Handle(context.Background(), claim)
		srv.Close()
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, outcome := range []string{"delivered", "pending", "refused", "failed"} {
		if want := `ingestq_callbacks_total{outcome="` + outcome + `"} 1`; !strings.Contains(rec.Body.String(), want) {
			t.Errorf("no %s in\n%s", want, rec.Body.String())
		}
	}
}
