package queue

import (
	"errors"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/zktest"
)

// spawningBatch makes a batch whose jobs are being spawned, and n jobs for it.
func spawningBatch(t *testing.T, c *Client, n int) (*BatchClaim, []NewJob) {
	t.Helper()
	ctx := testCtx(t)
	bid, err := c.CreateBatch(ctx, sampleSubmission())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, BatchChange{To: BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	jobs := make([]NewJob, n)
	for i := range jobs {
		jobs[i] = NewJob{Priority: DefaultPriority, Configuration: &v1.JobConfiguration{
			ProfileName: "demo_profile", Submitter: "dana", PayloadUrl: "http://127.0.0.1:1/f.checkm",
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: v1.SubmissionMode_SUBMISSION_MODE_ADD,
			BatchEntry: int32(i)}}
	}
	return bc, jobs
}

// cutter loses the answers of chosen multis sent by a client: the n-th
// multi of a kind (counted from 1) is applied or not, and its caller told
// the connection closed, as when a ZooKeeper server goes away under it.
type cutter struct {
	mu     sync.Mutex
	counts map[string]int
	// lose says, for the n-th multi of kind, whether to lose its answer and
	// whether the server applies it first.
	lose func(kind string, n int) (lose, apply bool)
	lost int
}

func (ct *cutter) install(c *Client) {
	send := c.group.send
	ct.counts = map[string]int{}
	c.group.send = func(ops []any) ([]zk.MultiResponse, error) {
		kind := "other"
		switch {
		case writes(ops, c.p.jobSeq()):
			kind = "reserve"
		case slices.ContainsFunc(ops, func(op any) bool {
			cr, ok := op.(*zk.CreateRequest)
			return ok && strings.HasSuffix(cr.Path, "/"+nodeConfig) && strings.Contains(cr.Path, "/jobs/jid")
		}):
			kind = "write"
		}
		ct.mu.Lock()
		ct.counts[kind]++
		lose, apply := ct.lose(kind, ct.counts[kind])
		if lose {
			ct.lost++
		}
		ct.mu.Unlock()
		if !lose {
			return send(ops)
		}
		if apply {
			send(ops)
		}
		return nil, zk.ErrConnectionClosed
	}
}

// checkNoHalfJobs fails the test if a job node has no status or a job of
// the batch is missing a place, and returns the batch's jobs.
func checkNoHalfJobs(t *testing.T, c *Client, bid string) []string {
	t.Helper()
	ctx := testCtx(t)
	damages, err := fsckDamages(ctx, c, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range damages {
		if i == 5 {
			t.Errorf("fsck: %d damages in all", len(damages))
			break
		}
		t.Errorf("fsck: %s", d)
	}
	names, _, err := c.children(ctx, path.Dir(c.p.jobSeq()))
	if err != nil {
		t.Fatal(err)
	}
	refs, err := c.BatchJobIDs(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, n := range names {
		if strings.HasPrefix(n, "jid") {
			jobs = append(jobs, n)
		}
	}
	if got := refs[folderProcessing]; len(got) != len(jobs) {
		t.Errorf("%d job nodes, %d referenced by the batch", len(jobs), len(got))
	}
	return jobs
}

// TestJobCreationWhoseAnswersAreLostCreatesEachJobOnce: the connection
// drops under the batcher while it creates a batch's jobs (a ZooKeeper
// leader is lost), with id reservations and job writes with the server,
// some applied, some not. Creation must go on, each job made once, and no
// job node left without a status.
func TestJobCreationWhoseAnswersAreLostCreatesEachJobOnce(t *testing.T) {
	c := newClientAt(t, zktest.Root(t))
	ctx := testCtx(t)
	const n = 1500
	bc, jobs := spawningBatch(t, c, n)
	ct := &cutter{lose: func(kind string, i int) (bool, bool) {
		switch {
		case kind == "reserve" && i == 2, kind == "write" && i == 3:
			return true, true
		case kind == "reserve" && i == 4, kind == "write" && i == 5:
			return true, false
		}
		return false, false
	}}
	ct.install(c)
	ids, err := bc.CreateJobs(ctx, jobs)
	if err != nil {
		t.Fatalf("CreateJobs across lost answers: %v", err)
	}
	if ct.lost != 4 {
		t.Fatalf("%d answers lost, want 4: the test no longer cuts what it means to", ct.lost)
	}
	if len(ids) != n || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != n {
		t.Fatalf("CreateJobs returned %d ids, want %d distinct", len(ids), n)
	}
	jids := checkNoHalfJobs(t, c, bc.ID())
	if len(jids) != n {
		t.Errorf("%d jobs exist, want %d", len(jids), n)
	}
	spawned, err := bc.SpawnedEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(spawned) != n {
		t.Errorf("%d distinct batch entries, want %d", len(spawned), n)
	}
}

// TestJobCreationThatFailsLeavesNoJobWithoutStatus: when creating a batch's
// jobs fails for good (ZooKeeper stays away, or the batcher lost the
// batch), the ids it reserved and did not write are removed: every job
// node left is a whole job of the batch, and fsck finds nothing.
func TestJobCreationThatFailsLeavesNoJobWithoutStatus(t *testing.T) {
	cases := []struct {
		name string
		lose func(c *Client, bc *BatchClaim) func(kind string, i int) (bool, bool)
	}{
		{"id reservations lost from the third on", func(*Client, *BatchClaim) func(string, int) (bool, bool) {
			return func(kind string, i int) (bool, bool) { return kind == "reserve" && i >= 3, false }
		}},
		{"job writes lost from the third on", func(*Client, *BatchClaim) func(string, int) (bool, bool) {
			return func(kind string, i int) (bool, bool) { return kind == "write" && i >= 3, false }
		}},
		{"the batch's lock lost while its jobs are written", func(c *Client, bc *BatchClaim) func(string, int) (bool, bool) {
			return func(kind string, i int) (bool, bool) {
				if kind == "write" && i == 3 {
					// Another batcher's session expired this one's lock.
					if err := c.conn.Delete(c.p.batchLock(bc.ID()), -1); err != nil {
						t.Errorf("removing the batch lock: %v", err)
					}
				}
				return false, false
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientAt(t, zktest.Root(t))
			ctx := testCtx(t)
			bc, jobs := spawningBatch(t, c, 1500)
			ct := &cutter{lose: tc.lose(c, bc)}
			ct.install(c)
			if _, err := bc.CreateJobs(ctx, jobs); err == nil {
				t.Fatal("CreateJobs succeeded; the test means it to fail")
			}
			c.group.send = func(ops []any) ([]zk.MultiResponse, error) { return c.conn.Multi(ops...) }
			checkNoHalfJobs(t, c, bc.ID())
		})
	}
}

// TestRequeueWaitsUntilTheBatchsJobsAreAllCreated: an operator requeues a
// failed job while its batch's jobs are still being created. The batcher
// learns which rows have jobs by listing the batch's folders one after the
// other; a job moving from batch-failed to batch-processing between two of
// those lists is missed and its row made a job again. The requeue is
// refused (FailedPrecondition) until spawning is over, and then goes through.
func TestRequeueWaitsUntilTheBatchsJobsAreAllCreated(t *testing.T) {
	c := newClientAt(t, zktest.Root(t))
	ctx := testCtx(t)
	bc, jobs := spawningBatch(t, c, 3)
	ids, err := bc.CreateJobs(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operatorOf(c).FailJob(ctx, ids[0], "bad row"); err != nil {
		t.Fatal(err)
	}
	_, err = operatorOf(c).RequeueJob(ctx, ids[0], 0, "")
	if !errors.Is(err, ErrWrongState) {
		t.Fatalf("requeue while the batch's jobs are being created: %v, want ErrWrongState", err)
	}
	if st, err := c.JobStatus(ctx, ids[0]); err != nil || st.GetStatus() != Failed {
		t.Fatalf("the refused requeue moved the job: %v, %v", st.GetStatus(), err)
	}
	if err := bc.FinishSpawning(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := operatorOf(c).RequeueJob(ctx, ids[0], 0, ""); err != nil {
		t.Fatalf("requeue once the batch's jobs are all created: %v", err)
	}
}
