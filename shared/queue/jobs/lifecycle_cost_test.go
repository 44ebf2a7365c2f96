package jobs_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"google.golang.org/protobuf/proto"
)

// stageSteps are the states a job goes through, each step a stage's.
var stageSteps = []struct{ from, to queue.JobState }{
	{queue.Pending, queue.Estimating}, {queue.Estimating, queue.Provisioning}, {queue.Provisioning, queue.Downloading}, {queue.Downloading, queue.Processing},
	{queue.Processing, queue.Storing}, {queue.Storing, queue.Recording}, {queue.Recording, queue.Notify}, {queue.Notify, queue.Completed},
}

// TestAJobsStepsCostTheOperationsTheContractNeedsAndNoMore pins what a
// job's way from Pending to Completed sends inside its multis and
// multiReads, taken by consumers that read the status alone: per step, the
// claim reads the status and takes the lock with its fencing rewrite of
// the status; the commit rewrites the status, moves the state entry and
// removes the lock; the step into Completed also reads the bid, checks the
// batch and moves the batch reference. An operation more is a cost every
// job pays at every step: it must be meant.
func TestAJobsStepsCostTheOperationsTheContractNeedsAndNoMore(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	counts := func() map[string]int64 {
		m := map[string]int64{}
		for _, r := range c.Requests() {
			m[r.Op+" "+r.Node] += r.Count
		}
		return m
	}
	before := counts()
	for _, s := range stageSteps {
		cl, err := c.NewConsumer(s.from, jobs.ConsumerOptions{Parts: queue.PartsStatusOnly}).Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cl.ID() != jids[0] {
			t.Fatalf("took %s, want %s", cl.ID(), jids[0])
		}
		if err := cl.Commit(ctx, jobs.Change{To: s.to}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int64{}
	for k, n := range counts() {
		if d := n - before[k]; d > 0 {
			got[k] = d
		}
	}
	steps := int64(len(stageSteps))
	want := map[string]int64{
		"multiread *": steps + 1, "multiread.get jobs/*/status": steps, "multiread.get jobs/*/bid": 1,
		"multi *":                  2 * steps,
		"multi.create jobs/*/lock": steps, "multi.set jobs/*/status": 2 * steps,
		"multi.delete jobs/states/*/*": steps, "multi.create jobs/states/*/*": steps, "multi.delete jobs/*/lock": steps,
		"multi.check batches/*/status": 1, "multi.delete batches/*/states/*/*": 1, "multi.create batches/*/states/*/*": 1,
		"multi.set batches/*/states/*": 1,
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		switch {
		case strings.HasPrefix(k, "multi"):
			if got[k] != want[k] {
				t.Errorf("%s: %d, want %d", k, got[k], want[k])
			}
		case strings.HasPrefix(k, "children ") || strings.HasPrefix(k, "exists "):
			// A fresh consumer's listing of its state, its look at a lock
			// before its first claim and the client's pause watch.
			if got[k] > steps+1 {
				t.Errorf("%s: %d, want at most one a step", k, got[k])
			}
		default:
			t.Errorf("%s: %d, want none", k, got[k])
		}
	}
	for k, n := range want {
		if got[k] == 0 {
			t.Errorf("%s: none, want %d", k, n)
		}
	}
}

// TestACommitWritesTheHistoryAsEncodingItWould: a commit writes the
// entries it keeps as read when encoding them would write those bytes,
// and encodes anew those another writer wrote otherwise (a state in lower
// case, an offset time, space, a key of its own, an entry that does not
// read, which is dropped): either way the status is what encoding the
// history read and the new entry writes.
func TestACommitWritesTheHistoryAsEncodingItWould(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jid := queuetest.SpawnWithUUID(t, c.s, "history-bytes")
	statusPath := c.p.Job(jid).Status()
	canonical := func(when string) *v1.JobStatus {
		t.Helper()
		data := queuetest.NodeData(t, c.s, statusPath)
		st, err := queue.DecodeJobStatus(statusPath, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if want := string(queue.EncodeJobStatus(st)); data != want {
			t.Fatalf("%s: status\n%s\nwant\n%s", when, data, want)
		}
		return st
	}
	for _, s := range stageSteps[:3] {
		queuetest.Move(t, c.s, jid, jobs.Change{To: s.to, Message: "step to " + queue.JobStateName(s.to)})
		canonical("after the step to " + queue.JobStateName(s.to))
	}
	// The claim keeps the entries as read, for its commit to write back.
	canonical("before another writer")
	// Each entry as encoding writes it, which the status is.
	entries := historyEntries(t, queuetest.NodeData(t, c.s, statusPath))
	cl, err := c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cl.Job.GetStatus().GetHistory()); n != 4 || cl.KeptEntries() != n {
		t.Fatalf("claim kept %d entries as read of %d, want 4", cl.KeptEntries(), n)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Another writer rewrites the history its own way.
	peer := fmt.Sprintf(`{"status":"Downloading","last_modified":"2026-11-22 03:51:07 +0000","message":"","last_successful_status":"Provisioning","retry_count":0,`+
		`"history":[{"at":"2026-11-22T04:51:07.250+01:00","to":"pending"}, { "at" : "2026-11-22T03:51:08.000Z", "from":"Pending","to":"Estimating","node":9501 },`+
		`{"to":"Frozen"},%s],"peer":"kept"}`, entries[len(entries)-1])
	if _, err := c.z.Set(ctx, statusPath, []byte(peer), -1); err != nil {
		t.Fatal(err)
	}
	read, err := queue.DecodeJobStatus(statusPath, []byte(peer))
	if err != nil {
		t.Fatal(err)
	}
	cl, err = c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if n := cl.KeptEntries(); n != 0 {
		t.Fatalf("claim kept %d entries as read of another writer's history, want none", n)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Processing}); err != nil {
		t.Fatal(err)
	}
	data := queuetest.NodeData(t, c.s, statusPath)
	after, err := queue.DecodeJobStatus(statusPath, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	hs := after.GetHistory()
	if len(hs) != 4 || !proto.Equal(&v1.JobStatus{History: hs[:3]}, &v1.JobStatus{History: read.GetHistory()}) ||
		hs[3].GetFrom() != queue.Downloading || hs[3].GetTo() != queue.Processing {
		t.Fatalf("history after the commit %v, want the three entries read %v and the step", hs, read.GetHistory())
	}
	want := queue.RewriteJobStatus([]byte(peer), after, nil)
	if data != string(want) {
		t.Fatalf("status\n%s\nwant\n%s", data, want)
	}
	if !strings.Contains(data, `"peer":"kept"`) || strings.Contains(data, `"node"`) || strings.Contains(data, "Frozen") {
		t.Fatalf("status %s: another writer's key kept, the entries rewritten", data)
	}
}

// historyEntries are the entries of a status node's history, each as its
// bytes read.
func historyEntries(t *testing.T, data string) []json.RawMessage {
	t.Helper()
	var hs []json.RawMessage
	if err := json.Unmarshal([]byte(queuetest.JSONField(t, data, "history")), &hs); err != nil {
		t.Fatalf("history of %s: %v", data, err)
	}
	return hs
}
