package freeport

import (
	"net"
	"testing"
)

func TestLoopbackGivesDistinctPortsThatCanBeBound(t *testing.T) {
	addrs, err := Loopback(20)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 20 {
		t.Fatalf("%d addresses, want 20", len(addrs))
	}
	seen := map[uint16]bool{}
	for _, a := range addrs {
		if !a.Addr().IsLoopback() || !a.Addr().Is4() || a.Port() == 0 {
			t.Errorf("%s is not a port on 127.0.0.1", a)
		}
		if seen[a.Port()] {
			t.Errorf("port %d given twice", a.Port())
		}
		seen[a.Port()] = true
		// Free once Loopback returned: the listeners were closed.
		l, err := net.Listen("tcp", a.String())
		if err != nil {
			t.Errorf("binding %s: %v", a, err)
			continue
		}
		l.Close()
	}
}

func TestLoopbackPortsAreBelowTheEphemeralRange(t *testing.T) {
	low, high := portsBelowEphemeral()
	addrs, err := Loopback(50)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p := int(a.Port()); p < low || p >= high {
			t.Errorf("port %d outside [%d, %d), where outgoing connections do not take ports", p, low, high)
		}
	}
}
