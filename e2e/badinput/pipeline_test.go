package badinput

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// pipeline is one running stack and the clients the tests use on it.
type pipeline struct {
	stack   *stack.Stack
	conn    *grpc.ClientConn // to the batcher
	batches v1.BatchServiceClient
	admin   v1.AdminServiceClient
	// q reads the queue directly, as an operator's tool would.
	q *queue.Client
}

// pipelineOptions say how a stack differs from a plain one.
type pipelineOptions struct {
	env map[string]string
	// clientTLS is how the stack's health checks and the tests' gRPC
	// clients dial services that serve TLS; nil dials plaintext.
	clientTLS *tls.Config
	// zkAuth is the digest credential of the tests' queue client (the
	// services get theirs through env).
	zkAuth string
}

// startPipeline starts a stack named name on the suite's ZooKeeper under a
// root of its own, with its data under the suite's directory.
func (s *suite) startPipeline(ctx context.Context, name string, o pipelineOptions) (*pipeline, error) {
	st, err := stack.Start(ctx, stack.Options{
		Dir: filepath.Join(s.dir, name), BinDir: s.bin, ProfilesDir: s.profiles,
		ZooKeeper: []string{s.zk.Addr}, Root: "/badinput-" + name, AdminToken: adminToken,
		Env: o.env, ClientTLS: o.clientTLS,
	})
	if err != nil {
		return nil, err
	}
	p := &pipeline{stack: st}
	creds := insecure.NewCredentials()
	if o.clientTLS != nil {
		creds = credentials.NewTLS(o.clientTLS)
	}
	if p.conn, err = grpc.NewClient(st.Addr("batcher"), grpc.WithTransportCredentials(creds)); err != nil {
		return p, err
	}
	p.batches, p.admin = v1.NewBatchServiceClient(p.conn), v1.NewAdminServiceClient(p.conn)
	connectCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p.q, err = queue.Connect(connectCtx, queue.Options{Servers: st.Servers, Root: st.Root, SessionTimeout: 4 * time.Second, Auth: o.zkAuth})
	return p, err
}

// startTestPipeline starts a stack for one test; when the test ends it is
// checked (see stopAndCheck) and stopped.
func startTestPipeline(t *testing.T, name string, o pipelineOptions) *pipeline {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := shared.startPipeline(ctx, name, o)
	if err != nil {
		if p != nil {
			p.close(ctx)
		}
		t.Fatalf("starting the %s stack: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := errors.Join(p.stopAndCheck(ctx), p.close(ctx)); err != nil {
			t.Errorf("%s stack: %v (logs in %s)", name, err, p.stack.LogDir)
		}
	})
	return p
}

// stopAndCheck checks what the stack's cases left behind: no lock on a job,
// batch or object while the services run; then, once they have stopped
// (draining, releasing their locks), a clean fsck and no worker entry.
func (p *pipeline) stopAndCheck(ctx context.Context) error {
	errs := []error{p.checkNothingLocked(ctx)}
	if err := p.stack.StopServices(ctx); err != nil {
		errs = append(errs, err)
	}
	if rep, err := p.q.Fsck(ctx, queue.FsckOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("fsck: %w", err))
	} else if !rep.Clean() {
		errs = append(errs, fmt.Errorf("fsck found damage: %+v", rep.Damages))
	}
	if ws, err := p.q.ListWorkers(ctx); err != nil || len(ws) > 0 {
		errs = append(errs, fmt.Errorf("worker entries left after the stop: %d (%v)", len(ws), err))
	}
	return errors.Join(errs...)
}

// checkNothingLocked lists every job and batch and the object locks: none
// may be held once the cases have ended.
func (p *pipeline) checkNothingLocked(ctx context.Context) error {
	var errs []error
	token := ""
	for range 100 {
		jobs, next, err := p.q.ListJobs(ctx, queue.JobFilter{PageSize: 1000, PageToken: token})
		if err != nil {
			return fmt.Errorf("listing jobs: %w", err)
		}
		for _, j := range jobs {
			if j.GetLocked() {
				errs = append(errs, fmt.Errorf("job %s (%s) still locked", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus())))
			}
		}
		if token = next; token == "" {
			break
		}
	}
	token = ""
	for range 100 {
		batches, next, err := p.q.ListBatches(ctx, queue.BatchFilter{PageSize: 500, PageToken: token})
		if err != nil {
			return fmt.Errorf("listing batches: %w", err)
		}
		for _, b := range batches {
			if b.GetLocked() {
				errs = append(errs, fmt.Errorf("batch %s (%s) still locked", b.GetId(), queue.BatchStateName(b.GetStatus().GetStatus())))
			}
		}
		if token = next; token == "" {
			break
		}
	}
	storage, inventory, err := p.q.ObjectLocks(ctx)
	if err != nil {
		return fmt.Errorf("listing object locks: %w", err)
	}
	if len(storage)+len(inventory) > 0 {
		errs = append(errs, fmt.Errorf("object locks left: storage %v, inventory %v", storage, inventory))
	}
	return errors.Join(errs...)
}

// close closes the clients and stops the stack.
func (p *pipeline) close(ctx context.Context) error {
	if p.conn != nil {
		p.conn.Close()
	}
	if p.q != nil {
		p.q.Close()
	}
	return p.stack.Stop(ctx)
}
