package badinput

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/leftovers"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/session"
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
	q *session.Session
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
	p.q, err = session.Connect(connectCtx, session.Options{Servers: st.Servers, Root: st.Root, SessionTimeout: 4 * time.Second, Auth: o.zkAuth})
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
	errs := []error{leftovers.Locks(ctx, p.q)}
	if err := p.stack.StopServices(ctx); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, leftovers.AfterStop(ctx, p.q))
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
