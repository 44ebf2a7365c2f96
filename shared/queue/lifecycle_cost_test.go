package queue

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/proto"
)

// stageSteps are the states a job goes through, each step a stage's.
var stageSteps = []struct{ from, to JobState }{
	{Pending, Estimating}, {Estimating, Provisioning}, {Provisioning, Downloading}, {Downloading, Processing},
	{Processing, Storing}, {Storing, Recording}, {Recording, Notify}, {Notify, Completed},
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
	_, jids := spawn(t, c, 1, DefaultPriority)
	counts := func() map[string]int64 {
		m := map[string]int64{}
		for _, r := range c.Requests() {
			m[r.Op+" "+r.Node] += r.Count
		}
		return m
	}
	before := counts()
	for _, s := range stageSteps {
		cl, err := c.NewConsumer(s.from, ConsumerOptions{Parts: PartsStatusOnly}).Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if cl.ID() != jids[0] {
			t.Fatalf("took %s, want %s", cl.ID(), jids[0])
		}
		if err := cl.Commit(ctx, Change{To: s.to}); err != nil {
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
	_, jid := spawnWithUUID(t, c, "history-bytes")
	statusPath := c.p.jobStatus(jid)
	canonical := func(when string) *v1.JobStatus {
		t.Helper()
		data := nodeData(t, c, statusPath)
		st, err := decodeJobStatus(statusPath, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if want := string(encodeJobStatus(st)); data != want {
			t.Fatalf("%s: status\n%s\nwant\n%s", when, data, want)
		}
		return st
	}
	for _, s := range stageSteps[:3] {
		step(t, c, jid, Change{To: s.to, Message: "step to " + JobStateName(s.to)})
		canonical("after the step to " + JobStateName(s.to))
	}
	// The claim keeps the entries as read, for its commit to write back.
	st := canonical("before another writer")
	cl, err := c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cl.Job.GetStatus().GetHistory()); n != 4 || len(cl.history.raw) != n {
		t.Fatalf("claim kept %d entries as read of %d, want 4", len(cl.history.raw), n)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Another writer rewrites the history its own way.
	peer := fmt.Sprintf(`{"status":"Downloading","last_modified":"2026-11-22 03:51:07 +0000","message":"","last_successful_status":"Provisioning","retry_count":0,`+
		`"history":[{"at":"2026-11-22T04:51:07.250+01:00","to":"pending"}, { "at" : "2026-11-22T03:51:08.000Z", "from":"Pending","to":"Estimating","node":9501 },`+
		`{"to":"Frozen"},%s],"peer":"kept"}`, appendHistoryEntry(nil, st.GetHistory()[len(st.GetHistory())-1]))
	if _, err := c.conn.Set(statusPath, []byte(peer), -1); err != nil {
		t.Fatal(err)
	}
	read, err := decodeJobStatus(statusPath, []byte(peer))
	if err != nil {
		t.Fatal(err)
	}
	cl, err = c.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if len(cl.history.raw) != 0 {
		t.Fatalf("claim kept %d entries as read of another writer's history, want none", len(cl.history.raw))
	}
	if err := cl.Commit(ctx, Change{To: Processing}); err != nil {
		t.Fatal(err)
	}
	data := nodeData(t, c, statusPath)
	after, err := decodeJobStatus(statusPath, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	hs := after.GetHistory()
	if len(hs) != 4 || !proto.Equal(&v1.JobStatus{History: hs[:3]}, &v1.JobStatus{History: read.GetHistory()}) ||
		hs[3].GetFrom() != Downloading || hs[3].GetTo() != Processing {
		t.Fatalf("history after the commit %v, want the three entries read %v and the step", hs, read.GetHistory())
	}
	want := withKeysOf([]byte(peer), encodeJobStatus(after), jobStatusKeys)
	if data != string(want) {
		t.Fatalf("status\n%s\nwant\n%s", data, want)
	}
	if !strings.Contains(data, `"peer":"kept"`) || strings.Contains(data, `"node"`) || strings.Contains(data, "Frozen") {
		t.Fatalf("status %s: another writer's key kept, the entries rewritten", data)
	}
}

// TestCountingAnOperationNamesItsKindOfNodeAsSplittingThePathDoes: the
// kind of node an operation is counted under, worked out without
// splitting the path (every operation of every multi is counted), is the
// one splitting it into segments gives.
func TestCountingAnOperationNamesItsKindOfNodeAsSplittingThePathDoes(t *testing.T) {
	split := func(root, path string) string {
		segs := strings.Split(strings.TrimPrefix(strings.TrimPrefix(path, root), "/"), "/")
		for i, seg := range segs {
			var parent string
			if i > 0 {
				parent = segs[i-1]
			}
			switch {
			case strings.HasPrefix(seg, "jid") || strings.HasPrefix(seg, "bid"):
				if len(seg) > 3 {
					segs[i] = "*"
				}
			case parent == "states" || parent == "batch-uuids" || parent == "workers" || parent == "counters" ||
				parent == "local-ids" || parent == "console-sessions" || (i == 2 && segs[0] == "locks"):
				segs[i] = "*"
			case i >= 2 && parent == "*" && (segs[i-2] == "states" || segs[i-2] == "local-ids"):
				segs[i] = "*"
			}
		}
		if kind := strings.Join(segs, "/"); kind != "" {
			return kind
		}
		return "/"
	}
	s := &requestStats{root: "/q", n: map[requestKey]int64{}}
	for _, p := range []string{"/q", "/q/", "/q//", "/", "", "/q/jobs", "/q/jobs/jid", "/q/jobs/jid0000000001/status",
		"/q/jobs/states/pending/05-jid0000000001", "/q/batches/bid0000000001/states/batch-processing/jid0000000001",
		"/q/batch-uuids/x/y", "/q/locks/storage/ark_99999_fk4x", "/q/locks/queue/ingest", "/q/locks/x", "/q/locks",
		"/q/workers/w/x", "/q/local-ids/ark/loc001/more", "/q/console-sessions/s", "/q/counters/c", "/qq/jobs",
		"/q/states/states/states/x", "/q/bid/jid/bidx/jidy", "/q/jobs/states/*/x", "/q/a//b", "/other/path"} {
		if got, want := s.nodeKind(p), split(s.root, p); got != want {
			t.Errorf("nodeKind(%q) = %q, want %q", p, got, want)
		}
	}
}
