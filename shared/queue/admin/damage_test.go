package admin

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// These tests damage the tree as another writer would, through a plain
// go-zookeeper session of its own, and check that the queue ends the job
// with a message (or holds it for an operator) and that fsck names it.

func exists(t *testing.T, a Tools, p string) bool {
	t.Helper()
	ok, _, err := nodes(a).Exists(testCtx(t), p)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// fsckKinds runs fsck (with repair or not) and returns its findings by item.
func fsckKinds(t *testing.T, a Tools, repair bool) (*FsckReport, map[string][]string) {
	t.Helper()
	rep, err := a.Queue.Fsck(testCtx(t), FsckOptions{Repair: repair, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string][]string{}
	for _, d := range rep.Damages {
		kinds[d.Item] = append(kinds[d.Item], d.Kind)
	}
	return rep, kinds
}

func wantFailedWith(t *testing.T, c *session.Session, jid, msg string) *v1.JobStatus {
	t.Helper()
	st, err := jobs.NewReader(c).JobStatus(testCtx(t), jid)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), msg) {
		t.Errorf("job %s is %s (%q), want Failed with %q", jid, queue.JobStateName(st.GetStatus()), st.GetMessage(), msg)
	}
	return st
}

func TestAJobLockNoSessionHoldsIsFailedByTheConsumerThatMeetsIt(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	bid, jids := spawn(t, c, 2, 5)
	// A lock written as a persistent node: no session's end will remove it.
	zktest.WriteNode(t, raw, paths(a).Job(jids[0]).Lock(), "")

	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	co := jobs.New(c).NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1})
	cl, err := co.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cl.ID() != jids[1] {
		t.Errorf("took %s, want %s (the job after the one locked for ever)", cl.ID(), jids[1])
	}
	cl.Release(ctx)
	wantFailedWith(t, c, jids[0], "lock node is not a session's")
	if exists(t, a, paths(a).Job(jids[0]).Lock()) {
		t.Error("the lock no session holds is still there")
	}
	if !exists(t, a, paths(a).Batch(bid).Ref(queue.BatchFolderOf(queue.Failed), jids[0])) || !exists(t, a, paths(a).Entry(queue.Failed, 5, jids[0])) {
		t.Error("the failed job is not in failed and batch-failed")
	}
	if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
		t.Errorf("fsck after the consumer failed the job: %+v", rep.Damages)
	}
}

func TestFsckReportsAndRepairsAJobLockNoSessionHolds(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	_, jids := spawn(t, c, 1, 5)
	queuetest.Move(t, c, jids[0], jobs.Change{To: queue.Estimating})
	zktest.WriteNode(t, raw, paths(a).Job(jids[0]).Lock(), "")
	_, kinds := fsckKinds(t, a, false)
	if strings.Join(kinds[jids[0]], ",") != DamageLockNotEphemeral {
		t.Fatalf("fsck: %v", kinds)
	}
	if !exists(t, a, paths(a).Job(jids[0]).Lock()) {
		t.Fatal("fsck without repair removed the lock")
	}
	rep, _ := fsckKinds(t, a, true)
	if len(rep.Damages) != 1 || !rep.Damages[0].Repaired {
		t.Fatalf("fsck repair: %+v", rep.Damages)
	}
	wantFailedWith(t, c, jids[0], "lock node is not a session's")
	if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
		t.Errorf("fsck after the repair: %+v", rep.Damages)
	}
}

func TestAGarbledPriorityLeavesTheJobReadableAndIsRewrittenWhenItMoves(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	_, jids := spawn(t, c, 3, 7)
	ctx := testCtx(t)
	for _, jid := range jids {
		zktest.WriteNode(t, raw, paths(a).Job(jid).Node(queue.NodePriority), "abc")
	}
	j, err := jobs.NewReader(c).GetJob(ctx, jids[0])
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if j.GetPriority() != 7 {
		t.Errorf("priority read as %d, want its entry's 7", j.GetPriority())
	}
	if jobs, _, err := jobs.NewReader(c).ListJobs(ctx, jobs.JobFilter{State: queue.Pending}); err != nil || len(jobs) != 3 {
		t.Errorf("ListJobs: %d jobs, %v", len(jobs), err)
	}
	_, kinds := fsckKinds(t, a, false)
	for _, jid := range jids {
		if strings.Join(kinds[jid], ",") != DamagePriorityUnreadable {
			t.Errorf("fsck on %s: %v", jid, kinds[jid])
		}
	}

	// A stage that does not ask for the priority moves the job: the
	// node is written anew.
	co := jobs.New(c).NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1, Parts: queue.PartConfiguration})
	cl, err := co.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cl.ID() != jids[0] || cl.LoadErr != nil {
		t.Fatalf("claimed %s, load error %v", cl.ID(), cl.LoadErr)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating}); err != nil {
		t.Fatal(err)
	}
	if got := nodeData(t, a, paths(a).Job(jids[0]).Node(queue.NodePriority)); got != "7" {
		t.Errorf("priority after the move: %q", got)
	}
	// An operator fails another.
	if _, err := a.Jobs.Fail(ctx, jids[1], "given up"); err != nil {
		t.Fatalf("FailJob: %v", err)
	}
	if got := nodeData(t, a, paths(a).Job(jids[1]).Node(queue.NodePriority)); got != "7" {
		t.Errorf("priority after FailJob: %q", got)
	}
	// fsck mends the third.
	rep, _ := fsckKinds(t, a, true)
	if len(rep.Damages) != 1 || rep.Damages[0].Item != jids[2] || !rep.Damages[0].Repaired {
		t.Errorf("fsck repair: %+v", rep.Damages)
	}
	if got := nodeData(t, a, paths(a).Job(jids[2]).Node(queue.NodePriority)); got != "7" {
		t.Errorf("priority after fsck: %q", got)
	}
	if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
		t.Errorf("fsck after: %+v", rep.Damages)
	}
}

