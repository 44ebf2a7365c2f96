package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
)

// TestAClaimFencedByAStatusWrittenWithoutTheLockRemovesTheLock: a writer
// that ignores locks (a peer's admin failing a job) changes the status of
// a job a consumer holds. The consumer's commit, or release, is refused,
// and its lock node must be gone right after: left there, it would keep
// the job locked for as long as the consumer's session lives.
func TestAClaimFencedByAStatusWrittenWithoutTheLockRemovesTheLock(t *testing.T) {
	ends := []struct {
		name string
		end  func(ctx context.Context, cl *jobs.Claim) error
	}{
		{"commit", func(ctx context.Context, cl *jobs.Claim) error {
			return cl.Commit(ctx, jobs.Change{To: queue.Estimating})
		}},
		{"release", func(ctx context.Context, cl *jobs.Claim) error { return cl.Release(ctx) }},
	}
	for _, tt := range ends {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t)
			ctx := testCtx(t)
			_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
			jid := jids[0]
			cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{}).Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The peer's write: status, then entry, no lock.
			status := `{"status":"Failed","last_modified":"2026-11-22 03:51:07 +0000","message":"failed by an administrator","retry_count":0}`
			if _, err := c.z.Set(ctx, c.p.Job(jid).Status(), []byte(status), -1); err != nil {
				t.Fatal(err)
			}
			if err := c.z.Delete(ctx, c.p.Entry(queue.Pending, queue.DefaultPriority, jid), -1); err != nil {
				t.Fatal(err)
			}
			if _, err := c.z.Create(ctx, c.p.Entry(queue.Failed, queue.DefaultPriority, jid), nil, 0); err != nil {
				t.Fatal(err)
			}
			if err := tt.end(ctx, cl); !errors.Is(err, queue.ErrFenced) {
				t.Fatalf("%s after the peer's write: %v, want ErrFenced", tt.name, err)
			}
			if ok, _, err := c.z.Exists(ctx, c.p.Job(jid).Lock()); err != nil || ok {
				t.Fatalf("the lock node is still there after the refused %s (%v)", tt.name, err)
			}
			if _, err := operatorMove(ctx, c, jid, queue.Failed, queue.Pending, ""); err != nil {
				t.Fatalf("requeueing the failed job: %v", err)
			}
		})
	}
}

// TestAJobFreedWithoutAnyChangeToItsFolderIsTakenWithinTheBackstop: a job
// that becomes free with no child of its state folder changing fires no
// watch. Here a writer that makes a transition in several calls has
// written the next status and not moved the entry yet when the consumer
// meets the job (it is passed over, as moving on), then puts the status
// back. The consumer must take the job within its backstop all the same.
func TestAJobFreedWithoutAnyChangeToItsFolderIsTakenWithinTheBackstop(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, queue.DefaultPriority)
	jid := jids[0]
	pending := queuetest.NodeData(t, c.s, c.p.Job(jid).Status())
	moving := `{"status":"Estimating","last_modified":"2026-11-22 03:51:07 +0000","last_successful_status":"Pending","retry_count":0}`
	if _, err := c.z.Set(ctx, c.p.Job(jid).Status(), []byte(moving), -1); err != nil {
		t.Fatal(err)
	}
	co := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{})
	co.SetBackstop(time.Second)
	if cl, _, err := co.TryNext(ctx); err != nil || cl != nil {
		t.Fatalf("TryNext while the job moves: %v, %v; want nothing to take", cl, err)
	}
	if _, err := c.z.Set(ctx, c.p.Job(jid).Status(), []byte(pending), -1); err != nil {
		t.Fatal(err)
	}
	// Bounded well past the backstop, which is at least 100 listing times:
	// on a loaded machine a listing may take tens of milliseconds.
	takeCtx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cl, err := co.Next(takeCtx)
	if err != nil {
		t.Fatalf("the job was not taken: %v", err)
	}
	if cl.ID() != jid {
		t.Fatalf("took %s, want %s", cl.ID(), jid)
	}
}
