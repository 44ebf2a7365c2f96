package admin

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// garbledStatus is what a broken peer or a damaged restore leaves in a
// job's status node.
const garbledStatus = `{"status":"Downl`

// TestAnOperatorFailsThenDeletesAJobWhoseStatusIsUnreadable garbles the
// status of a job in Downloading: fsck names it, deleting it while its
// entry is live is refused, failing it writes a readable status whose
// message says the old one was unreadable, and deleting it then removes
// its nodes and entry and moves its batch reference, leaving fsck clean.
// A second garbled job, already Failed by its entry, is deleted at once.
func TestAnOperatorFailsThenDeletesAJobWhoseStatusIsUnreadable(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	ctx := testCtx(t)
	bid, jids := spawn(t, c, 3, 5)
	live, failed := jids[0], jids[1]
	for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading} {
		queuetest.Move(t, c, live, jobs.Change{To: s})
	}
	queuetest.Move(t, c, failed, jobs.Change{To: queue.Failed, Message: "gave up"})
	for _, jid := range []string{live, failed} {
		zktest.WriteNode(t, raw, paths(a).Job(jid).Status(), garbledStatus)
	}
	_, kinds := fsckKinds(t, a, false)
	for _, jid := range []string{live, failed} {
		if strings.Join(kinds[jid], ",") != DamageStatusUnreadable {
			t.Fatalf("fsck on %s: %v, want %s", jid, kinds[jid], DamageStatusUnreadable)
		}
	}

	if _, err := a.Jobs.Hold(ctx, live, ""); !errors.Is(err, queue.ErrCorrupt) {
		t.Errorf("holding a job whose status is unreadable: %v, want ErrCorrupt", err)
	}
	_, err := a.Jobs.Delete(ctx, live, true)
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "status is unreadable and its entry says Downloading") ||
		!strings.Contains(err.Error(), "fail it first") {
		t.Fatalf("deleting an unreadable job whose entry is Downloading: %v, want a refusal saying to fail it first", err)
	}
	if got := nodeData(t, a, paths(a).Job(live).Status()); got != garbledStatus {
		t.Fatalf("the refused deletion left the status as %q", got)
	}

	j, err := a.Jobs.Fail(ctx, live, "restored from a damaged backup")
	if err != nil {
		t.Fatalf("FailJob of a job whose status is unreadable: %v", err)
	}
	st := wantFailedWith(t, c, live, "restored from a damaged backup (its status was unreadable and was written anew: ")
	if strings.Contains(st.GetMessage(), garbledStatus) || j.GetStatus().GetStatus() != queue.Failed {
		t.Errorf("failed job: %v, message %q (the garbled bytes stay out of it)", j.GetStatus(), st.GetMessage())
	}
	if _, err := a.Jobs.Delete(ctx, live, true); err != nil {
		t.Fatalf("DeleteJob after FailJob: %v", err)
	}
	if _, err := a.Jobs.Delete(ctx, failed, true); err != nil {
		t.Fatalf("DeleteJob of an unreadable job whose entry is Failed: %v", err)
	}
	for _, jid := range []string{live, failed} {
		if exists(t, a, paths(a).Job(jid).Dir()) {
			t.Errorf("job %s still has its node", jid)
		}
		if !exists(t, a, paths(a).Batch(bid).Ref(queue.FolderDeleted, jid)) {
			t.Errorf("job %s has no reference in its batch's deleted folder", jid)
		}
	}
	for _, s := range queue.JobStates() {
		for _, jid := range []string{live, failed} {
			if names, _, err := nodes(a).Children(ctx, paths(a).StateDir(s)); err == nil {
				for _, n := range names {
					if strings.HasSuffix(n, "-"+jid) {
						t.Errorf("job %s left entry %s in %s", jid, n, queue.JobStateName(s))
					}
				}
			}
		}
	}
	if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
		t.Errorf("fsck after the operator's fix: %+v", rep.Damages)
	}
}

// TestAnUnreadableJobALiveWorkerHoldsIsNotFailedOrDeleted garbles the
// status of a job a worker of another session has claimed: failing and
// deleting it are refused as locked, and the job is left as it was.
func TestAnUnreadableJobALiveWorkerHoldsIsNotFailedOrDeleted(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, 5)
	jid := jids[0]
	queuetest.Move(t, c, jid, jobs.Change{To: queue.Failed, Message: "gave up"})
	worker := queuetest.Connect(t, c.Paths().Root())
	cl := queuetest.Claim(t, worker, jid)
	defer cl.Release(ctx)
	zktest.WriteNode(t, raw, paths(a).Job(jid).Status(), garbledStatus)

	_, err := a.Jobs.Fail(ctx, jid, "")
	if !errors.Is(err, queue.ErrLocked) || !strings.Contains(err.Error(), "status unreadable") {
		t.Errorf("FailJob of an unreadable job a worker holds: %v, want ErrLocked naming the unreadable status", err)
	}
	_, err = a.Jobs.Delete(ctx, jid, true)
	if !errors.Is(err, queue.ErrLocked) || !strings.Contains(err.Error(), "status unreadable") {
		t.Errorf("DeleteJob of an unreadable job a worker holds: %v, want ErrLocked naming the unreadable status", err)
	}
	if got := nodeData(t, a, paths(a).Job(jid).Status()); got != garbledStatus {
		t.Errorf("status after the refusals: %q", got)
	}
	if !exists(t, a, paths(a).Job(jid).Lock()) {
		t.Error("the worker's lock is gone")
	}
}

// TestABatchRemovedWithAJobWhoseStatusIsUnreadableLeavesNoEntry deletes a
// failed batch and cleans up a completed one, each with a job whose status
// is garbled: the unreadable status cannot say which state folder holds
// the job's entry, and the entry goes with the job all the same, leaving
// nothing of either batch and fsck clean.
func TestABatchRemovedWithAJobWhoseStatusIsUnreadableLeavesNoEntry(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	ctx := testCtx(t)
	failedBid, failedJids := spawn(t, c, 2, 5)
	for _, jid := range failedJids {
		queuetest.Move(t, c, jid, jobs.Change{To: queue.Failed, Message: "gave up"})
	}
	bc, err := batches.New(c).ClaimBatch(ctx, failedBid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Message: "its jobs failed"}); err != nil {
		t.Fatal(err)
	}
	doneBid, doneJids := spawn(t, c, 2, 5)
	for _, jid := range doneJids {
		for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
			queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			queuetest.Move(t, c, jid, queuetest.WithProducts(jobs.Change{To: s}))
		}
	}
	queuetest.CompleteBatch(t, c, doneBid)
	for _, jid := range []string{failedJids[0], doneJids[0]} {
		zktest.WriteNode(t, raw, paths(a).Job(jid).Status(), garbledStatus)
	}

	if jobs, err := a.Batches.Delete(ctx, failedBid); err != nil || len(jobs) != 2 {
		t.Fatalf("DeleteBatch: %d jobs, %v", len(jobs), err)
	}
	if res, err := a.Batches.Cleanup(ctx, -1, 0); err != nil || !slices.Contains(res.Batches, doneBid) {
		t.Fatalf("CleanupBatches: %v, %v", res.Batches, err)
	}
	for _, p := range tree(t, a) {
		for _, id := range append([]string{failedBid, doneBid}, append(failedJids, doneJids...)...) {
			if strings.Contains(p, id) {
				t.Errorf("left behind: %s", p)
			}
		}
	}
	if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
		t.Errorf("fsck after the removals: %+v", rep.Damages)
	}
}
