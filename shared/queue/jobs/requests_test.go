package jobs_test

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

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
		change  jobs.Change
		node    string
		want    string
		multis  int64 // the commit's requests (the claim's aside)
	}{
		{"our job, space_needed set", func(string) {}, jobs.Change{To: queue.Estimating, SpaceNeeded: &space}, "space_needed", "42", 1},
		{"our job, store created", func(string) {}, jobs.Change{To: queue.Estimating, Store: &v1.Store{ManifestUrl: "u", Mode: "add"}}, "store", `"manifest_url":"u"`, 1},
		{"a peer's job without space_needed", func(jid string) {
			if err := c.z.Delete(ctx, c.p.Job(jid).Node(queue.NodeSpaceNeeded), -1); err != nil {
				t.Fatal(err)
			}
		}, jobs.Change{To: queue.Estimating, SpaceNeeded: &space}, "space_needed", "42", 2},
		{"a requeued job with a store already", func(jid string) {
			if _, err := c.z.Create(ctx, c.p.Job(jid).Node(queue.NodeStore), []byte(`{"manifest_url":"old","mode":"add","delete":"false"}`), 0); err != nil {
				t.Fatal(err)
			}
		}, jobs.Change{To: queue.Estimating, Store: &v1.Store{ManifestUrl: "u", Mode: "add"}}, "store", `"manifest_url":"u"`, 2},
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
			_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			jid := jids[0]
			tc.prepare(jid)
			// Claimed as a stage claims it, reading no data node.
			cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartsStatusOnly}).Next(ctx)
			if err != nil || cl.ID() != jid {
				t.Fatalf("claimed %v, %v; want %s", cl, err, jid)
			}
			multis, lookups := count("multi"), count("exists")
			if err := cl.Commit(ctx, tc.change); err != nil {
				t.Fatal(err)
			}
			if got := queuetest.NodeData(t, c.s, c.p.Job(jid).Node(tc.node)); !strings.Contains(got, tc.want) {
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
			_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			cl, err := c.ClaimJob(ctx, jids[0])
			if err != nil {
				t.Fatal(err)
			}
			lock, err := c.LockStorage(ctx, ark)
			if err != nil {
				t.Fatal(err)
			}
			if tc.gone {
				if err := c.z.Delete(ctx, c.p.Locks().StorageLock(ark), -1); err != nil {
					t.Fatal(err)
				}
			}
			before := total(c)
			if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating, Unlock: []*jobs.ObjectLock{lock}}); err != nil {
				t.Fatal(err)
			}
			if n := total(c) - before; n != tc.requests {
				t.Errorf("%d requests for the commit, want %d", n, tc.requests)
			}
			if ok, _, _ := c.z.Exists(ctx, c.p.Locks().StorageLock(ark)); ok {
				t.Error("the storage lock is still held after the commit")
			}
			before = total(c)
			if err := lock.Unlock(ctx); err != nil || total(c) != before {
				t.Errorf("Unlock after the commit: %v, %d requests; want nothing to do", err, total(c)-before)
			}
			if st := queuetestStatus(t, c, jids[0]); st != queue.Estimating {
				t.Errorf("job in %s, want Estimating", queue.JobStateName(st))
			}
		})
	}
}

// total is every request c has sent.
func total(c *client) int64 {
	var n int64
	for _, r := range c.Requests() {
		if !strings.HasPrefix(r.Op, "multi.") {
			n += r.Count
		}
	}
	return n
}

func queuetestStatus(t *testing.T, c *client, jid string) queue.JobState {
	t.Helper()
	st, err := c.JobStatus(testCtx(t), jid)
	if err != nil {
		t.Fatal(err)
	}
	return st.GetStatus()
}
