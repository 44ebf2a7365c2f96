package admin

import (
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestFsckFindsAndRepairsEveryKindOfDamage plants each kind of damage a
// non-atomic writer can leave, and checks that fsck reports it, repairs it,
// and finds nothing on a second run.
func TestFsckFindsAndRepairsEveryKindOfDamage(t *testing.T) {
	tests := []struct {
		kind  string
		plant func(t *testing.T, a *Tools, bid string, jids []string) string // returns the damaged item
	}{
		{DamageJobInTwoStates, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustCreate(t, a, a.b.Paths.JobEntry(queue.Estimating, 5, jids[0]))
			return jids[0]
		}},
		{DamageJobInNoState, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustDelete(t, a, a.b.Paths.JobEntry(queue.Pending, 5, jids[0]))
			return jids[0]
		}},
		{DamageRefMismatch, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustDelete(t, a, a.b.Paths.BatchRef(bid, a.b.Names.FolderProcessing, jids[0]))
			mustCreate(t, a, a.b.Paths.BatchRef(bid, a.b.Paths.FolderOf(queue.Completed), jids[0]))
			return jids[0]
		}},
		{DamageRefMissing, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustDelete(t, a, a.b.Paths.BatchRef(bid, a.b.Names.FolderProcessing, jids[0]))
			return jids[0]
		}},
		{DamageEntryNoJob, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustCreate(t, a, a.b.Paths.JobEntry(queue.Pending, 5, "jid9999999999"))
			return "jid9999999999"
		}},
		{DamageRefNoJob, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustCreate(t, a, a.b.Paths.BatchRef(bid, a.b.Names.FolderProcessing, "jid9999999998"))
			return "jid9999999998"
		}},
		{DamageUUIDDangling, func(t *testing.T, a *Tools, bid string, jids []string) string {
			if _, err := a.b.Multi(testCtx(t), a.b.CreateOp(a.b.Paths.BatchUUID("lost-uuid"), []byte("bid9999999999"), 0)); err != nil {
				t.Fatal(err)
			}
			return "lost-uuid"
		}},
		{DamageBatchRemnant, func(t *testing.T, a *Tools, bid string, jids []string) string {
			// What a deletion cut short leaves: the states folders, no status.
			mustCreate(t, a, a.b.Paths.Batch("bid9999999997"))
			mustCreate(t, a, a.b.Paths.Batch("bid9999999997")+"/states")
			mustCreate(t, a, a.b.Paths.BatchFolder("bid9999999997", a.b.Paths.FolderOf(queue.Completed)))
			return "bid9999999997"
		}},
		{DamageJobNoStatus, func(t *testing.T, a *Tools, bid string, jids []string) string {
			mustCreate(t, a, a.b.Paths.Job("jid9999999996"))
			return "jid9999999996"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			c, a := newTools(t)
			ctx := testCtx(t)
			bid, jids := spawn(t, c, 2, 5)
			if rep, err := a.Fsck(ctx, FsckOptions{}); err != nil || !rep.Clean() {
				t.Fatalf("fsck before damage: %+v, %v", rep, err)
			}
			item := tt.plant(t, a, bid, jids)
			time.Sleep(5 * time.Millisecond) // older than the grace below
			opts := FsckOptions{Grace: time.Millisecond}
			rep, err := a.Fsck(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !hasDamage(rep, tt.kind, item) {
				t.Fatalf("fsck did not report %s on %s: %+v", tt.kind, item, rep.Damages)
			}
			opts.Repair = true
			rep, err = a.Fsck(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range rep.Damages {
				if !d.Repaired {
					t.Errorf("not repaired: %+v", d)
				}
			}
			rep, err = a.Fsck(ctx, FsckOptions{Grace: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() {
				t.Errorf("after repair: %+v", rep.Damages)
			}
			// The jobs still work afterwards.
			for _, jid := range jids {
				queuetest.Move(t, c, jid, queue.Change{To: queue.Estimating})
			}
		})
	}
}

func TestFsckReportsUnreadableStatusWithoutTouchingIt(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, 5)
	if _, err := a.b.Multi(ctx, a.b.SetOp(a.b.Paths.JobStatus(jids[0]), []byte("{not json"), -1)); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Fsck(ctx, FsckOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDamage(rep, DamageStatusUnreadable, jids[0]) {
		t.Fatalf("damages %+v", rep.Damages)
	}
	if got := nodeData(t, a, a.b.Paths.JobStatus(jids[0])); got != "{not json" {
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

func mustCreate(t *testing.T, a *Tools, p string) {
	t.Helper()
	if _, err := a.b.Multi(testCtx(t), a.b.CreateOp(p, nil, 0)); err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
}

func mustDelete(t *testing.T, a *Tools, p string) {
	t.Helper()
	if _, err := a.b.Multi(testCtx(t), a.b.DeleteOp(p, -1)); err != nil {
		t.Fatalf("delete %s: %v", p, err)
	}
}
