// Package loopbacktest gives tests TCP peers on loopback that misbehave as
// real servers do, for the bounds that must cut them off.
package loopbacktest

import (
	"net"
	"testing"
)

// Silent listens on loopback and accepts every connection, then neither
// reads nor writes: a server that has hung. Its address is returned; the
// listener and the connections it took are closed when the test ends.
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done // held is the accept loop's until it ends
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}
