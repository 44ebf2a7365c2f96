package admin

import (
	"errors"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestWithoutCredentialsTheQueueIsReadOnly: a queue written by clients with
// ZooKeeper digest credentials can be read by anyone, but a client without
// them cannot take, move, create or delete anything, as a stage or as an
// operator.
func TestWithoutCredentialsTheQueueIsReadOnly(t *testing.T) {
	root := zktest.Root(t)
	ctx := testCtx(t)
	owner, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: root, Auth: "ingestq:s3cret", SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	bid, jids := spawn(t, owner, 2, queue.DefaultPriority)

	for _, auth := range []string{"", "ingestq:wrong"} {
		t.Run("auth="+auth, func(t *testing.T) {
			other, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: root, Auth: auth, SessionTimeout: 4 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := jobs.NewReader(other).GetJob(ctx, jids[0]); err != nil {
				t.Fatalf("reading a job: %v", err)
			}
			if _, err := batches.New(other).GetBatch(ctx, bid); err != nil {
				t.Fatalf("reading a batch: %v", err)
			}
			a := New(other)
			writes := map[string]func() error{
				"claim a job": func() error { _, err := jobs.New(other).ClaimJob(ctx, jids[0]); return err },
				"take work": func() error {
					_, _, err := jobs.New(other).NewConsumer(queue.Pending, jobs.ConsumerOptions{}).TryNext(ctx)
					return err
				},
				"hold a job": func() error { _, err := a.Jobs.Hold(ctx, jids[1], ""); return err },
				"submit": func() error {
					_, err := batches.New(other).CreateBatch(ctx, &v1.Submission{ProfileName: "demo_profile", Submitter: "dana",
						PayloadUrl: "http://127.0.0.1:1/manifest.checkm", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS})
					return err
				},
				"pause":             func() error { return a.Queue.Pause(ctx) },
				"hold a collection": func() error { return a.Queue.HoldCollection(ctx, "demo") },
			}
			for name, write := range writes {
				if err := write(); !errors.Is(err, queue.ErrDenied) {
					t.Errorf("%s without credentials: %v, want a refusal (not authenticated)", name, err)
				}
			}
		})
	}
	// The owner still works.
	queuetest.Move(t, owner, jids[0], jobs.Change{To: queue.Estimating})
}
