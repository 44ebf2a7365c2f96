package admin

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestAConsoleSignInEndedByOneClientIsEndedForEvery: two clients on one
// queue (two batchers) see the same sign-ins; one ending it ends it for
// the other, and an expired one is not live and is removed by cleanup.
func TestAConsoleSignInEndedByOneClientIsEndedForEvery(t *testing.T) {
	qa, a := newTools(t)
	b := New(queuetest.Connect(t, qa.Paths().Root()))
	ctx := testCtx(t)
	now := time.Now()
	const id = "0123456789abcdef0123456789abcdef"
	if err := a.SignIns.Create(ctx, id, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if live, err := b.SignIns.Live(ctx, id, now); err != nil || !live {
		t.Fatalf("the other client sees the sign-in as live=%v, %v", live, err)
	}
	if live, _ := b.SignIns.Live(ctx, id, now.Add(2*time.Hour)); live {
		t.Error("a sign-in is live after its expiry")
	}
	if err := b.SignIns.End(ctx, id); err != nil {
		t.Fatal(err)
	}
	if live, err := a.SignIns.Live(ctx, id, now); err != nil || live {
		t.Errorf("after the other client ended it, live=%v, %v", live, err)
	}
	if err := a.SignIns.End(ctx, id); err != nil {
		t.Errorf("ending a sign-in twice: %v", err)
	}

	const expired = "expired-0123456789abcdef"
	a.SignIns.Create(ctx, expired, now.Add(-time.Second))
	a.SignIns.Create(ctx, id, now.Add(time.Hour))
	live, err := b.SignIns.Cleanup(ctx, now)
	if err != nil || live != 1 {
		t.Errorf("cleanup: %d live, %v; want 1", live, err)
	}
	if got, _, err := nodes(a).Children(ctx, paths(a).Own().SignIns()); err != nil || len(got) != 1 || got[0] != id {
		t.Errorf("after cleanup: %v %v, want only %s", got, err, id)
	}
	for _, bad := range []string{"short", "../../batches", "0123456789abcdef/x", ""} {
		if err := a.SignIns.Create(ctx, bad, now.Add(time.Hour)); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("sign-in id %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestConsoleSignInsAreBounded: at the limit, a sign-in removes the
// expired ones to make room, and is refused when all are live.
func TestConsoleSignInsAreBounded(t *testing.T) {
	_, c := newTools(t)
	ctx := testCtx(t)
	now := time.Now()
	id := func(i int) string { return fmt.Sprintf("signin-%016d", i) }
	c.SignIns.createSignIn(ctx, id(0), now.Add(-time.Second), 3)
	for i := 1; i < 3; i++ {
		if err := c.SignIns.createSignIn(ctx, id(i), now.Add(time.Hour), 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SignIns.createSignIn(ctx, id(3), now.Add(time.Hour), 3); err != nil {
		t.Fatalf("a sign-in at the limit with an expired one: %v", err)
	}
	if live, _ := c.SignIns.Live(ctx, id(0), now.Add(-time.Hour)); live {
		t.Error("the expired sign-in was not removed to make room")
	}
	if err := c.SignIns.createSignIn(ctx, id(4), now.Add(time.Hour), 3); !errors.Is(err, queue.ErrExists) {
		t.Errorf("a sign-in beyond the limit: %v, want ErrExists", err)
	}
}
