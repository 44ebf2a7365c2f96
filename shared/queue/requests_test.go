package queue

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

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
		{"/q", "/"},
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

// TestCommitsGuessWhichDataNodesExistAndCorrectAWrongGuess: a commit
// writing a node the claim did not read looks nothing up; a job whose
// nodes are not what the guess expects (a peer left out space_needed, a
// requeued job has its store already) is still written right.
func TestCommitsGuessWhichDataNodesExistAndCorrectAWrongGuess(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	space := int64(42)
	cases := []struct {
		name    string
		prepare func(jid string) // the job's nodes before the commit
		change  Change
		node    string
		want    string
		multis  int64 // the commit's requests (the claim's aside)
	}{
		{"our job, space_needed set", func(string) {}, Change{To: Estimating, SpaceNeeded: &space}, "space_needed", "42", 1},
		{"our job, store created", func(string) {}, Change{To: Estimating, Store: &v1.Store{ManifestUrl: "u", Mode: "add"}}, "store", `"manifest_url":"u"`, 1},
		{"a peer's job without space_needed", func(jid string) {
			if err := c.conn.Delete(c.p.jobNode(jid, nodeSpaceNeeded), -1); err != nil {
				t.Fatal(err)
			}
		}, Change{To: Estimating, SpaceNeeded: &space}, "space_needed", "42", 2},
		{"a requeued job with a store already", func(jid string) {
			if _, err := c.conn.Create(c.p.jobNode(jid, nodeStore), []byte(`{"manifest_url":"old","mode":"add","delete":"false"}`), 0, c.acl); err != nil {
				t.Fatal(err)
			}
		}, Change{To: Estimating, Store: &v1.Store{ManifestUrl: "u", Mode: "add"}}, "store", `"manifest_url":"u"`, 2},
	}
	count := func(op string) int64 {
		var n int64
		for _, r := range c.Requests() {
			if r.Op == op {
				n += r.Count
			}
		}
		return n
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, jids := spawn(t, c, 1, DefaultPriority)
			jid := jids[0]
			tc.prepare(jid)
			// Claimed as a stage claims it, reading no data node.
			cl, err := c.NewConsumer(Pending, ConsumerOptions{Parts: PartsStatusOnly}).Next(ctx)
			if err != nil || cl.ID() != jid {
				t.Fatalf("claimed %v, %v; want %s", cl, err, jid)
			}
			multis, lookups := count("multi"), count("exists")
			if err := cl.Commit(ctx, tc.change); err != nil {
				t.Fatal(err)
			}
			if got := nodeData(t, c, c.p.jobNode(jid, tc.node)); !strings.Contains(got, tc.want) {
				t.Errorf("%s holds %s, want %s", tc.node, got, tc.want)
			}
			if n := count("multi") - multis; n != tc.multis {
				t.Errorf("%d multis, want %d", n, tc.multis)
			}
			if n := count("exists") - lookups; n != 0 {
				t.Errorf("%d existence lookups, want none", n)
			}
		})
	}
}

func TestACommitReleasesTheObjectLocksItIsGiven(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	cases := []struct {
		name     string
		gone     bool // the lock vanished before the commit (an operator removed it)
		requests int64
	}{
		{"held", false, 1},
		{"gone already", true, 2},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ark := fmt.Sprintf("ark:/99999/fk4unlock%d", i)
			_, jids := spawn(t, c, 1, DefaultPriority)
			cl, err := c.ClaimJob(ctx, jids[0])
			if err != nil {
				t.Fatal(err)
			}
			lock, err := c.LockStorage(ctx, ark)
			if err != nil {
				t.Fatal(err)
			}
			if tc.gone {
				if err := c.conn.Delete(c.p.storageLock(ark), -1); err != nil {
					t.Fatal(err)
				}
			}
			before := total(c)
			if err := cl.Commit(ctx, Change{To: Estimating, Unlock: []*ObjectLock{lock}}); err != nil {
				t.Fatal(err)
			}
			if n := total(c) - before; n != tc.requests {
				t.Errorf("%d requests for the commit, want %d", n, tc.requests)
			}
			if ok, _, _ := c.conn.Exists(c.p.storageLock(ark)); ok {
				t.Error("the storage lock is still held after the commit")
			}
			before = total(c)
			if err := lock.Unlock(ctx); err != nil || total(c) != before {
				t.Errorf("Unlock after the commit: %v, %d requests; want nothing to do", err, total(c)-before)
			}
			if st := queuetestStatus(t, c, jids[0]); st != Estimating {
				t.Errorf("job in %s, want Estimating", JobStateName(st))
			}
		})
	}
}

// total is every request c has sent.
func total(c *Client) int64 {
	var n int64
	for _, r := range c.Requests() {
		if !strings.HasPrefix(r.Op, "multi.") {
			n += r.Count
		}
	}
	return n
}

func queuetestStatus(t *testing.T, c *Client, jid string) JobState {
	t.Helper()
	st, err := c.JobStatus(testCtx(t), jid)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetStatus()
}
