package badinput

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// checkHealth asks one service for its overall health over creds.
func checkHealth(addr string, creds credentials.TransportCredentials) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return resp.GetStatus(), err
}

// wantServing checks that every service of p answers SERVING over creds.
func wantServing(t *testing.T, p *pipeline, creds credentials.TransportCredentials) {
	t.Helper()
	for _, service := range stack.Services {
		st, err := checkHealth(p.stack.Addr(service), creds)
		if err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: health %s, %v; want SERVING", service, st, err)
		}
	}
}

// wantRefused checks that every service of p refuses a connection over
// creds: the call fails Unavailable, its message saying want.
// (Under TLS 1.3 the client learns of a refused client certificate only
// from an alert that may come after its first write: the message is then
// a broken pipe rather than the alert, so those cases want no words.)
func wantRefused(t *testing.T, p *pipeline, creds credentials.TransportCredentials, want ...string) {
	t.Helper()
	for _, service := range stack.Services {
		t.Run(service, func(t *testing.T) {
			st, err := checkHealth(p.stack.Addr(service), creds)
			if err == nil {
				t.Fatalf("connection accepted: health %s", st)
			}
			wantStatus(t, err, codes.Unavailable, want...)
		})
	}
}

// zkAuth is the digest credential of the access-controlled stack.
const zkAuth = "ingestq:s3cret-for-tests"

// TestTLSAndZooKeeperACLsGuardAStackThatStillCompletesABatch runs a stack
// with TLS on every gRPC port and ZooKeeper digest ACLs: a plaintext
// client, and a TLS client that does not trust the services' CA, are
// refused on every port; a client trusting the CA gets SERVING from every
// service and a batch through the whole pipeline. A ZooKeeper client
// without the credentials (or with wrong ones) reads the queue but every
// write it tries is refused, and leaves the queue as it was.
func TestTLSAndZooKeeperACLsGuardAStackThatStillCompletesABatch(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ingestq test CA")
	cert, key := ca.serverFiles(t, dir)
	trusting := &tls.Config{RootCAs: ca.pool(), MinVersion: tls.VersionTLS12}
	p := startTestPipeline(t, "guarded", pipelineOptions{
		env:       map[string]string{"INGESTQ_TLS_CERT": cert, "INGESTQ_TLS_KEY": key, "INGESTQ_ZK_AUTH": zkAuth},
		clientTLS: trusting,
		zkAuth:    zkAuth,
	})

	t.Run("plaintext client refused on every port", func(t *testing.T) {
		wantRefused(t, p, insecure.NewCredentials())
	})
	t.Run("client not trusting the CA refuses every service", func(t *testing.T) {
		wantRefused(t, p, credentials.NewTLS(&tls.Config{RootCAs: newTestCA(t, "another CA").pool()}), "certificate signed by unknown authority")
	})
	t.Run("client trusting the CA gets SERVING from every service", func(t *testing.T) {
		wantServing(t, p, credentials.NewTLS(trusting))
	})

	serve("/good/report.txt", goodFile)
	bid := p.submit(t, shared.deposits.URL+"/good/report.txt", v1.PayloadType_PAYLOAD_TYPE_FILE)
	if b := p.waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed); b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Fatalf("batch %s through TLS and ACLs: %s %q", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
	jobs := p.jobs(t, bid)
	if len(jobs) != 1 {
		t.Fatalf("batch %s has %d jobs", bid, len(jobs))
	}
	p.checkStored(t, jobs[0])
	jid := jobs[0].GetId()

	for _, auth := range []string{"", "ingestq:wrong-password"} {
		t.Run(fmt.Sprintf("client with credentials %q", auth), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			other, err := session.Connect(ctx, session.Options{Servers: p.stack.Servers, Root: p.stack.Root, Auth: auth, SessionTimeout: 4 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			checkReadOnly(t, ctx, other, p, bid, jid, auth)
		})
	}
}

// checkReadOnly checks, with a queue client other that lacks the stack's
// ZooKeeper credentials, that the queue reads but does not change.
func checkReadOnly(t *testing.T, ctx context.Context, other *session.Session, p *pipeline, bid, jid, auth string) {
	t.Helper()
	operator := admin.New(other)
	if b, err := batches.New(other).GetBatch(ctx, bid); err != nil || b.GetStatus().GetStatus() != queue.BatchCompleted {
		t.Errorf("reading batch %s: %v, %v", bid, b.GetStatus(), err)
	}
	if j, err := jobs.NewReader(other).GetJob(ctx, jid); err != nil || j.GetStatus().GetStatus() != queue.Completed {
		t.Errorf("reading job %s: %v, %v", jid, j.GetStatus(), err)
	}
	if batches, _, err := operator.Batches.List(ctx, admin.BatchFilter{}); err != nil || len(batches) != 1 {
		t.Errorf("listing batches: %d, %v", len(batches), err)
	}
	if jobs, _, err := jobs.NewReader(other).ListJobs(ctx, jobs.JobFilter{State: queue.Completed}); err != nil || len(jobs) != 1 {
		t.Errorf("listing completed jobs: %d, %v", len(jobs), err)
	}
	if rep, err := operator.Queue.Fsck(ctx, admin.FsckOptions{}); err != nil || !rep.Clean() {
		t.Errorf("fsck (read only): %v, %v", rep, err)
	}
	before, err := jobs.NewReader(p.q).GetJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}

	writes := []struct {
		name  string
		write func() error
	}{
		{"claim a job", func() error { _, err := jobs.New(other).ClaimJob(ctx, jid); return err }},
		{"fail a job", func() error { _, err := operator.Jobs.Fail(ctx, jid, "by someone without credentials"); return err }},
		{"create a batch", func() error {
			_, err := batches.New(other).CreateBatch(ctx, &v1.Submission{ProfileName: demoProfile, Submitter: "intruder",
				PayloadUrl: shared.deposits.URL + "/good/report.txt", Type: v1.PayloadType_PAYLOAD_TYPE_FILE})
			return err
		}},
		{"delete a batch", func() error { _, err := operator.Batches.Delete(ctx, bid); return err }},
		{"pause the queue", func() error { return operator.Queue.Pause(ctx) }},
		{"hold a collection", func() error { return operator.Queue.HoldCollection(ctx, "demo") }},
	}
	for _, w := range writes {
		if err := w.write(); !errors.Is(err, queue.ErrDenied) {
			t.Errorf("%s: %v; want %v", w.name, err, queue.ErrDenied)
		}
	}
	// The same refusal for a careless peer writing ZooKeeper directly.
	raw := rawZooKeeper(t, p.stack.Servers, auth)
	statusNode := p.stack.Root + "/jobs/" + jid + "/status"
	if _, err := raw.Set(statusNode, []byte(`{"status":"Pending"}`), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("raw write of %s: %v; want %v", statusNode, err, zk.ErrNoAuth)
	}
	priorityNode := p.stack.Root + "/jobs/" + jid + "/priority"
	if err := raw.Delete(priorityNode, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("raw delete of %s: %v; want %v", priorityNode, err, zk.ErrNoAuth)
	}

	after, err := jobs.NewReader(p.q).GetJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetLocked() || after.GetStatus().GetStatus() != queue.Completed || !after.GetStatus().GetLastModified().AsTime().Equal(before.GetStatus().GetLastModified().AsTime()) {
		t.Errorf("job %s changed by refused writes: %v → %v (locked %v)", jid, before.GetStatus(), after.GetStatus(), after.GetLocked())
	}
	if paused, err := jobs.New(p.q).Paused(ctx); err != nil || paused {
		t.Errorf("queue paused: %v, %v", paused, err)
	}
	if held, err := admin.New(p.q).Queue.HeldCollections(ctx); err != nil || slices.Contains(held, "demo") {
		t.Errorf("held collections %v, %v", held, err)
	}
	if batches, _, err := admin.New(p.q).Batches.List(ctx, admin.BatchFilter{}); err != nil || len(batches) != 1 {
		t.Errorf("batches after refused writes: %d, %v", len(batches), err)
	}
}

