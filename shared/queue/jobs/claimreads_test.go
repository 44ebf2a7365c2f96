package jobs_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/internal/multihook"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestAClaimChecksOnlyTheDataNodesAWriterMayChange pins what a stage's
// claim that reads data nodes sends: the status, the nodes it asked for
// and the priority in one multiRead, not the bid, which the configuration
// names; then the lock with the fencing rewrite of the status and a check
// of each node read that a writer may change, not of the configuration or
// the bid (written only with the job) nor of the priority (read only to
// mend it). Its commit still checks the batch.
func TestAClaimChecksOnlyTheDataNodesAWriterMayChange(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	bid, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	counts := func() map[string]int64 {
		m := map[string]int64{}
		for _, r := range c.Requests() {
			m[r.Op+" "+r.Node] += r.Count
		}
		return m
	}
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration | queue.PartSpaceNeeded})
	before := counts()
	cl, err := co.Next(ctx)
	if err != nil || cl.ID() != jids[0] {
		t.Fatalf("claimed %v, %v; want %s", cl, err, jids[0])
	}
	if cl.Job.GetBid() != bid {
		t.Errorf("the claim's job names batch %q, want %s", cl.Job.GetBid(), bid)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for k, n := range counts() {
		if d := n - before[k]; d > 0 && (strings.HasPrefix(k, "multi.") || strings.HasPrefix(k, "multiread.")) {
			got[k] = d
		}
	}
	want := map[string]int64{
		"multiread.get jobs/*/status": 1, "multiread.get jobs/*/configuration": 1, "multiread.get jobs/*/space_needed": 1,
		"multiread.get jobs/*/priority": 1,
		"multi.create jobs/*/lock":      1, "multi.set jobs/*/status": 2, "multi.check jobs/*/space_needed": 1,
		"multi.check batches/*/status": 1, "multi.delete jobs/states/*/*": 1, "multi.create jobs/states/*/*": 1,
		"multi.delete jobs/*/lock": 1,
	}
	if !maps.Equal(got, want) {
		for _, k := range slices.Sorted(maps.Keys(got)) {
			t.Logf("%s: %d (want %d)", k, got[k], want[k])
		}
		t.Errorf("the claim and commit sent %v, want %v", got, want)
	}
}

// TestAClaimSeesDataAnotherWriterChangedWhileItWasClaiming: a writer that
// changes a job's data without its status (a peer's consumer that records
// identifiers and lets the job go) between a claim's read and its lock
// makes the claim read again: the stage works from the data as it is, not
// as it was.
func TestAClaimSeesDataAnotherWriterChangedWhileItWasClaiming(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	raw := zktest.RawConn(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	ids := c.p.Job(jids[0]).Node(queue.NodeIdentifiers)
	zktest.WriteNode(t, raw, ids, `{"primary_id":"","local_id":["before"]}`)
	lock := c.p.Job(jids[0]).Lock()
	changed := false
	c.cutMultis(func(ops []any, send multihook.Send) ([]zk.MultiResponse, error) {
		for _, op := range ops {
			if cr, ok := op.(*zk.CreateRequest); ok && cr.Path == lock && !changed {
				changed = true
				zktest.WriteNode(t, raw, ids, `{"primary_id":"ark:/99999/fk4meanwhile","local_id":["after"]}`)
			}
		}
		return send(ops)
	})
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration | queue.PartIdentifiers}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	if !changed {
		t.Fatal("the identifiers were not changed during the claim: the test tested nothing")
	}
	if got := cl.Job.GetIdentifiers().GetPrimaryId(); got != "ark:/99999/fk4meanwhile" {
		t.Errorf("the claim read primary id %q, want the one written while it claimed", got)
	}
}

// TestAPeersJobsStepChecksTheBatchItsBidNodeNames: a job the peer library
// created names no batch in its configuration, so a claim that did not
// read its bid node reads it at the commit, which checks the batch all the
// same: a job whose batch is gone is failed, not moved on.
func TestAPeersJobsStepChecksTheBatchItsBidNodeNames(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	bid := peerBatch(t, peer)
	j, err := peer.CreateJob(bid, 5, merrittzk.JobConfiguration("demo_profile", "peer", "http://127.0.0.1:1/a.txt", "file", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration}).Next(ctx)
	if err != nil || cl.ID() != j.ID {
		t.Fatalf("claimed %v, %v; want %s", cl, err, j.ID)
	}
	zktest.DeleteTree(t, zktest.RawConn(t), c.p.Batch(bid).Dir())
	err = cl.Commit(ctx, jobs.Change{To: queue.Estimating})
	var nb *queue.NoBatchError
	if !errors.As(err, &nb) || !nb.Failed || nb.Batch != bid {
		t.Fatalf("commit of a peer's job whose batch is gone: %v; want it failed for want of batch %s", err, bid)
	}
	if st := queuetest.Status(t, c.s, j.ID); st.GetStatus() != queue.Failed {
		t.Errorf("the job is %s, want Failed", queue.JobStateName(st.GetStatus()))
	}
}
