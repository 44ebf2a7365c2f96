package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ingestq/ingestq/shared/zktest"
)

func connect(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestAZooKeeperCopyStartsAFreshServerWithTheSameTree copies a running
// server's files, starts a new server on them, and finds the tree: every
// node's data, and the sequence numbers going on where they were (a
// parent's counter is the server's own state, which an export of the
// nodes would lose: a new job would take an id already used).
func TestAZooKeeperCopyStartsAFreshServerWithTheSameTree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	live, err := zktest.Start(ctx, t.TempDir(), zktest.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()
	c := connect(t, live.Addr)
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create("/jobs", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	var made []string
	for i := range 3 {
		p, err := c.Create("/jobs/jid", []byte{byte('a' + i)}, zk.FlagSequence, acl)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, p)
	}
	// A cleaned-up job: its number must not come back.
	if err := c.Delete(made[2], -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/locks", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/locks/held", nil, zk.FlagEphemeral, acl); err != nil {
		t.Fatal(err)
	}

	backup := filepath.Join(t.TempDir(), "zookeeper")
	id, st, err := copyZooKeeper(ctx, []string{live.Addr}, filepath.Join(zkDir(t, live), "data"), "", backup)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id, "0x") || st.files == 0 {
		t.Fatalf("zxid %q, %d files", id, st.files)
	}
	c.Close()
	live.Stop()

	fresh := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fresh, "zk1", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	var rst stats
	entries, _ := os.ReadDir(filepath.Join(backup, "data", "version-2"))
	for _, e := range entries {
		if err := copyFile(filepath.Join(backup, "data", "version-2", e.Name()), filepath.Join(fresh, "zk1", "data", "version-2", e.Name()), false, &rst); err != nil {
			t.Fatal(err)
		}
	}
	restored, err := zktest.Start(ctx, fresh, zktest.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Stop()
	if got, err := zxid(ctx, restored.Addr); err != nil || got < id {
		t.Errorf("the restored server is at zxid %s (%v), want at least the copy's %s", got, err, id)
	}
	rc := connect(t, restored.Addr)
	for i, p := range made[:2] {
		data, _, err := rc.Get(p)
		if err != nil || string(data) != string(rune('a'+i)) {
			t.Errorf("%s: %q, %v", p, data, err)
		}
	}
	next, err := rc.Create("/jobs/jid", nil, zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if next != "/jobs/jid0000000003" {
		t.Errorf("the next job after the restore is %s, want /jobs/jid0000000003 (numbers go on, none taken again)", next)
	}
}

// zkDir is where zktest keeps a standalone server's files.
func zkDir(t *testing.T, s *zktest.Server) string {
	t.Helper()
	out, err := zktest.FourLetter(s.Addr, "conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "dataDir="); ok {
			return filepath.Dir(strings.TrimSpace(filepath.Dir(v)))
		}
	}
	t.Fatalf("conf names no dataDir:\n%s", out)
	return ""
}

func TestZxidNamesAServerThatDoesNotAnswer(t *testing.T) {
	_, err := zxid(context.Background(), "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("zxid of a closed port: %v", err)
	}
}
