// Package waittest waits, in tests, on a condition the test has no way to
// be told of (a state in ZooKeeper, a file, a server's answer): it looks
// again and again, soon at first, then less often, until the condition
// holds or the time allowed runs out. Stays is the other half: what must
// not happen, looked at throughout a window, not once at its end. For is
// what no condition stands for: a fault's or a measure's own length.
package waittest

import (
	"context"
	"testing"
	"time"
)

// Looks between two looks: from firstLook, growing by half each time, to
// lastLook.
const (
	firstLook = 5 * time.Millisecond
	lastLook  = 200 * time.Millisecond
)

// Until calls cond until it returns nil. Once within has passed, the test
// fails with what cond last said (why the condition does not hold yet).
// cond runs on the test's goroutine: it may end the test itself.
func Until(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	look := firstLook
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", within, err)
		}
		timer := time.NewTimer(look)
		<-timer.C
		look = min(look*3/2, lastLook)
	}
}

// True is Until for a condition that only says whether it holds: what
// names it in the failure.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, within, func() error {
		if cond() {
			return nil
		}
		return notYet(what)
	})
}

type notYet string

func (w notYet) Error() string { return "never happened: " + string(w) }

// Stays calls cond throughout d, every few milliseconds, and fails the
// test as soon as it returns an error: what must not happen in a window in
// which it could.
func Stays(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if err := cond(); err != nil {
			t.Fatal(err)
		}
		left := time.Until(end)
		if left <= 0 {
			return
		}
		timer := time.NewTimer(min(left, 10*time.Millisecond))
		<-timer.C
	}
}

// For lasts d, or until ctx ends (false): the length of something only
// time ends, as a fault's (an outage, a stall) or a measure's, which no
// condition could stand for. A test whose context ends stops waiting.
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
