package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestRequestsAreCountedByOperationAndKindOfNode(t *testing.T) {
	const root = "/q"
	kinds := []struct{ path, want string }{
		{"/q/jobs/jid0000000001/status", "jobs/*/status"},
		{"/q/jobs/jid", "jobs/jid"},
		{"/q/jobs/states/pending/05-jid0000000001", "jobs/states/*/*"},
		{"/q/jobs/states/pending", "jobs/states/*"},
		{"/q/batches/bid0000000001/states/batch-processing/jid0000000001", "batches/*/states/*/*"},
		{"/q/batches/bid0000000001/status-report", "batches/*/status-report"},
		{"/q/batch-uuids/5b3e0a1c", "batch-uuids/*"},
		{"/q/locks/storage/ark_99999_fk4x", "locks/storage/*"},
		{"/q/locks/queue/ingest", "locks/queue/*"},
		{"/q/workers/downloader-1", "workers/*"},
		{"/q/local-ids/ark_99999_fk4/loc001", "local-ids/*/*"},
		{"/q", "/"},
	}
	for _, k := range kinds {
		if got := session.NodeKind(root, k.path); got != k.want {
			t.Errorf("nodeKind(%s) = %s, want %s", k.path, got, k.want)
		}
	}

	s := queuetest.Connect(t, zktest.Root(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jids := queuetest.SpawnN(t, s, []batches.NewJob{{Priority: queue.DefaultPriority}}, queue.Pending)
	type requestKey struct{ op, node string }
	before := map[requestKey]int64{}
	for _, r := range s.Requests() {
		before[requestKey{r.Op, r.Node}] = r.Count
	}
	cl, err := jobs.New(s).ClaimJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	grew := map[requestKey]int64{}
	for _, r := range s.Requests() {
		if d := r.Count - before[requestKey{r.Op, r.Node}]; d > 0 {
			grew[requestKey{r.Op, r.Node}] = d
		}
	}
	// The claim takes the lock and rewrites the status in one multi; the
	// release removes the lock in another.
	for _, want := range []requestKey{{"multiread.get", "jobs/*/status"}, {"multi", "*"}, {"multi.create", "jobs/*/lock"},
		{"multi.set", "jobs/*/status"}, {"multi.delete", "jobs/*/lock"}} {
		if grew[want] == 0 {
			t.Errorf("no %s of %s counted; counted %v", want.op, want.node, grew)
		}
	}
	if grew[requestKey{"multi", "*"}] != 2 {
		t.Errorf("%d multis counted, want 2 (claim, release)", grew[requestKey{"multi", "*"}])
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
	const root = "/q"
	for _, p := range []string{"/q", "/q/", "/q//", "/", "", "/q/jobs", "/q/jobs/jid", "/q/jobs/jid0000000001/status",
		"/q/jobs/states/pending/05-jid0000000001", "/q/batches/bid0000000001/states/batch-processing/jid0000000001",
		"/q/batch-uuids/x/y", "/q/locks/storage/ark_99999_fk4x", "/q/locks/queue/ingest", "/q/locks/x", "/q/locks",
		"/q/workers/w/x", "/q/local-ids/ark/loc001/more", "/q/console-sessions/s", "/q/counters/c", "/qq/jobs",
		"/q/states/states/states/x", "/q/bid/jid/bidx/jidy", "/q/jobs/states/*/x", "/q/a//b", "/other/path"} {
		if got, want := session.NodeKind(root, p), split(root, p); got != want {
			t.Errorf("nodeKind(%q) = %q, want %q", p, got, want)
		}
	}
}
