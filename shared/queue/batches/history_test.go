package batches_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// topRequests counts the requests a session sent, not the operations inside
// a multi or multiRead.
func topRequests(s *session.Session) int64 {
	var n int64
	for _, r := range s.Requests() {
		if !strings.HasPrefix(r.Op, "multi.") && !strings.HasPrefix(r.Op, "multiread.") {
			n += r.Count
		}
	}
	return n
}

func TestEachStateChangeIsKeptInTheJobsStatusHistory(t *testing.T) {
	s := connect(t)
	ctx := testCtx(t)
	_, jid := queuetest.SpawnWithUUID(t, s, "history-uuid")
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Estimating, By: "estimator-w1", Message: "taken"})

	// The history costs no request: a commit is still one multi.
	cl, err := jobs.New(s).ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	before := topRequests(s)
	if err := cl.Commit(ctx, jobs.Change{To: queue.Provisioning}); err != nil {
		t.Fatal(err)
	}
	if n := topRequests(s) - before; n != 1 {
		t.Errorf("a commit sent %d requests, want 1 (its multi)", n)
	}
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Failed, By: "provisioner-w2", Message: "no room on the work volume"})
	// An operator's move: the requeue of the failed job to a named state.
	if _, err := admin.New(s).Jobs.Requeue(ctx, jid, queue.Provisioning, "room made"); err != nil {
		t.Fatal(err)
	}

	j, err := jobs.NewReader(s).GetJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	st := j.GetStatus()
	type entry struct {
		from, to queue.JobState
		worker   string
		message  string
	}
	want := []entry{
		{v1.JobState_JOB_STATE_UNSPECIFIED, queue.Pending, s.Worker(), ""},
		{queue.Pending, queue.Estimating, "estimator-w1", "taken"},
		{queue.Estimating, queue.Provisioning, s.Worker(), ""},
		{queue.Provisioning, queue.Failed, "provisioner-w2", "no room on the work volume"},
		{queue.Failed, queue.Provisioning, queue.WorkerOperator, "room made"},
	}
	hs := st.GetHistory()
	if len(hs) != len(want) || st.GetHistoryDropped() != 0 {
		t.Fatalf("history %v (dropped %d), want %d entries", hs, st.GetHistoryDropped(), len(want))
	}
	for i, w := range want {
		h := hs[i]
		if got := (entry{h.GetFrom(), h.GetTo(), h.GetWorker(), h.GetMessage()}); got != w {
			t.Errorf("entry %d: %+v, want %+v", i, got, w)
		}
		if i == 0 {
			continue
		}
		// The time in the state left is the time since the job entered it.
		if d := h.GetAt().AsTime().Sub(hs[i-1].GetAt().AsTime()); h.GetInState().AsDuration() != d {
			t.Errorf("entry %d: in state %v, but entered it %v before", i, h.GetInState().AsDuration(), d)
		}
	}
	if queue.FailedStage(st) != queue.Provisioning {
		t.Errorf("FailedStage = %s, want Provisioning", queue.JobStateName(queue.FailedStage(st)))
	}
	if st.GetRetryCount() != 1 || st.GetMessage() != "room made" {
		t.Errorf("status %v", st)
	}
}

func TestAHistoryKeepsTheLast64ChangesAndCountsTheDropped(t *testing.T) {
	s := connect(t)
	r := jobs.NewReader(s)
	ctx := testCtx(t)
	_, jid := queuetest.SpawnWithUUID(t, s, "bounded-uuid")
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning} {
		queuetest.Move(t, s, jid, jobs.Change{To: to})
	}
	// A step retried with the same message adds nothing.
	for range 3 {
		queuetest.Move(t, s, jid, jobs.Change{To: queue.Provisioning, Message: "waiting for room"})
	}
	st, err := r.JobStatus(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.GetHistory()); n != 4 {
		t.Fatalf("%d entries after the same message three times, want 4", n)
	}
	for i := range 70 {
		queuetest.Move(t, s, jid, jobs.Change{To: queue.Provisioning, Message: fmt.Sprintf("waiting for room (%d)", i)})
	}
	if st, err = r.JobStatus(ctx, jid); err != nil {
		t.Fatal(err)
	}
	hs := st.GetHistory()
	if len(hs) != queue.MaxHistory || st.GetHistoryDropped() != 74-queue.MaxHistory {
		t.Fatalf("%d entries, %d dropped; want %d and %d", len(hs), st.GetHistoryDropped(), queue.MaxHistory, 74-queue.MaxHistory)
	}
	if hs[len(hs)-1].GetMessage() != "waiting for room (69)" || hs[0].GetMessage() != "waiting for room (6)" {
		t.Errorf("kept %q .. %q, want the last 64", hs[0].GetMessage(), hs[len(hs)-1].GetMessage())
	}
}

func TestThePeerLibraryReadsAStatusWithAHistoryAndCarriesIt(t *testing.T) {
	s := connect(t)
	peer := merrittzk.Connect(t, zktest.Servers(t), s.Paths().Root())
	ctx := testCtx(t)
	_, jid := queuetest.SpawnWithUUID(t, s, "peer-history-uuid")
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Estimating, Message: "by ingestq"})
	j, err := peer.LoadJob(jid)
	if err != nil {
		t.Fatalf("the peer library cannot read a status with a history: %v", err)
	}
	if j.State() != "Estimating" {
		t.Fatalf("the peer reads state %q", j.State())
	}
	// The peer moves the job its way, keeping keys it does not know.
	if err := j.SetStatus("Provisioning", "by the peer"); err != nil {
		t.Fatal(err)
	}
	// Its history, as if the job had entered Estimating long ago.
	path := "/jobs/" + jid + "/status"
	data, err := peer.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	obj["history"].([]any)[1].(map[string]any)["at"] = "2020-01-02T03:04:05.000Z"
	if data, err = json.Marshal(obj); err != nil {
		t.Fatal(err)
	}
	if err := peer.Set(path, data); err != nil {
		t.Fatal(err)
	}
	queuetest.Move(t, s, jid, jobs.Change{To: queue.Downloading, Message: "by ingestq again"})
	st, err := jobs.NewReader(s).JobStatus(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	hs := st.GetHistory()
	if len(hs) != 3 || hs[1].GetTo() != queue.Estimating || hs[2].GetFrom() != queue.Provisioning || hs[2].GetTo() != queue.Downloading {
		t.Fatalf("history after the peer's move: %v", hs)
	}
	// The peer's move is not in the history; the time in Provisioning counts
	// from the status's last_modified the peer wrote, not from the last
	// entry (which says the job entered another state).
	if d := hs[2].GetInState().AsDuration(); d > time.Minute {
		t.Errorf("in state %v, counted from before the peer's move", d)
	}
}
