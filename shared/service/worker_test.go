package service

import (
	"context"
	"testing"

	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestServiceNamesItselfInJobHistories: the changes a service's queue
// client makes are recorded as made by queue.ProcessName of the service.
func TestServiceNamesItselfInJobHistories(t *testing.T) {
	type result struct {
		worker string
		err    error
	}
	got := make(chan result, 1)
	spec := Spec{
		Name:     "teststage",
		Defaults: testDefaults,
		Setup: func(ctx context.Context, env *Env) error {
			_, jids, err := queuetest.Submit(ctx, env.Session, []batches.NewJob{{}})
			if err != nil {
				got <- result{err: err}
				return nil
			}
			st, err := jobs.NewReader(env.Session).JobStatus(ctx, jids[0])
			if err == nil && len(st.GetHistory()) > 0 {
				got <- result{worker: st.GetHistory()[0].GetWorker()}
			} else {
				got <- result{err: err}
			}
			return nil
		},
	}
	svc := startService(t, spec, zktest.Servers(t), "-metrics-listen", "")
	var r result
	select {
	case r = <-got:
	case <-svc.done:
		t.Fatalf("service stopped before Setup reported: %v", svc.err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := session.ProcessName("teststage"); r.worker != want {
		t.Errorf("history entry by %q, want %q", r.worker, want)
	}
}
