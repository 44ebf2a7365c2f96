package admin

import (
	"errors"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

func TestHeldCollectionIsSeenFromTheCache(t *testing.T) {
	c, a := newTools(t)
	ctx := testCtx(t)
	stages := jobs.New(c)
	if held, err := stages.CollectionHeld(ctx, "demo"); err != nil || held {
		t.Fatalf("held=%v err=%v before any hold", held, err)
	}
	if err := a.Queue.HoldCollection(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, "the hold seen", func() bool { h, _ := stages.CollectionHeld(ctx, "demo"); return h })
	if names, _ := a.Queue.HeldCollections(ctx); len(names) != 1 || names[0] != "demo" {
		t.Errorf("HeldCollections = %v", names)
	}
	if err := a.Queue.ReleaseCollection(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	queuetest.Eventually(t, "the release seen", func() bool { h, _ := stages.CollectionHeld(ctx, "demo"); return !h })
	if err := a.Queue.HoldCollection(ctx, "a/b"); err == nil {
		t.Error("a collection name with '/' was accepted")
	}
}

// TestACollectionNameZooKeeperRefusesIsInvalid: a collection whose name
// ZooKeeper would refuse as a node name is ErrInvalid before anything is
// written.
func TestACollectionNameZooKeeperRefusesIsInvalid(t *testing.T) {
	_, a := newTools(t)
	ctx := testCtx(t)
	for _, m := range []string{"coll\U0001F600", "coll\ufffe", "a\x7fb"} {
		if err := a.Queue.HoldCollection(ctx, m); !errors.Is(err, queue.ErrInvalid) {
			t.Errorf("HoldCollection(%q): %v, want ErrInvalid", m, err)
		}
	}
	if names, err := a.Queue.HeldCollections(ctx); err != nil || len(names) != 0 {
		t.Errorf("refused collections left holds: %v (%v)", names, err)
	}
}
