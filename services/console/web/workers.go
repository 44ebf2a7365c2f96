package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// drainWait bounds how long a drain from the console waits for the
// replica's jobs in flight: the page answers then, the drain goes on.
const drainWait = 20 * time.Second

// workerURL is the address of a worker's controls.
func workerURL(id string) string { return "/workers/" + url.PathEscape(id) }

// workerAction pauses, resumes or drains one stage replica: the console
// looks its address up in the worker registry and calls its StageService
// with the admin token, as grpcurl would.
func (c *Console) workerAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	name := "worker." + action
	if action != "pause" && action != "resume" && action != "drain" {
		c.unknownAction(w, r)
		return
	}
	workers, err := c.admin.ListWorkers(r.Context(), &v1.ListWorkersRequest{})
	if err != nil {
		c.finish(w, r, name, id, err, "/", flash{})
		return
	}
	var worker *v1.WorkerInfo
	for _, wk := range workers.GetWorkers() {
		if wk.GetId() == id {
			worker = wk
		}
	}
	switch {
	case worker == nil:
		c.finish(w, r, name, id, status.Errorf(codes.NotFound, "worker %s is not registered (it stopped?)", id), "/", flash{})
		return
	case worker.GetAddress() == "":
		c.finish(w, r, name, id, status.Errorf(codes.FailedPrecondition,
			"worker %s registered no address: set INGESTQ_ADVERTISE_ADDR on its service", id), "/", flash{})
		return
	case c.stageCreds == nil:
		c.finish(w, r, name, id, status.Error(codes.FailedPrecondition,
			"this console has no way to dial the stage replicas (no credentials for their gRPC port)"), "/", flash{})
		return
	}
	text, err := c.controlStage(r.Context(), worker, action)
	c.finish(w, r, name, id, err, "/", flash{"ok", text})
}

// controlStage calls one StageService method of the replica.
func (c *Console) controlStage(ctx context.Context, worker *v1.WorkerInfo, action string) (string, error) {
	conn, err := grpc.NewClient(worker.GetAddress(), grpc.WithTransportCredentials(c.stageCreds))
	if err != nil {
		return "", status.Errorf(codes.Unavailable, "worker %s at %s: %v", worker.GetId(), worker.GetAddress(), err)
	}
	defer conn.Close()
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	stage := v1.NewStageServiceClient(conn)
	at := fmt.Sprintf("%s (%s at %s)", worker.GetId(), worker.GetService(), worker.GetAddress())
	wait := c.stageTimeout
	if action == "drain" {
		wait = drainWait
	}
	// A replica that accepts connections but never answers must not hold
	// the operator for the whole request's time.
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	switch action {
	case "pause":
		if _, err := stage.Pause(ctx, &v1.PauseRequest{}); err != nil {
			return "", unanswered(ctx, at, action, wait, err)
		}
		return "The replica of worker " + at + " is paused: none of its stages takes a new job; jobs in flight finish.", nil
	case "resume":
		if _, err := stage.Resume(ctx, &v1.ResumeRequest{}); err != nil {
			return "", unanswered(ctx, at, action, wait, err)
		}
		return "The replica of worker " + at + " takes jobs again, in every stage it runs.", nil
	}
	resp, err := stage.Drain(ctx, &v1.DrainRequest{})
	if err != nil {
		return "", unanswered(ctx, at, action, wait, err)
	}
	if left := resp.GetInFlightLeft(); left > 0 {
		return fmt.Sprintf("The replica of worker %s is draining: it takes no job until it restarts; %d job(s) still in flight.", at, left), nil
	}
	return "The replica of worker " + at + " is drained: it takes no job until it restarts, and is idle.", nil
}

// unanswered names the replica and the bound when a call to it ran out of
// time; other errors pass as they are.
func unanswered(ctx context.Context, at, action string, wait time.Duration, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.Errorf(codes.DeadlineExceeded, "worker %s did not answer %s within %s: %v", at, action, wait, err)
	}
	return err
}