func TestAStepOfAJobWhoseBatchIsGoneFailsTheJobInsteadOfGoingOn(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	bid, jids := spawn(t, c, 2, 5)
	zktest.DeleteTree(t, raw, paths(a).Batch(bid).Dir())
	ctx := testCtx(t)

	co := jobs.New(c).NewConsumer(queue.Pending, jobs.ConsumerOptions{Spread: 1, Parts: queue.PartConfiguration})
	cl, err := co.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = cl.Commit(ctx, jobs.Change{To: queue.Estimating, Message: "estimated"})
	var nb *queue.NoBatchError
	if !errors.As(err, &nb) || !nb.Failed || !errors.Is(err, queue.ErrWrongState) {
		t.Fatalf("commit of a job whose batch is gone: %v", err)
	}
	wantFailedWith(t, c, cl.ID(), "its batch "+bid+" does not exist: the job cannot go on to Estimating")
	if !exists(t, a, paths(a).Entry(queue.Failed, 5, cl.ID())) || exists(t, a, paths(a).Batch(bid).Dir()) {
		t.Error("the job is not in failed, or its batch came back")
	}

	// fsck names both; it fails the live one and leaves the failed one to
	// an operator, whose FailJob and DeleteJob work without the batch.
	_, kinds := fsckKinds(t, a, false)
	for _, jid := range jids {
		if strings.Join(kinds[jid], ",") != DamageJobNoBatch {
			t.Errorf("fsck on %s: %v", jid, kinds[jid])
		}
	}
	rep, _ := fsckKinds(t, a, true)
	for _, d := range rep.Damages {
		switch {
		case d.Item == cl.ID() && (d.Repaired || !strings.Contains(d.Error, "left for an operator")):
			t.Errorf("the failed job: %+v", d)
		case d.Item != cl.ID() && !d.Repaired:
			t.Errorf("the live job: %+v", d)
		}
	}
	wantFailedWith(t, c, jids[1], "fsck: its batch "+bid+" does not exist")
	for _, jid := range jids {
		if _, err := a.Jobs.Delete(ctx, jid, false); err != nil {
			t.Errorf("DeleteJob %s: %v", jid, err)
		}
	}
	if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
		t.Errorf("fsck after: %+v", rep.Damages)
	}
}

