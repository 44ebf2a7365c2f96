// Package freeport finds free TCP ports on loopback, for tests and the demo
// stack, which start servers (ZooKeeper, the services) that must be told
// their port before they bind it.
package freeport

import (
	"fmt"
	"net"
	"net/netip"
)

// Loopback returns n distinct addresses on 127.0.0.1 whose ports were free
// a moment ago. The n listeners are held open together, so no two addresses
// are alike, and closed before it returns: another process may still take a
// port before the server meant for it binds it.
func Loopback(n int) ([]netip.AddrPort, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]netip.AddrPort, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ap := l.Addr().(*net.TCPAddr).AddrPort()
		out[i] = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return out, nil
}
