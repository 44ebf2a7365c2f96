package session

import (
	"context"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/zktest"
)

// A session rides out servers that hang. Its server cuts it off while the
// two others have hung (they take connections and answer nothing, as a
// frozen process does): the client gives up on each within its bound and
// opens the connection with the first again, so the session is never
// lost, and a read made meanwhile is answered within the session timeout.
// go-zookeeper alone would wait for a hung server's opening answer over
// six session timeouts, and the session would be lost after one.
func TestASessionOutlivesTwoServersOfThreeThatHang(t *testing.T) {
	upstream := zktest.Servers(t)[0]
	var proxies []*zktest.Proxy
	var addrs []string
	for range 3 {
		p, err := zktest.NewProxy(upstream)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr)
	}
	const timeout = 4 * time.Second
	ctx := testCtx(t)
	s, err := Connect(ctx, Options{Servers: addrs, Root: zktest.Root(t), SessionTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	id := s.ID()
	lost := make(chan struct{}, 1)
	defer s.OnSession(func(connected bool) {
		if !connected {
			select {
			case lost <- struct{}{}:
			default:
			}
		}
	})()
	var on *zktest.Proxy
	for _, p := range proxies {
		if p.Addr == s.conn.Server() {
			on = p
		} else {
			p.Hang()
		}
	}
	if on == nil {
		t.Fatalf("the session is on %s, none of the servers %v", s.conn.Server(), addrs)
	}
	on.Block() // cuts its connection
	on.Unblock()
	readCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, _, err := s.Nodes().Exists(readCtx, s.Paths().Jobs()); err != nil {
		t.Fatalf("a read made as the connection was cut: %v (want an answer within the session timeout)", err)
	}
	if s.ID() != id {
		t.Fatalf("session 0x%x replaced by 0x%x", id, s.ID())
	}
	select {
	case <-lost:
		t.Fatal("the session was lost")
	case <-time.After(timeout): // the longest a lost session goes unnoticed: none was
	}
	if s.conn.Server() != on.Addr {
		t.Fatalf("the session is on %s, one of the hung servers; want %s", s.conn.Server(), on.Addr)
	}
}

// A server that is slow to open a connection, rather than hung, is waited
// for longer each time, so that a connection is opened in the end.
func TestAConnectionIsOpenedInTheEndWithServersSlowerThanTheHandshakeBound(t *testing.T) {
	var proxies []*zktest.Proxy
	var addrs []string
	for range 3 {
		p, err := zktest.NewProxy(zktest.Servers(t)[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr)
	}
	ctx := testCtx(t)
	s, err := Connect(ctx, Options{Servers: addrs, Root: zktest.Root(t), SessionTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	established := s.Established()
	for _, p := range proxies {
		// Every answer 1s late: twice the first bound (500ms, 3s among
		// three servers); the session cannot be kept, but a new one opens.
		p.SetDelay(zktest.Delay{}, zktest.Delay{Min: time.Second})
		p.Block()
		p.Unblock()
	}
	select {
	case <-established:
	case <-ctx.Done():
		t.Fatal("no connection was opened with servers that answer 1s late")
	}
}
