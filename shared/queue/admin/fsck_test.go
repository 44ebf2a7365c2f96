package admin

import (
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// TestFsckFindsAndRepairsEveryKindOfDamage plants each kind of damage a
// non-atomic writer can leave, and checks that fsck reports it, repairs it,
// and finds nothing on a second run.
func TestFsckFindsAndRepairsEveryKindOfDamage(t *testing.T) {
	tests := []struct {
		kind  string
		plant func(t *testing.T, a Tools, bid string, jids []string) string // returns the damaged item
	}{
		{DamageJobInTwoStates, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustCreate(t, a, paths(a).Entry(queue.Estimating, 5, jids[0]))
			return jids[0]
		}},
		{DamageJobInNoState, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustDelete(t, a, paths(a).Entry(queue.Pending, 5, jids[0]))
			return jids[0]
		}},
		{DamageRefMismatch, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustDelete(t, a, paths(a).Batch(bid).Ref(queue.FolderProcessing, jids[0]))
			mustCreate(t, a, paths(a).Batch(bid).Ref(queue.BatchFolderOf(queue.Completed), jids[0]))
			return jids[0]
		}},
		{DamageRefMissing, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustDelete(t, a, paths(a).Batch(bid).Ref(queue.FolderProcessing, jids[0]))
			return jids[0]
		}},
		{DamageEntryNoJob, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustCreate(t, a, paths(a).Entry(queue.Pending, 5, "jid9999999999"))
			return "jid9999999999"
		}},
		{DamageRefNoJob, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustCreate(t, a, paths(a).Batch(bid).Ref(queue.FolderProcessing, "jid9999999998"))
			return "jid9999999998"
		}},
		{DamageUUIDDangling, func(t *testing.T, a Tools, bid string, jids []string) string {
			if _, err := nodes(a).Create(testCtx(t), paths(a).BatchUUID("lost-uuid"), []byte("bid9999999999"), 0); err != nil {
				t.Fatal(err)
			}
			return "lost-uuid"
		}},
		{DamageBatchRemnant, func(t *testing.T, a Tools, bid string, jids []string) string {
			// What a deletion cut short leaves: the states folders, no status.
			mustCreate(t, a, paths(a).Batch("bid9999999997").Dir())
			mustCreate(t, a, paths(a).Batch("bid9999999997").Dir()+"/states")
			mustCreate(t, a, paths(a).Batch("bid9999999997").Folder(queue.BatchFolderOf(queue.Completed)))
			return "bid9999999997"
		}},
		{DamageJobNoStatus, func(t *testing.T, a Tools, bid string, jids []string) string {
			mustCreate(t, a, paths(a).Job("jid9999999996").Dir())
			return "jid9999999996"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			c, a := newTools(t)
			ctx := testCtx(t)
			bid, jids := spawn(t, c, 2, 5)
			if rep, err := a.Queue.Fsck(ctx, FsckOptions{}); err != nil || !rep.Clean() {
				t.Fatalf("fsck before damage: %+v, %v", rep, err)
			}
			item := tt.plant(t, a, bid, jids)
			// Its ages measured to a moment after now: older than the grace.
			opts := FsckOptions{Grace: time.Millisecond, Now: time.Now().Add(time.Second)}
			rep, err := a.Queue.Fsck(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !hasDamage(rep, tt.kind, item) {
				t.Fatalf("fsck did not report %s on %s: %+v", tt.kind, item, rep.Damages)
			}
			opts.Repair = true
			rep, err = a.Queue.Fsck(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range rep.Damages {
				if !d.Repaired {
					t.Errorf("not repaired: %+v", d)
				}
			}
			rep, err = a.Queue.Fsck(ctx, FsckOptions{Grace: time.Millisecond, Now: time.Now().Add(time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() {
				t.Errorf("after repair: %+v", rep.Damages)
			}
			// The jobs still work afterwards.
			for _, jid := range jids {
				queuetest.Move(t, c, jid, jobs.Change{To: queue.Estimating})
			}
		})
	}
}

func TestFsckReportsUnreadableStatusWithoutTouchingIt(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, 5)
	if _, err := nodes(a).Set(ctx, paths(a).Job(jids[0]).Status(), []byte("{not json"), -1); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Queue.Fsck(ctx, FsckOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDamage(rep, DamageStatusUnreadable, jids[0]) {
		t.Fatalf("damages %+v", rep.Damages)
	}
	if got := nodeData(t, a, paths(a).Job(jids[0]).Status()); got != "{not json" {
		t.Errorf("fsck rewrote an unreadable status: %q", got)
	}
}

func hasDamage(rep *FsckReport, kind, item string) bool {
	for _, d := range rep.Damages {
		if d.Kind == kind && d.Item == item {
			return true
		}
	}
	return false
}

func mustCreate(t *testing.T, a Tools, p string) {
	t.Helper()
	if _, err := nodes(a).Create(testCtx(t), p, nil, 0); err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
}

func mustDelete(t *testing.T, a Tools, p string) {
	t.Helper()
	if err := nodes(a).Txn().Then(session.Delete(p, p, -1)).Commit(testCtx(t)); err != nil {
		t.Fatalf("delete %s: %v", p, err)
	}
}
