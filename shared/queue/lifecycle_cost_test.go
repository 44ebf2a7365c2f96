package queue

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
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

// TestMultiWriteAnswersAsTheLibrarysMulti: the same multis, sent by
// multiWrite and by go-zookeeper's Multi on two copies of one tree, are
// applied alike and answered alike: every operation's path, stat and
// error, the call's error, whether they succeed or one fails (a node
// missing or there already, a version moved on) at the first, a middle or
// the last operation.
func TestMultiWriteAnswersAsTheLibrarysMulti(t *testing.T) {
	c := newClient(t)
	conn := c.conn.Conn
	acl := zk.WorldACL(zk.PermAll)
	for _, side := range []string{"/lib", "/own"} {
		for _, p := range []string{"", "/a", "/b"} {
			if _, err := conn.Create(c.p.root+side+p, []byte("x"), 0, acl); err != nil {
				t.Fatal(err)
			}
		}
	}
	type build func(root string) []any
	cases := []struct {
		name string
		ops  build
	}{
		{"all applied", func(r string) []any {
			return []any{
				&zk.CreateRequest{Path: r + "/c", Data: []byte("data"), Acl: acl},
				&zk.CreateRequest{Path: r + "/e", Acl: acl, Flags: zk.FlagEphemeral},
				&zk.CreateRequest{Path: r + "/s-", Data: []byte{}, Acl: acl, Flags: zk.FlagSequence},
				&zk.SetDataRequest{Path: r + "/a", Data: []byte(strings.Repeat("é", 700)), Version: 0},
				&zk.CheckVersionRequest{Path: r + "/a", Version: 1},
				&zk.SetDataRequest{Path: r + "/b", Data: nil, Version: -1},
				&zk.DeleteRequest{Path: r + "/c", Version: -1},
			}
		}},
		{"first fails: node missing", func(r string) []any {
			return []any{&zk.SetDataRequest{Path: r + "/missing", Data: []byte("x"), Version: -1}, &zk.DeleteRequest{Path: r + "/e", Version: -1}}
		}},
		{"a middle one fails: version moved on", func(r string) []any {
			return []any{&zk.SetDataRequest{Path: r + "/a", Data: []byte("y"), Version: -1},
				&zk.CheckVersionRequest{Path: r + "/b", Version: 7}, &zk.DeleteRequest{Path: r + "/e", Version: -1}}
		}},
		{"the last fails: node there already", func(r string) []any {
			return []any{&zk.DeleteRequest{Path: r + "/e", Version: -1}, &zk.CreateRequest{Path: r + "/a", Acl: acl}}
		}},
		{"a delete of a node with children", func(r string) []any {
			return []any{&zk.DeleteRequest{Path: r, Version: -1}}
		}},
		{"no operation", func(string) []any { return nil }},
	}
	sameErr := func(a, b error) bool { return a == b || (a != nil && b != nil && a.Error() == b.Error()) }
	for _, tc := range cases {
		lib, libErr := conn.Multi(tc.ops(c.p.root + "/lib")...)
		own, ownErr := c.conn.wire.multiWrite(tc.ops(c.p.root + "/own"))
		if !sameErr(libErr, ownErr) {
			t.Errorf("%s: error %v, the library's %v", tc.name, ownErr, libErr)
		}
		if len(own) != len(lib) {
			t.Errorf("%s: %d answers, the library's %d", tc.name, len(own), len(lib))
			continue
		}
		for i := range lib {
			l, o := lib[i], own[i]
			if strings.Replace(l.String, "/lib", "/own", 1) != o.String || !sameErr(l.Error, o.Error) || (l.Stat == nil) != (o.Stat == nil) ||
				(l.Stat != nil && (l.Stat.Version != o.Stat.Version || l.Stat.DataLength != o.Stat.DataLength)) {
				t.Errorf("%s: answer %d %+v, the library's %+v", tc.name, i, o, l)
			}
		}
	}
	for _, p := range []string{"", "/a", "/b", "/e", "/c"} {
		ld, ls, lerr := conn.Get(c.p.root + "/lib" + p)
		od, os, oerr := conn.Get(c.p.root + "/own" + p)
		if lerr != oerr || string(ld) != string(od) || (ls != nil && (ls.Version != os.Version || (ls.EphemeralOwner == 0) != (os.EphemeralOwner == 0))) {
			t.Errorf("%s: %q %v (%v), the library's %q %v (%v)", p, od, os, oerr, ld, ls, lerr)
		}
	}
	lch, _, _ := conn.Children(c.p.root + "/lib")
	och, _, _ := conn.Children(c.p.root + "/own")
	slices.Sort(lch)
	slices.Sort(och)
	if !slices.Equal(lch, och) {
		t.Errorf("children %v, the library's %v", och, lch)
	}
	// A request past the client's buffer is refused as the library refuses it.
	big := []any{&zk.SetDataRequest{Path: c.p.root + "/own/a", Data: make([]byte, 2<<20), Version: -1}}
	if _, err := c.conn.wire.multiWrite(big); err == nil {
		t.Error("a multi past the client's buffer was sent")
	}
}
