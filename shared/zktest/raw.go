package zktest

import (
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// RawConn opens a plain go-zookeeper session on the test ZooKeeper (see
// Main), closed when the test ends: what another program writing the tree
// holds, so a test can put there what the queue's own code never writes.
func RawConn(tb testing.TB) *zk.Conn {
	tb.Helper()
	conn, _, err := zk.Connect(Servers(tb), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(conn.Close)
	return conn
}

// WriteNode sets node p to data, or creates it (persistent) when missing.
func WriteNode(tb testing.TB, conn *zk.Conn, p, data string) {
	tb.Helper()
	_, err := conn.Set(p, []byte(data), -1)
	if errors.Is(err, zk.ErrNoNode) {
		_, err = conn.Create(p, []byte(data), 0, zk.WorldACL(zk.PermAll))
	}
	if err != nil {
		tb.Fatalf("writing %s: %v", p, err)
	}
}

// DeleteTree deletes p and everything under it one node at a time, as a
// careless tool would; a node already gone is no error.
func DeleteTree(tb testing.TB, conn *zk.Conn, p string) {
	tb.Helper()
	children, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return
	}
	if err != nil {
		tb.Fatal(err)
	}
	for _, ch := range children {
		DeleteTree(tb, conn, p+"/"+ch)
	}
	if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		tb.Fatal(err)
	}
}