func TestFsckNeverTakesAJobToAStateItDidNotReach(t *testing.T) {
	type want struct {
		state   queue.JobState
		message string
	}
	for _, tc := range []struct {
		name   string
		entry  queue.JobState // where the job really is
		forged queue.JobState // what its status says
		stored bool           // it has a store and an inventory
		want   want
	}{
		{"a forged Completed with its entry left in pending", queue.Pending, queue.Completed, false,
			want{queue.Failed, "status said Completed, but its entry is in pending, and Pending → Completed is not a move a job makes"}},
		{"Completed from notify without what processing writes", queue.Notify, queue.Completed, false,
			want{queue.Failed, "it has no store and inventory, which Completed needs"}},
		{"a half-done move from notify to Completed", queue.Notify, queue.Completed, true, want{queue.Completed, ""}},
		{"a half-done move from pending to Estimating", queue.Pending, queue.Estimating, false, want{queue.Estimating, ""}},
		{"a held job whose status says it runs", queue.Held, queue.Downloading, false, want{queue.Held, "Held → Downloading is not a move a job makes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, a := newTools(t)
			raw := zktest.RawConn(t)
			bid, jids := spawn(t, c, 1, 5)
			jid := jids[0]
			ctx := testCtx(t)
			for _, s := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing, queue.Recording, queue.Notify} {
				if tc.entry == queue.Pending || tc.entry == queue.Held {
					break
				}
				ch := jobs.Change{To: s}
				if s == queue.Storing && tc.stored {
					ch.Store = &v1.Store{ManifestUrl: "file:///m", Mode: "add"}
				}
				if s == queue.Recording && tc.stored {
					ch.Inventory = &v1.Inventory{ManifestUrl: "file:///m", Mode: "add"}
				}
				queuetest.Move(t, c, jid, ch)
				if s == tc.entry {
					break
				}
			}
			if tc.entry == queue.Held {
				if _, err := a.Jobs.Hold(ctx, jid, ""); err != nil {
					t.Fatal(err)
				}
			}
			// The other writer rewrites the status alone.
			zktest.WriteNode(t, raw, paths(a).Job(jid).Status(), string(encodeStatus(&v1.JobStatus{Status: tc.forged, LastModified: queue.NowStamp(),
				Message: "forged", LastSuccessfulStatus: queue.Notify})))
			_, kinds := fsckKinds(t, a, false)
			if !slices.Contains(kinds[jid], DamageStatusMismatch) {
				t.Fatalf("fsck: %v", kinds)
			}
			rep, _ := fsckKinds(t, a, true)
			for _, d := range rep.Damages {
				if !d.Repaired {
					t.Errorf("not repaired: %+v", d)
				}
			}
			j, err := jobs.NewReader(c).GetJob(ctx, jid)
			if err != nil {
				t.Fatal(err)
			}
			if j.GetStatus().GetStatus() != tc.want.state || !strings.Contains(j.GetStatus().GetMessage(), tc.want.message) {
				t.Errorf("job is %s (%q), want %s with %q", queue.JobStateName(j.GetStatus().GetStatus()), j.GetStatus().GetMessage(),
					queue.JobStateName(tc.want.state), tc.want.message)
			}
			if tc.want.state == queue.Failed && tc.entry == queue.Pending && j.GetStatus().GetLastSuccessfulStatus() != 0 {
				t.Errorf("last successful status %s: the job never got past Pending", queue.JobStateName(j.GetStatus().GetLastSuccessfulStatus()))
			}
			if !exists(t, a, paths(a).Entry(tc.want.state, 5, jid)) || !exists(t, a, paths(a).Batch(bid).Ref(queue.BatchFolderOf(tc.want.state), jid)) {
				t.Errorf("job not in %s and its batch folder", queue.JobStateName(tc.want.state))
			}
			if rep, _ := fsckKinds(t, a, false); !rep.Clean() {
				t.Errorf("fsck after the repair: %+v", rep.Damages)
			}
		})
	}
}

func TestAHeldJobWithALockNoSessionHoldsStaysHeldForItsOperator(t *testing.T) {
	c, a := newTools(t)
	raw := zktest.RawConn(t)
	_, jids := spawn(t, c, 1, 5)
	ctx := testCtx(t)
	if _, err := a.Jobs.Hold(ctx, jids[0], "checking rights"); err != nil {
		t.Fatal(err)
	}
	zktest.WriteNode(t, raw, paths(a).Job(jids[0]).Lock(), "")
	// The operator's release finds the lock: it is removed, and the
	// release goes through.
	j, err := a.Jobs.Release(ctx, jids[0], "")
	if err != nil {
		t.Fatalf("releasing a held job with a stray lock: %v", err)
	}
	if j.GetStatus().GetStatus() != queue.Pending {
		t.Errorf("released job is %s", queue.JobStateName(j.GetStatus().GetStatus()))
	}
}

func TestAnOperatorCannotMoveAJobBackIntoABatchThatIsGoingAway(t *testing.T) {
	c, a := newTools(t)
	bid, jids := spawn(t, c, 2, 5)
	ctx := testCtx(t)
	for _, jid := range jids {
		queuetest.Move(t, c, jid, jobs.Change{To: queue.Estimating})
		queuetest.Move(t, c, jid, jobs.Change{To: queue.Failed, Message: "broke"})
	}
	bc, err := batches.New(c).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true}, {To: queue.BatchFailed, KeepLock: true},
		{To: queue.BatchDeleted, KeepLock: true}} {
		if err := bc.Commit(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted, its jobs not removed yet: a requeue must not bring one back.
	_, err = a.Jobs.Requeue(ctx, jids[0], 0, "")
	if !errors.Is(err, queue.ErrWrongState) || !strings.Contains(err.Error(), "its batch "+bid+" is Deleted") {
		t.Errorf("requeue into a deleted batch: %v", err)
	}
	if st, _ := jobs.NewReader(c).JobStatus(ctx, jids[0]); st.GetStatus() != queue.Failed {
		t.Errorf("job is %s", queue.JobStateName(st.GetStatus()))
	}
	// The deletion is finished: the batch and its jobs go.
	if err := bc.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Batches.Delete(ctx, bid); err != nil {
		t.Fatal(err)
	}
	_, err = a.Jobs.Requeue(ctx, jids[1], 0, "")
	if !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("requeue of a deleted job: %v", err)
	}
}
