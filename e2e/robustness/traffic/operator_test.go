package traffic

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/adminservice"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const operatorToken = "operator-test-token"

// link is the operator's connection to the batcher. It can lose the
// answer to a call the batcher made (lose: the connection cut after the
// batcher committed, as a ZooKeeper leader's loss does), and answer
// Unavailable without reaching the batcher (down: a batcher with no
// ZooKeeper session).
type link struct {
	mu sync.Mutex
	// lose: how many more answers of a method (its full name) are lost.
	lose map[string]int
	down bool
	// downAfter: once a method (its full name) has been answered, the
	// batcher is down.
	downAfter string
}

func (l *link) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l.mu.Lock()
	down := l.down
	l.mu.Unlock()
	if down {
		return status.Error(codes.Unavailable, "the batcher has no ZooKeeper session")
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && method == l.downAfter {
		l.down = true
	}
	if l.lose[method] > 0 {
		l.lose[method]--
		return status.Errorf(codes.Unavailable, "the answer to %s was lost (the batcher had done it: %v)", method, err)
	}
	return err
}

// operatorFixture is the batcher's AdminService on a loopback port over
// a real ZooKeeper, and the robustness operator reaching it over link.
type operatorFixture struct {
	q     *session.Session
	tools admin.Tools
	link  *link
	admin v1.AdminServiceClient
	ctx   context.Context
}

func newOperatorFixture(t *testing.T) *operatorFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	q, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: zktest.Root(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, Profile+".yaml"), []byte(ProfileYAML("http://127.0.0.1:1/callback")), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := workdir.Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(server.Options{Logger: log, AdminToken: operatorToken})
	if err != nil {
		t.Fatal(err)
	}
	v1.RegisterAdminServiceServer(srv, &adminservice.Server{Session: q, Profiles: profiles, Root: root, Logger: log})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing(true)
	go srv.Serve(lis)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	})
	l := &link{lose: map[string]int{}}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(l.intercept))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &operatorFixture{q: q, tools: admin.New(q), link: l, admin: v1.NewAdminServiceClient(conn), ctx: adminCtx(ctx)}
}

func adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+operatorToken)
}

// operator is the robustness operator over f's link, the doomed batch
// bid (if any) submitted.
func (f *operatorFixture) operator(t *testing.T, bid string) *Traffic {
	tr := New(Clients{Admins: []v1.AdminServiceClient{f.admin}, AdminCtx: adminCtx},
		[]*Batch{{UUID: "doomed", Type: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, Doomed: true}}, "http://127.0.0.1:1", nil, "", 1, t.Logf)
	if bid != "" {
		tr.bids[0] = bid
	}
	return tr
}

