// Package freeport finds free TCP ports on loopback, for tests and the demo
// stack, which start servers (ZooKeeper, the services) that must be told
// their port before they bind it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Loopback returns n distinct addresses on 127.0.0.1 whose ports were free
// a moment ago. The n listeners are held open together, so no two addresses
// are alike, and closed before it returns.
//
// The ports are drawn below the kernel's ephemeral range: a port from that
// range (what binding port 0 gives) is also what every outgoing connection
// on the machine takes, so on a busy machine one would often be taken
// before the server meant for it binds it. Below the range only another
// finder like this one can take it, and only in the moment between.
func Loopback(n int) ([]netip.AddrPort, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	low, high := portsBelowEphemeral()
	out := make([]netip.AddrPort, n)
	for i := range out {
		l, err := listen(low, high)
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ap := l.Addr().(*net.TCPAddr).AddrPort()
		out[i] = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return out, nil
}

// listen binds a random free port in [low, high), or any port if a few
// hundred tries find none.
func listen(low, high int) (net.Listener, error) {
	for range 200 {
		if high <= low {
			break
		}
		port := low + rand.IntN(high-low)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// portsBelowEphemeral is the range ports are drawn from: from 20000 up to
// the start of the kernel's ephemeral range (Linux's default 32768 when it
// cannot be read).
func portsBelowEphemeral() (low, high int) {
	low, high = 20000, 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if start, err := strconv.Atoi(f[0]); err == nil && start > low+1000 {
				high = start
			}
		}
	}
	return low, high
}
