package queue

import (
	"testing"
	"time"
)

// TestFsckFindsAndRepairsEveryKindOfDamage plants each kind of damage a
// non-atomic writer can leave, and checks that fsck reports it, repairs it,
// and finds nothing on a second run.
func TestFsckFindsAndRepairsEveryKindOfDamage(t *testing.T) {
	tests := []struct {
		kind  string
		plant func(t *testing.T, c *Client, bid string, jids []string) string // returns the damaged item
	}{
		{DamageJobInTwoStates, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustCreate(t, c, c.p.jobEntry(Estimating, 5, jids[0]))
			return jids[0]
		}},
		{DamageJobInNoState, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustDelete(t, c, c.p.jobEntry(Pending, 5, jids[0]))
			return jids[0]
		}},
		{DamageRefMismatch, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustDelete(t, c, c.p.batchRef(bid, folderProcessing, jids[0]))
			mustCreate(t, c, c.p.batchRef(bid, folderCompleted, jids[0]))
			return jids[0]
		}},
		{DamageRefMissing, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustDelete(t, c, c.p.batchRef(bid, folderProcessing, jids[0]))
			return jids[0]
		}},
		{DamageEntryNoJob, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustCreate(t, c, c.p.jobEntry(Pending, 5, "jid9999999999"))
			return "jid9999999999"
		}},
		{DamageRefNoJob, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustCreate(t, c, c.p.batchRef(bid, folderProcessing, "jid9999999998"))
			return "jid9999999998"
		}},
		{DamageUUIDDangling, func(t *testing.T, c *Client, bid string, jids []string) string {
			if _, err := c.conn.Create(c.p.batchUUID("lost-uuid"), []byte("bid9999999999"), 0, c.acl); err != nil {
				t.Fatal(err)
			}
			return "lost-uuid"
		}},
		{DamageBatchRemnant, func(t *testing.T, c *Client, bid string, jids []string) string {
			// What a deletion cut short leaves: the states folders, no status.
			mustCreate(t, c, c.p.batch("bid9999999997"))
			mustCreate(t, c, c.p.batchStates("bid9999999997"))
			mustCreate(t, c, c.p.batchFolder("bid9999999997", folderCompleted))
			return "bid9999999997"
		}},
		{DamageJobNoStatus, func(t *testing.T, c *Client, bid string, jids []string) string {
			mustCreate(t, c, c.p.job("jid9999999996"))
			return "jid9999999996"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			c := newClient(t)
			ctx := testCtx(t)
			bid, jids := spawn(t, c, 2, 5)
			if rep, err := c.Fsck(ctx, FsckOptions{}); err != nil || !rep.Clean() {
				t.Fatalf("fsck before damage: %+v, %v", rep, err)
			}
			item := tt.plant(t, c, bid, jids)
			time.Sleep(5 * time.Millisecond) // older than the grace below
			opts := FsckOptions{Grace: time.Millisecond}
			rep, err := c.Fsck(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !hasDamage(rep, tt.kind, item) {
				t.Fatalf("fsck did not report %s on %s: %+v", tt.kind, item, rep.Damages)
			}
			opts.Repair = true
			rep, err = c.Fsck(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range rep.Damages {
				if !d.Repaired {
					t.Errorf("not repaired: %+v", d)
				}
			}
			rep, err = c.Fsck(ctx, FsckOptions{Grace: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Clean() {
				t.Errorf("after repair: %+v", rep.Damages)
			}
			// The jobs still work afterwards.
			for _, jid := range jids {
				step(t, c, jid, Change{To: Estimating})
			}
		})
	}
}

func TestFsckReportsUnreadableStatusWithoutTouchingIt(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := spawn(t, c, 1, 5)
	if _, err := c.conn.Set(c.p.jobStatus(jids[0]), []byte("{not json"), -1); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Fsck(ctx, FsckOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDamage(rep, DamageStatusUnreadable, jids[0]) {
		t.Fatalf("damages %+v", rep.Damages)
	}
	if got := nodeData(t, c, c.p.jobStatus(jids[0])); got != "{not json" {
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

func mustCreate(t *testing.T, c *Client, p string) {
	t.Helper()
	if _, err := c.conn.Create(p, nil, 0, c.acl); err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
}

func mustDelete(t *testing.T, c *Client, p string) {
	t.Helper()
	if err := c.conn.Delete(p, -1); err != nil {
		t.Fatalf("delete %s: %v", p, err)
	}
}