// failedBatch is a batch failed without a job, as one whose payload is
// missing ends; the claim is kept when keep.
func (f *operatorFixture) failedBatch(t *testing.T, keep bool) (string, *batches.BatchClaim) {
	t.Helper()
	bid, bc := queuetest.ClaimedBatch(t, f.q, batches.BatchChange{To: queue.BatchProcessing, KeepLock: true})
	for _, ch := range []batches.BatchChange{{To: queue.BatchReporting, KeepLock: true}, {To: queue.BatchFailed, KeepLock: keep}} {
		if err := bc.Commit(f.ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	return bid, bc
}

func (f *operatorFixture) batchGone(t *testing.T, bid string) bool {
	t.Helper()
	_, err := batches.New(f.q).GetBatch(f.ctx, bid)
	return errors.Is(err, queue.ErrNotFound)
}

// A DeleteBatch commits the batch to Deleted, then removes its nodes; a
// connection cut between the two leaves it Deleted with its nodes, the
// caller answered Unavailable ("try again"). The operator tries again,
// which finishes the deletion, and the run sees the batch deleted.
func TestTheOperatorFinishesADeleteThatWasCutShort(t *testing.T) {
	f := newOperatorFixture(t)
	bid, bc := f.failedBatch(t, true)
	// What the cut-short delete left: the batch Deleted, its lock let go.
	if err := bc.Commit(f.ctx, batches.BatchChange{To: queue.BatchDeleted, Message: "deleted by an operator", KeepLock: true}); err != nil {
		t.Fatal(err)
	}
	if err := bc.Release(f.ctx); err != nil {
		t.Fatal(err)
	}
	tr := f.operator(t, bid)
	tr.deleteDoomed(f.ctx, f.admin)
	if !tr.Deleted(bid) {
		t.Errorf("the operator does not count batch %s, left Deleted by a delete cut short, as deleted", bid)
	}
	if !f.batchGone(t, bid) {
		t.Errorf("batch %s is still there: the operator did not finish its deletion", bid)
	}
}

// A DeleteBatch that went through whose answer was lost: the operator
// finds the batch gone and counts it deleted.
func TestTheOperatorCountsABatchGoneAfterADeleteWhoseAnswerWasLostAsDeleted(t *testing.T) {
	f := newOperatorFixture(t)
	bid, _ := f.failedBatch(t, false)
	f.link.lose[v1.AdminService_DeleteBatch_FullMethodName] = 1
	tr := f.operator(t, bid)
	tr.deleteDoomed(f.ctx, f.admin)
	if !f.batchGone(t, bid) {
		t.Fatalf("batch %s is still there: the lost answer's delete did not go through", bid)
	}
	if tr.Deleted(bid) {
		t.Fatalf("the operator counts batch %s deleted though it was answered %s", bid, codes.Unavailable)
	}
	tr.deleteDoomed(f.ctx, f.admin)
	if !tr.Deleted(bid) {
		t.Errorf("the operator does not count batch %s, gone after its delete, as deleted", bid)
	}
}

// A batch gone that the operator never tried to delete is not counted as
// its deletion: the run goes on waiting, and says for what.
func TestTheOperatorCountsOnlyItsOwnDeletes(t *testing.T) {
	f := newOperatorFixture(t)
	tr := f.operator(t, "bid9999999999")
	tr.deleteDoomed(f.ctx, f.admin)
	if tr.Deleted("bid9999999999") {
		t.Error("the operator counts a batch it never deleted as deleted")
	}
}

func (f *operatorFixture) held(t *testing.T) bool {
	t.Helper()
	held, err := f.tools.Queue.HeldCollections(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(held, Collection)
}

// A hold whose answer was lost stands: the operator releases the
// collection all the same.
func TestTheOperatorReleasesAHoldWhoseAnswerWasLost(t *testing.T) {
	f := newOperatorFixture(t)
	f.link.lose[v1.AdminService_HoldCollection_FullMethodName] = 1
	tr := f.operator(t, "")
	tr.holdCollection(f.ctx, f.admin)
	if f.held(t) {
		t.Errorf("collection %s is left held after a hold whose answer was lost", Collection)
	}
}

// The batcher loses its session right after the hold and refuses the
// release: the operator asks again at its next tick, and at its end.
func TestTheOperatorReleasesTheCollectionOnceTheBatcherAnswersAgain(t *testing.T) {
	for _, at := range []string{"next tick", "end"} {
		t.Run(at, func(t *testing.T) {
			f := newOperatorFixture(t)
			f.link.downAfter = v1.AdminService_HoldCollection_FullMethodName
			tr := f.operator(t, "")
			tr.holdCollection(f.ctx, f.admin)
			if !f.held(t) {
				t.Fatalf("collection %s not held while the batcher refused its release", Collection)
			}
			f.link.mu.Lock()
			f.link.down = false
			f.link.mu.Unlock()
			if at == "end" {
				stopped, stop := context.WithCancel(f.ctx)
				stop()
				tr.Operate(stopped)
			} else {
				tr.act(f.ctx, 1)
			}
			if f.held(t) {
				t.Errorf("collection %s still held once the batcher answered again", Collection)
			}
		})
	}
}
