package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// lockFixture is a queue root holding one job, its lock taken by a
// session of a test's own, and a watcher reaching ZooKeeper through a
// proxy the test can hang, so that it sees the lock's changes late.
type lockFixture struct {
	t     *testing.T
	raw   *zk.Conn
	proxy *zktest.Proxy
	rec   *Recorder
	job   string
}

const jid = "jid0000000001"

var acl = zk.WorldACL(zk.PermAll)

func newLockFixture(t *testing.T) *lockFixture {
	t.Helper()
	root := zktest.Root(t)
	f := &lockFixture{t: t, raw: zktest.RawConn(t), job: root + "/jobs/" + jid}
	for i := 1; i <= len(f.job); i++ {
		if i == len(f.job) || f.job[i] == '/' {
			if _, err := f.raw.Create(f.job[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
	}
	if _, err := f.raw.Create(root+"/workers", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	zktest.WriteNode(t, f.raw, f.job+"/status", `{"status":"Recording"}`)
	var err error
	if f.proxy, err = zktest.NewProxy(zktest.Servers(t)[0]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.proxy.Close() })
	if f.rec, err = Start(context.Background(), []string{f.proxy.Addr}, root, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.rec.Stop)
	return f
}

// take creates the job's lock under a session of its own, which ends with
// the test, and returns that session's connection.
func (f *lockFixture) take() *zk.Conn {
	f.t.Helper()
	conn := zktest.RawConn(f.t)
	if _, err := conn.Create(f.job+"/lock", nil, zk.FlagEphemeral, acl); err != nil {
		f.t.Fatal(err)
	}
	return conn
}

// commit deletes the lock, creating the job's children named with it in
// the same operation, as a commit creating a job's node does.
func (f *lockFixture) commit(conn *zk.Conn, creates ...string) {
	f.t.Helper()
	ops := []any{&zk.DeleteRequest{Path: f.job + "/lock", Version: -1}}
	for _, c := range creates {
		ops = append(ops, &zk.CreateRequest{Path: f.job + "/" + c, Acl: acl})
	}
	if _, err := conn.Multi(ops...); err != nil {
		f.t.Fatal(err)
	}
}

// waitLocks waits until the watcher has seen n holdings, the last ended
// when ended.
func (f *lockFixture) waitLocks(n int, ended bool) []Lock {
	f.t.Helper()
	var locks []Lock
	waittest.Until(f.t, 30*time.Second, func() error {
		locks = f.rec.Jobs()[jid].Locks
		if len(locks) == n && (!ended || !locks[n-1].Gone.IsZero()) {
			return nil
		}
		return fmt.Errorf("the watcher saw holdings %+v, want %d (the last ended: %t)", locks, n, ended)
	})
	return locks
}

// A lock deleted with nothing else happening to it is seen gone tight,
// even late and with other children of the job created with its deletion.
func TestALockSeenGoneWithNoOtherHoldingIsTight(t *testing.T) {
	f := newLockFixture(t)
	a := f.take()
	f.waitLocks(1, false)
	f.proxy.Hang()
	f.commit(a, "inventory") // seen late: only once the proxy resumes
	f.proxy.Resume()
	if l := f.waitLocks(1, true)[0]; !l.Tight {
		t.Errorf("a lock deleted alone, seen late, is not tight: %+v", l)
	}
}

// A holding begun and ended while the watcher could not look is unseen:
// the lock before it, seen gone after it, is not tight. The next holding
// seen ends a lock tight only when none came between.
func TestALockSeenGoneAfterAnUnseenHoldingIsNotTight(t *testing.T) {
	f := newLockFixture(t)
	a := f.take()
	f.waitLocks(1, false)
	f.proxy.Hang()
	f.commit(a)
	b := f.take() // the holding the watcher does not see
	f.commit(b, "store")
	f.proxy.Resume()
	locks := f.waitLocks(1, true)
	if locks[0].Tight {
		t.Errorf("a lock seen gone after a holding the watcher did not see is tight: %+v", locks[0])
	}

	c := f.take()
	f.waitLocks(2, false)
	f.proxy.Hang()
	f.commit(c)
	d := f.take() // seen, next
	f.proxy.Resume()
	locks = f.waitLocks(3, false)
	if !locks[1].Tight || locks[1].Gone.After(locks[2].Created) {
		t.Errorf("a lock whose next holding was seen, none between, is not tight, or ends after it: %+v", locks)
	}

	f.proxy.Hang()
	f.commit(d)
	e := f.take() // unseen
	f.commit(e)
	f.take() // seen, next
	f.proxy.Resume()
	locks = f.waitLocks(4, false)
	if locks[2].Tight {
		t.Errorf("a lock whose next holding seen came after an unseen one is tight: %+v", locks)
	}
}
