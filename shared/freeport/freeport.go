// Package freeport hands out free TCP ports on loopback, for tests and the
// demo stack, which start servers (ZooKeeper, the services) that must be
// told their port before they bind it.
//
// A port found free can be taken by someone else before the server meant
// for it binds it. Two rules keep that from happening:
//   - Ports come from below the kernel's ephemeral range. A port from that
//     range (what binding port 0 gives) is also what every outgoing
//     connection on the machine takes.
//   - Ports come from blocks that a Reservation holds for as long as it
//     lives, by listening on each block's first port. Every Reservation, in
//     this process or another, passes over a block whose first port is
//     bound, so none of them hands out a port another one did, even one
//     whose server is down for a restart.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
)

// blockSize is how many ports a block holds, its lock included.
const blockSize = 32

// Reservation hands out ports from the blocks it holds. It is safe for
// concurrent use. Close gives the blocks back.
type Reservation struct {
	low, high int // where blocks start: low + k*blockSize, ending by high

	mu     sync.Mutex
	locks  []net.Listener // one per block held, on its first port
	next   int            // the next port of the newest block to offer
	end    int            // the end of the newest block
	closed bool
}

// Reserve returns a Reservation that holds no block yet: it takes one when
// Take first needs it.
func Reserve() *Reservation {
	low, high := portsBelowEphemeral()
	return reserveIn(low, high)
}

func reserveIn(low, high int) *Reservation {
	return &Reservation{low: low, high: high}
}

// Take returns n distinct addresses on 127.0.0.1, none given before by this
// Reservation or by any other one alive, each free when it was given.
func (r *Reservation) Take(n int) ([]netip.AddrPort, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("freeport: the reservation is closed")
	}
	out := make([]netip.AddrPort, 0, n)
	for len(out) < n {
		if r.next >= r.end {
			if err := r.lockBlock(); err != nil {
				return nil, err
			}
		}
		port := r.next
		r.next++
		// Something that does not reserve (a server of another program)
		// may hold a port of the block: pass over it.
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(port)))
	}
	return out, nil
}

// lockBlock takes a block no Reservation holds, looking from a random one
// on so that reservations made at the same moment seldom meet.
func (r *Reservation) lockBlock() error {
	blocks := (r.high - r.low) / blockSize
	if blocks <= 0 {
		return fmt.Errorf("freeport: no room for a block of %d ports in [%d, %d)", blockSize, r.low, r.high)
	}
	first := rand.IntN(blocks)
	for i := range blocks {
		base := r.low + ((first+i)%blocks)*blockSize
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base))
		if err != nil {
			continue // held by another reservation, or in use
		}
		r.locks = append(r.locks, l)
		r.next, r.end = base+1, base+blockSize
		return nil
	}
	return fmt.Errorf("freeport: every block of %d ports in [%d, %d) is held", blockSize, r.low, r.high)
}

// Close gives back the blocks: their ports may be handed out again, to
// this process or another. Closing twice is harmless.
func (r *Reservation) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.locks {
		l.Close()
	}
	r.locks, r.closed = nil, true
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
