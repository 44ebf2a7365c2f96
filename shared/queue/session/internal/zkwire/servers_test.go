package zkwire

import (
	"errors"
	"os"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/loopbacktest"
)

// ring is a serverRing over three servers, in a known order.
func ring(t *testing.T, timeout time.Duration) (*serverRing, []string) {
	t.Helper()
	r := newServerRing(timeout)
	if err := r.Init([]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range r.servers {
		order = append(order, s.addr)
	}
	return r, order
}

func next(t *testing.T, r *serverRing) string {
	t.Helper()
	addr, retryStart := r.Next()
	if retryStart {
		t.Fatalf("Next said to start a round again (go-zookeeper then sleeps a second) on an open ring")
	}
	return addr
}

// The bound for a connection's opening answer fits a round of every
// server into half the session timeout.
func TestTheOpeningOfAConnectionIsAwaitedASixthOfTheSessionTimeoutAmongThreeServers(t *testing.T) {
	r, order := ring(t, 6*time.Second)
	bound, err := r.begin(order[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Second; bound != want {
		t.Fatalf("handshake bound %s among 3 servers with a 6s session; want %s", bound, want)
	}
}

// A server that did not answer in time is passed over for a session
// timeout, while another server may answer; a server that answered, if
// only by closing the connection, is not.
func TestAServerThatHungIsPassedOverForASessionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, order := ring(t, 4*time.Second)
		a, b, c := order[0], order[1], order[2]
		if got := next(t, r); got != a {
			t.Fatalf("first server %s, want %s", got, a)
		}
		r.silent(a, true)
		r.answered(b) // refused or closed: an election, say
		got := []string{next(t, r), next(t, r), next(t, r), next(t, r)}
		if want := []string{b, c, b, c}; !slices.Equal(got, want) {
			t.Fatalf("servers tried after %s hung: %v, want %v", a, got, want)
		}
		time.Sleep(4 * time.Second) // synctest's time: a session timeout passes
		if got := next(t, r); got != a {
			t.Fatalf("after a session timeout the hung server is tried again in its turn; got %s, want %s", got, a)
		}
	})
}

// When every server hung, the one passed over longest ago is tried: a
// ring never stops trying.
func TestWhenEveryServerHungTheOneWhosePassEndsFirstIsTried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, order := ring(t, 4*time.Second)
		for i, addr := range []string{order[1], order[2], order[0]} {
			if i > 0 {
				time.Sleep(100 * time.Millisecond) // synctest's time: each passed over a moment after the other
			}
			r.silent(addr, false)
		}
		if got := next(t, r); got != order[1] {
			t.Fatalf("every server hung: tried %s, want %s (hung first)", got, order[1])
		}
	})
}

// A server silent for its handshake bound gets twice the bound next time,
// up to go-zookeeper's own wait, so a slow server is waited for long
// enough in the end; a session opened with it resets it.
func TestAServerSilentOnOpeningIsWaitedForTwiceAsLongNextTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, order := ring(t, 3*time.Second)
		a := order[0]
		var bounds []time.Duration
		for range 7 {
			bound, err := r.begin(a)
			if err != nil {
				t.Fatal(err)
			}
			bounds = append(bounds, bound)
			r.silent(a, true)
		}
		want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
			16 * time.Second, 20 * time.Second}
		if !slices.Equal(bounds, want) {
			t.Fatalf("bounds of successive silent openings %v, want %v", bounds, want)
		}
		r.silent(a, false) // a silent open connection leaves the bound be
		if bound, _ := r.begin(a); bound != 20*time.Second {
			t.Fatalf("bound after a silent open connection %s, want it unchanged (20s)", bound)
		}
		r.cur = 0
		r.Connected()
		if bound, _ := r.begin(a); bound != 500*time.Millisecond {
			t.Fatalf("bound after a session was opened %s, want 500ms", bound)
		}
	})
}

// Attempts come quickly while the session may still be kept; then
// go-zookeeper paces them as it does alone, told where each round of
// servers begins (it answers the requests waiting, and pauses a second).
// A session opened starts the pace afresh.
func TestAttemptsComeQuicklyForASessionTimeoutThenInGoZookeepersRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := ring(t, time.Second)
		start := time.Now()
		var at []time.Duration
		var rounds []int
		for i := range 16 {
			addr, round := r.Next()
			if round {
				rounds = append(rounds, i)
				time.Sleep(time.Second) // synctest's time: go-zookeeper's pause before a round
			}
			if _, err := r.begin(addr); err != nil {
				t.Fatal(err)
			}
			at = append(at, time.Since(start))
		}
		var want []time.Duration
		for i := range 11 { // 0 to 1s, 100ms apart
			want = append(want, time.Duration(i)*quickPace)
		}
		want = append(want, time.Second, 2*time.Second, 2*time.Second, 2*time.Second, 3*time.Second)
		if !slices.Equal(at, want) {
			t.Errorf("attempts began at %v, want %v", at, want)
		}
		if !slices.Equal(rounds, []int{12, 15}) {
			t.Errorf("rounds began at attempts %v, want [12 15]", rounds)
		}
		r.Connected()
		before := time.Now()
		addr, round := r.Next()
		if _, err := r.begin(addr); err != nil || round || time.Since(before) != 0 {
			t.Fatalf("the first attempt after a session waited %s, round %v (%v); want no wait", time.Since(before), round, err)
		}
	})
}

// Closing the ring ends a wait for the pace, and tells go-zookeeper to
// look whether it was closed (it looks only at the start of a round).
func TestAClosedRingEndsItsWaitAndTheAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := ring(t, 4*time.Second)
		addr, _ := r.Next()
		r.begin(addr)
		addr, _ = r.Next()
		errc := make(chan error, 1)
		go func() {
			_, err := r.begin(addr)
			errc <- err
		}()
		synctest.Wait()
		r.close()
		if err := <-errc; !errors.Is(err, zk.ErrClosing) {
			t.Fatalf("a wait for the pace ended by close: %v, want zk.ErrClosing", err)
		}
		if _, retryStart := r.Next(); !retryStart {
			t.Fatal("a closed ring does not tell go-zookeeper to look whether it was closed")
		}
	})
}

// The dialer holds go-zookeeper's wait for the answer that opens a
// connection (ten read timeouts) to the server's bound: a peer that takes
// the connection and never answers is given up on, and taken for hung.
func TestTheOpeningOfAConnectionToASilentPeerEndsAtItsBound(t *testing.T) {
	silent := loopbacktest.Silent(t)
	w := newWire(1 << 20)
	w.ring = newServerRing(3 * time.Second)
	if err := w.ring.Init([]string{silent}); err != nil {
		t.Fatal(err)
	}
	addr, _ := w.ring.Next()
	conn, err := w.dial("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// As go-zookeeper's authenticate does.
	conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write(connectRequest(0)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	start := time.Now()
	_, err = conn.Read(make([]byte, 4))
	waited := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("reading a silent peer's opening answer: %v, want its deadline exceeded", err)
	}
	// The bound is 1.5s (half the session timeout, one server): the
	// deadline that ended the wait is not go-zookeeper's of 20s.
	if waited >= 20*time.Second {
		t.Fatalf("waited %s for a silent peer's opening answer, go-zookeeper's whole wait, not its bound of 1.5s", waited)
	}
	if next, _ := w.ring.Next(); next != addr || w.ring.servers[0].passUntil.IsZero() {
		t.Fatal("a peer silent on opening is not taken for hung")
	}
	if w.ring.servers[0].bound != 3*time.Second {
		t.Fatalf("its next bound %s, want 3s", w.ring.servers[0].bound)
	}
}