// rawZooKeeper is a plain go-zookeeper session, as another writer would
// open, closed when the test ends; auth "" adds no credentials.
func rawZooKeeper(t *testing.T, servers []string, auth string) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect(servers, 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	timeout := time.After(30 * time.Second)
	for connected := false; !connected; {
		select {
		case ev := <-events:
			connected = ev.State == zk.StateHasSession
		case <-timeout:
			t.Fatalf("no ZooKeeper session with %v", servers)
		}
	}
	if auth != "" {
		if err := conn.AddAuth("digest", []byte(auth)); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// TestMutualTLSRefusesClientsWithoutACertificateOfTheClientCA runs a stack
// that demands client certificates: on every port, a client with none, or
// with one signed by another CA, is refused; one signed by the client CA
// gets SERVING.
func TestMutualTLSRefusesClientsWithoutACertificateOfTheClientCA(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "ingestq test CA")
	clientCA := newTestCA(t, "ingestq test client CA")
	cert, key := ca.serverFiles(t, dir)
	admitted := &tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{clientCA.clientCert(t, "operator")}, MinVersion: tls.VersionTLS12}
	p := startTestPipeline(t, "mutual-tls", pipelineOptions{
		env: map[string]string{"INGESTQ_TLS_CERT": cert, "INGESTQ_TLS_KEY": key,
			"INGESTQ_TLS_CLIENT_CA": clientCA.writeCA(t, dir)},
		clientTLS: admitted,
	})

	t.Run("client without a certificate refused on every port", func(t *testing.T) {
		wantRefused(t, p, credentials.NewTLS(&tls.Config{RootCAs: ca.pool()}))
	})
	t.Run("client with a certificate of another CA refused on every port", func(t *testing.T) {
		stranger := newTestCA(t, "stranger CA").clientCert(t, "stranger")
		// Presented whatever CAs the server asks for (a client picking from
		// Certificates would send none).
		present := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }
		wantRefused(t, p, credentials.NewTLS(&tls.Config{RootCAs: ca.pool(), GetClientCertificate: present}))
	})
	t.Run("plaintext client refused on every port", func(t *testing.T) {
		wantRefused(t, p, insecure.NewCredentials())
	})
	t.Run("client with a certificate of the client CA gets SERVING from every service", func(t *testing.T) {
		wantServing(t, p, credentials.NewTLS(admitted))
	})
}
