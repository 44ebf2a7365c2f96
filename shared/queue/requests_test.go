package queue

import "testing"

func TestRequestsAreCountedByOperationAndKindOfNode(t *testing.T) {
	s := &requestStats{root: "/q", n: map[requestKey]int64{}}
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
	}
	for _, k := range kinds {
		if got := s.nodeKind(k.path); got != k.want {
			t.Errorf("nodeKind(%s) = %s, want %s", k.path, got, k.want)
		}
	}

	c := newClient(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, DefaultPriority)
	before := map[requestKey]int64{}
	for _, r := range c.Requests() {
		before[requestKey{r.Op, r.Node}] = r.Count
	}
	cl, err := c.ClaimJob(ctx, jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	grew := map[requestKey]int64{}
	for _, r := range c.Requests() {
		if d := r.Count - before[requestKey{r.Op, r.Node}]; d > 0 {
			grew[requestKey{r.Op, r.Node}] = d
		}
	}
	// The claim takes the lock and rewrites the status in one multi; the
	// release removes the lock in another.
	for _, want := range []requestKey{{"get", "jobs/*/status"}, {"multi", ""}, {"multi.create", "jobs/*/lock"},
		{"multi.set", "jobs/*/status"}, {"multi.delete", "jobs/*/lock"}} {
		if grew[want] == 0 {
			t.Errorf("no %s of %s counted; counted %v", want.op, want.node, grew)
		}
	}
	if grew[requestKey{"multi", ""}] != 2 {
		t.Errorf("%d multis counted, want 2 (claim, release)", grew[requestKey{"multi", ""}])
	}
}
