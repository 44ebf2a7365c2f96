package stage

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/service"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestStageServiceOverGRPC runs two runners in one replica behind the shared
// server and drives them with StageService as an operator would.
func TestStageServiceOverGRPC(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	srv, err := server.New(server.Options{Logger: slog.Default(), AdminToken: "s3cret", DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	env := &service.Env{Name: "estimator", Version: "v1.4.2", Config: &config.Common{Concurrency: 2}, Logger: slog.Default(), Session: q, Jobs: jobs.New(q), Server: srv}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handler := func(context.Context, Job) Outcome { return Next(jobs.Change{}) }
	runners, err := Start(ctx, env,
		Config{Name: "pending", From: queue.Pending, To: queue.Estimating, Handler: handler},
		Config{Name: "estimating", From: queue.Estimating, To: queue.Provisioning, Handler: handler})
	if err != nil {
		t.Fatal(err)
	}
	conn := servicetest.Serve(t, srv)
	srv.SetServing(true)
	client := v1.NewStageServiceClient(conn)
	withToken := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")

	st, err := client.GetStatus(ctx, &v1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetWorkers()) != 2 || st.GetWorkers()[0].GetStage() != "Pending" || st.GetWorkers()[1].GetStage() != "Estimating" {
		t.Fatalf("workers %v", st.GetWorkers())
	}
	for _, w := range st.GetWorkers() {
		if w.GetVersion() != "v1.4.2" || w.GetService() != "estimator" {
			t.Errorf("worker %s shows service %q version %q, want the service's own", w.GetId(), w.GetService(), w.GetVersion())
		}
	}
	if _, err := client.Pause(ctx, &v1.PauseRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Pause without the token: %v, want Unauthenticated", err)
	}
	p, err := client.Pause(withToken, &v1.PauseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The state produced is in the JSON (the field is set) even when false.
	if p.Paused == nil || !*p.Paused {
		t.Errorf("Pause answers paused %v, want true", p.Paused)
	}
	for _, w := range p.GetWorkers() {
		if !w.GetPaused() {
			t.Errorf("%s not paused", w.GetId())
		}
	}
	jids := queuetest.SpawnN(t, q, newJobs(1), queue.Pending)
	waittest.Stays(t, 300*time.Millisecond, func() error {
		if s := queuetest.Status(t, q, jids[0]).GetStatus(); s != queue.Pending {
			return fmt.Errorf("paused replica moved the job to %s", queue.JobStateName(s))
		}
		return nil
	})
	r, err := client.Resume(withToken, &v1.ResumeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Paused == nil || *r.Paused {
		t.Errorf("Resume answers paused %v, want false, set", r.Paused)
	}
	queuetest.Eventually(t, "job through both runners", func() bool { s := queuetest.Status(t, q, jids[0]).GetStatus(); return s == queue.Provisioning })
	d, err := client.Drain(withToken, &v1.DrainRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetInFlightLeft() != 0 || d.InFlightLeft == nil {
		t.Errorf("drain left %d jobs (said: %t)", d.GetInFlightLeft(), d.InFlightLeft != nil)
	}
	for _, r := range runners {
		<-r.Done()
	}
	ws, err := admin.New(q).Queue.ListWorkers(ctx)
	if err != nil || len(ws) != 0 {
		t.Errorf("workers left in the registry after the drain: %v, %v", ws, err)
	}
}
