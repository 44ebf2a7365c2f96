package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/zktest"
)

// TestWithoutCredentialsTheQueueIsReadOnly: a queue written by clients with
// ZooKeeper digest credentials can be read by anyone, but a client without
// them cannot take, move, create or delete anything.
func TestWithoutCredentialsTheQueueIsReadOnly(t *testing.T) {
	root := zktest.Root(t)
	ctx := testCtx(t)
	owner, err := Connect(ctx, Options{Servers: zktest.Servers(t), Root: root, Auth: "ingestq:s3cret", SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	bid, jids := spawn(t, owner, 2, DefaultPriority)

	for _, auth := range []string{"", "ingestq:wrong"} {
		t.Run("auth="+auth, func(t *testing.T) {
			other, err := Connect(ctx, Options{Servers: zktest.Servers(t), Root: root, Auth: auth, SessionTimeout: 4 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := other.GetJob(ctx, jids[0]); err != nil {
				t.Fatalf("reading a job: %v", err)
			}
			if _, err := other.GetBatch(ctx, bid); err != nil {
				t.Fatalf("reading a batch: %v", err)
			}
			writes := map[string]func() error{
				"claim a job": func() error { _, err := other.ClaimJob(ctx, jids[0]); return err },
				"take work":   func() error { _, _, err := other.NewConsumer(Pending, ConsumerOptions{}).TryNext(ctx); return err },
				"hold a job":  func() error { _, err := operatorOf(other).HoldJob(ctx, jids[1], ""); return err },
				"submit":      func() error { _, err := other.CreateBatch(ctx, sampleSubmission()); return err },
				"pause":       func() error { return operatorOf(other).Pause(ctx) },
				"hold a collection": func() error {
					return operatorOf(other).HoldCollection(ctx, "demo")
				},
			}
			for name, write := range writes {
				if err := write(); !errors.Is(err, ErrDenied) {
					t.Errorf("%s without credentials: %v, want a refusal (not authenticated)", name, err)
				}
			}
		})
	}
	// The owner still works.
	step(t, owner, jids[0], Change{To: Estimating})
}
