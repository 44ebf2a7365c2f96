package freeport

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestTakeGivesDistinctPortsThatCanBeBound(t *testing.T) {
	r := Reserve()
	defer r.Close()
	addrs, err := r.Take(20)
	if err != nil {
		t.Fatal(err)
	}
	more, err := r.Take(50) // past the first block
	if err != nil {
		t.Fatal(err)
	}
	addrs = append(addrs, more...)
	seen := map[uint16]bool{}
	for _, a := range addrs {
		if !a.Addr().IsLoopback() || !a.Addr().Is4() || a.Port() == 0 {
			t.Errorf("%s is not a port on 127.0.0.1", a)
		}
		if seen[a.Port()] {
			t.Errorf("port %d given twice", a.Port())
		}
		seen[a.Port()] = true
		l, err := net.Listen("tcp", a.String())
		if err != nil {
			t.Errorf("binding %s: %v", a, err)
			continue
		}
		l.Close()
	}
}

func TestTakenPortsAreBelowTheEphemeralRange(t *testing.T) {
	low, high := portsBelowEphemeral()
	r := Reserve()
	defer r.Close()
	addrs, err := r.Take(50)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p := int(a.Port()); p < low || p >= high {
			t.Errorf("port %d outside [%d, %d), where outgoing connections do not take ports", p, low, high)
		}
	}
}

// heldBlock reserves a block and returns the reservation and where the
// block starts: its ports are given out, none of them bound.
func heldBlock(t *testing.T) (*Reservation, int) {
	t.Helper()
	r := Reserve()
	t.Cleanup(r.Close)
	addrs, err := r.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	return r, int(addrs[0].Port()) - 1 // the first port is the block's lock
}

// The ports of a block stay out of every other reservation's reach while
// the one holding it lives, though no server has bound them yet.
func TestAHeldBlockIsPassedOverByAnotherReservation(t *testing.T) {
	held, base := heldBlock(t)
	other := reserveIn(base, base+blockSize) // room for that block alone
	defer other.Close()
	if addrs, err := other.Take(1); err == nil {
		t.Fatalf("another reservation was given %v, a port of a held block", addrs)
	}
	held.Close()
	if _, err := other.Take(1); err != nil {
		t.Fatalf("the block was given back, yet another reservation cannot take it: %v", err)
	}
}

func TestAHeldBlockIsPassedOverByAnotherProcess(t *testing.T) {
	_, base := heldBlock(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTakeOnePort$")
	cmd.Env = append(os.Environ(), "FREEPORT_TEST_BASE="+strconv.Itoa(base))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "refused:") {
		t.Fatalf("another process was given a port of a held block:\n%s", out)
	}
}

// TestHelperTakeOnePort runs in the process TestAHeldBlockIsPassedOverByAnotherProcess
// starts: it reports what one port taken from the block at
// FREEPORT_TEST_BASE gave.
func TestHelperTakeOnePort(t *testing.T) {
	v := os.Getenv("FREEPORT_TEST_BASE")
	if v == "" {
		t.Skip("run by TestAHeldBlockIsPassedOverByAnotherProcess")
	}
	base, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	r := reserveIn(base, base+blockSize)
	defer r.Close()
	addrs, err := r.Take(1)
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println("given:", addrs)
}

func TestAClosedReservationGivesNothing(t *testing.T) {
	r := Reserve()
	r.Close()
	if _, err := r.Take(1); err == nil {
		t.Fatal("a closed reservation gave a port")
	}
}
