package queue

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/zktest"
)

// These tests damage the tree as another writer would, through a plain
// go-zookeeper session of its own, and check that the queue ends the job
// with a message (or holds it for an operator); package admin's check that
// fsck names it.

func wantFailedWith(t *testing.T, c *Client, jid, msg string) *v1.JobStatus {
	t.Helper()
	st, err := c.JobStatus(testCtx(t), jid)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus() != Failed || !strings.Contains(st.GetMessage(), msg) {
		t.Errorf("job %s is %s (%q), want Failed with %q", jid, JobStateName(st.GetStatus()), st.GetMessage(), msg)
	}
	return st
}

func TestAJobLockNoSessionHoldsIsFailedWhenTheClaimFindsItByItsWrite(t *testing.T) {
	// A consumer that rarely meets locked jobs tries the lock's create
	// without looking first: the failed create leads to the same end.
	c := newClient(t)
	raw := zktest.RawConn(t)
	_, jids := spawn(t, c, 1, 5)
	zktest.WriteNode(t, raw, c.p.jobLock(jids[0]), "")
	_, err := c.claimEntry(testCtx(t), Pending, entry{name: entryName(5, jids[0]), priority: 5, jid: jids[0]}, 0, false)
	if !errors.Is(err, errStale) {
		t.Errorf("claim: %v, want the entry stale (its job failed)", err)
	}
	wantFailedWith(t, c, jids[0], "lock node is not a session's")
}

func TestAHeldJobWithALockNoSessionHoldsStaysHeldForItsOperator(t *testing.T) {
	c := newClient(t)
	raw := zktest.RawConn(t)
	_, jids := spawn(t, c, 1, 5)
	ctx := testCtx(t)
	if _, err := operatorOf(c).HoldJob(ctx, jids[0], "checking rights"); err != nil {
		t.Fatal(err)
	}
	zktest.WriteNode(t, raw, c.p.jobLock(jids[0]), "")
	// The operator's release finds the lock: it is removed, and the
	// release goes through.
	j, err := operatorOf(c).ReleaseJob(ctx, jids[0], "")
	if err != nil {
		t.Fatalf("releasing a held job with a stray lock: %v", err)
	}
	if j.GetStatus().GetStatus() != Pending {
		t.Errorf("released job is %s", JobStateName(j.GetStatus().GetStatus()))
	}
}

func TestAnOperatorCannotMoveAJobBackIntoABatchThatIsGoingAway(t *testing.T) {
	c := newClient(t)
	bid, jids := spawn(t, c, 2, 5)
	ctx := testCtx(t)
	for _, jid := range jids {
		step(t, c, jid, Change{To: Estimating})
		step(t, c, jid, Change{To: Failed, Message: "broke"})
	}
	bc, err := c.ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []BatchChange{{To: BatchReporting, KeepLock: true}, {To: BatchFailed, KeepLock: true}, {To: BatchDeleted, KeepLock: true}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted, its jobs not removed yet: a requeue must not bring one back.
	_, err = operatorOf(c).RequeueJob(ctx, jids[0], 0, "")
	if !errors.Is(err, ErrWrongState) || !strings.Contains(err.Error(), "its batch "+bid+" is Deleted") {
		t.Errorf("requeue into a deleted batch: %v", err)
	}
	if st, _ := c.JobStatus(ctx, jids[0]); st.GetStatus() != Failed {
		t.Errorf("job is %s", JobStateName(st.GetStatus()))
	}
	if _, err := c.removeClaimedBatch(ctx, bc, map[string][]string{folderFailed: jids}); err != nil {
		t.Fatal(err)
	}
	_, err = operatorOf(c).RequeueJob(ctx, jids[1], 0, "")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("requeue of a deleted job: %v", err)
	}
}
