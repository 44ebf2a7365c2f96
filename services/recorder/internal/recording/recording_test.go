package recording

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/services/recorder/internal/versions"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const token = "recording-test-token"

// serve runs RecordingService over a lease manager on q, on a loopback
// port of the shared gRPC server (admin token, validation), and returns a
// client.
func serve(t *testing.T, q *session.Session, opts lease.Options) v1.RecordingServiceClient {
	t.Helper()
	return serveWith(t, q, opts, nil)
}

// serveWith serves RecordingService describing versions from store.
func serveWith(t *testing.T, q *session.Session, opts lease.Options, store *versions.Store) v1.RecordingServiceClient {
	t.Helper()
	srv, err := server.New(server.Options{AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	m, err := lease.New(jobs.New(q), opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); m.Run(runCtx) }()
	v1.RegisterRecordingServiceServer(srv, Server{Leases: m, Versions: store})
	conn := servicetest.Serve(t, srv)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Drain(ctx) // ends waiting Lease calls before the server stops
		stop()
		<-ran
	})
	return v1.NewRecordingServiceClient(conn)
}

// authed is a call context carrying the admin token.
func authed() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// recordingJob puts a job in Recording as the storing step leaves it.
func recordingJob(t *testing.T, q *session.Session, ark string) string {
	t.Helper()
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: ark, LocalId: []string{"loc001"}}}, queue.Storing)
	const manifest = "file:///store/ark_99999_fk4x/v3/manifest.checkm"
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording,
		Store:     &v1.Store{ManifestUrl: manifest, Mode: "update"},
		Inventory: &v1.Inventory{ManifestUrl: manifest, Mode: "update"}})
	return jid
}

func leaseFor(t *testing.T, c v1.RecordingServiceClient, wait, d time.Duration) *v1.LeaseResponse {
	t.Helper()
	resp, err := c.Lease(authed(), &v1.LeaseRequest{Wait: durationpb.New(wait), LeaseDuration: durationpb.New(d)})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func locks(t *testing.T, q *session.Session) []string {
	t.Helper()
	_, inv, err := admin.New(q).Queue.ObjectLocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestLeaseRenewCompleteMovesTheJobToNotify(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	c := serve(t, q, lease.Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x")

	asked := time.Now()
	l := leaseFor(t, c, 10*time.Second, 30*time.Second)
	answered := time.Now()
	if l.GetLeaseId() == "" || len(l.GetLeaseId()) != 32 || l.GetJobId() != jid || l.GetArk() != "ark:/99999/fk4x" || l.GetMode() != "update" ||
		l.GetManifestUrl() != "file:///store/ark_99999_fk4x/v3/manifest.checkm" || len(l.GetLocalIds()) != 1 || l.GetBatchId() == "" {
		t.Fatalf("lease %v", l)
	}
	// 30 s from when the lease was granted, between the call and its
	// answer, however long the call took on a busy machine.
	if exp := l.GetExpires().AsTime(); exp.Before(asked.Add(30*time.Second)) || exp.After(answered.Add(30*time.Second)) {
		t.Errorf("lease expires at %s, want 30s after it was granted, between %s and %s", exp, asked, answered)
	}
	if got := locks(t, q); len(got) != 1 || got[0] != "ark_99999_fk4x" {
		t.Errorf("inventory locks %v, want the object's", got)
	}
	if job, _ := jobs.NewReader(q).GetJob(context.Background(), jid); !job.GetLocked() {
		t.Error("the leased job is not locked")
	}
	renewing := time.Now()
	renewed, err := c.Renew(authed(), &v1.RenewRequest{LeaseId: l.GetLeaseId(), LeaseDuration: durationpb.New(time.Hour)})
	if err != nil || renewed.GetExpires().AsTime().Before(renewing.Add(time.Hour)) {
		t.Fatalf("Renew = %v, %v; want an hour", renewed, err)
	}
	done, err := c.Complete(authed(), &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
	if err != nil {
		t.Fatal(err)
	}
	// The answer says the state it produced.
	if done.GetLeaseId() != l.GetLeaseId() || done.GetState() != queue.Notify {
		t.Errorf("Complete answers %v, want the lease and JOB_STATE_NOTIFY", done)
	}
	st := queuetest.Status(t, q, jid)
	if st.GetStatus() != queue.Notify || !strings.Contains(st.GetMessage(), "recorded ark:/99999/fk4x") {
		t.Errorf("job %s %q, want Notify", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if got := locks(t, q); len(got) != 0 {
		t.Errorf("inventory locks left: %v", got)
	}
	_, err = c.Complete(authed(), &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "completed") {
		t.Errorf("second Complete: %v, want FailedPrecondition saying it was completed", err)
	}
}

func TestAnExpiredLeaseGoesToTheNextCallerAndIsRefused(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	first := serve(t, q, lease.Options{})
	second := serve(t, queuetest.Connect(t, root), lease.Options{}) // another recorder replica
	jid := recordingJob(t, q, "ark:/99999/fk4x")

	a := leaseFor(t, first, 5*time.Second, time.Second)
	if a.GetJobId() != jid {
		t.Fatalf("first lease %v", a)
	}
	// The second client waits; it gets the job once the first lease expires.
	b := leaseFor(t, second, 20*time.Second, 30*time.Second)
	if b.GetJobId() != jid || b.GetLeaseId() == a.GetLeaseId() {
		t.Fatalf("competing lease %v, want %s under a new id", b, jid)
	}
	for name, call := range map[string]func() error{
		"Complete": func() error {
			_, err := first.Complete(authed(), &v1.CompleteRequest{LeaseId: a.GetLeaseId()})
			return err
		},
		"Renew": func() error { _, err := first.Renew(authed(), &v1.RenewRequest{LeaseId: a.GetLeaseId()}); return err },
		"Fail": func() error {
			_, err := first.Fail(authed(), &v1.FailRequest{LeaseId: a.GetLeaseId(), Message: "late"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "expired at") {
			t.Errorf("%s on the expired lease: %v, want FailedPrecondition saying it expired", name, err)
		}
	}
	if _, err := second.Complete(authed(), &v1.CompleteRequest{LeaseId: b.GetLeaseId()}); err != nil {
		t.Fatal(err)
	}
	if st := queuetest.Status(t, q, jid); st.GetStatus() != queue.Notify {
		t.Errorf("job %s, want Notify", queue.JobStateName(st.GetStatus()))
	}
}

func TestFailMovesTheJobToFailedWithTheMessage(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	c := serve(t, q, lease.Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x")
	l := leaseFor(t, c, 10*time.Second, time.Minute)
	const msg = "INV database: duplicate key on inv_versions (ark:/99999/fk4x, 3)"
	failed, err := c.Fail(authed(), &v1.FailRequest{LeaseId: l.GetLeaseId(), Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	if failed.GetLeaseId() != l.GetLeaseId() || failed.GetState() != queue.Failed {
		t.Errorf("Fail answers %v, want the lease and JOB_STATE_FAILED", failed)
	}
	st := queuetest.Status(t, q, jid)
	if st.GetStatus() != queue.Failed || st.GetMessage() != msg || st.GetLastSuccessfulStatus() != queue.Storing {
		t.Errorf("job %v, want Failed with %q (last successful Storing)", st, msg)
	}
	if got := locks(t, q); len(got) != 0 {
		t.Errorf("inventory locks left: %v", got)
	}
}

func TestRequestsAreCheckedBeforeAnyWork(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	c := serve(t, q, lease.Options{})
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		want string
	}{
		{"no token", func() error {
			_, err := c.Lease(context.Background(), &v1.LeaseRequest{})
			return err
		}, codes.Unauthenticated, ""},
		{"unknown lease", func() error {
			_, err := c.Complete(authed(), &v1.CompleteRequest{LeaseId: "0123456789abcdef0123456789abcdef"})
			return err
		}, codes.NotFound, "unknown lease"},
		{"fail without a message", func() error {
			_, err := c.Fail(authed(), &v1.FailRequest{LeaseId: "x"})
			return err
		}, codes.InvalidArgument, "message is required"},
		{"lease too long", func() error {
			_, err := c.Lease(authed(), &v1.LeaseRequest{LeaseDuration: durationpb.New(2 * time.Hour)})
			return err
		}, codes.InvalidArgument, "lease_duration 2h0m0s is outside 1s..1h0m0s"},
		{"negative wait", func() error {
			_, err := c.Lease(authed(), &v1.LeaseRequest{Wait: durationpb.New(-time.Second)})
			return err
		}, codes.InvalidArgument, "wait -1s is outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %s %q", err, tc.code, tc.want)
			}
		})
	}
}

func TestLeaseWithNoJobAnswersEmptyAfterTheWait(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	c := serve(t, q, lease.Options{})
	if l := leaseFor(t, c, 300*time.Millisecond, time.Minute); l.GetLeaseId() != "" {
		t.Errorf("lease %v from an empty queue", l)
	}
	if l := leaseFor(t, c, 0, time.Minute); l.GetLeaseId() != "" {
		t.Errorf("lease %v from an empty queue without waiting", l)
	}
}

func TestAJobWhoseObjectIsBeingRecordedElsewhereWaits(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	c := serve(t, q, lease.Options{LockRetry: 100 * time.Millisecond})
	jid := recordingJob(t, q, "ark:/99999/fk4x")
	// A Merritt Inventory working on the same tree records the object now.
	lock, err := jobs.New(q).LockInventory(context.Background(), "ark:/99999/fk4x")
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseFor(t, c, 500*time.Millisecond, time.Minute); l.GetLeaseId() != "" {
		t.Fatalf("leased %v while its object's inventory lock was held", l)
	}
	if job, _ := jobs.NewReader(q).GetJob(context.Background(), jid); job.GetLocked() || job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job left locked=%v in %s", job.GetLocked(), queue.JobStateName(job.GetStatus().GetStatus()))
	}
	lock.Unlock(context.Background())
	if l := leaseFor(t, c, 10*time.Second, time.Minute); l.GetJobId() != jid {
		t.Errorf("after the lock went: %v", l)
	}
}

func TestALeaseEndsWithItsZooKeeperSession(t *testing.T) {
	root := zktest.Root(t)
	cut, proxy := queuetest.ConnectThroughProxy(t, root, 2*time.Second)
	q := queuetest.Connect(t, root)
	c := serve(t, cut, lease.Options{})
	other := serve(t, q, lease.Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x")
	l := leaseFor(t, c, 10*time.Second, time.Hour)
	proxy.Block() // the recorder loses ZooKeeper; its session expires
	queuetest.Eventually(t, "the job is free again", func() bool {
		job, err := jobs.NewReader(q).GetJob(context.Background(), jid)
		return err == nil && !job.GetLocked()
	})
	queuetest.Eventually(t, "the lease is refused", func() bool {
		_, err := c.Complete(authed(), &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
		return status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "lock was lost")
	})
	if l2 := leaseFor(t, other, 10*time.Second, time.Minute); l2.GetJobId() != jid {
		t.Errorf("another recorder got %v", l2)
	}
}

// TestACommitFencedByAPeerAnswersAborted: while a job is leased, a writer
// that ignores locks (a peer's admin failing the job) changes its status.
// Complete's commit is refused by the queue as fenced, and the recorder
// answers as every service answers a fenced change: Aborted.
func TestACommitFencedByAPeerAnswersAborted(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	c := serve(t, q, lease.Options{})
	jid := recordingJob(t, q, "ark:/99999/fk4x")
	l := leaseFor(t, c, 10*time.Second, time.Hour)
	if l.GetJobId() != jid {
		t.Fatalf("lease %v, want job %s", l, jid)
	}
	failed := `{"status":"Failed","last_modified":"2026-11-22 03:51:07 +0000","message":"failed by an administrator","last_successful_status":"Storing","retry_count":0}`
	zktest.WriteNode(t, zktest.RawConn(t), root+"/jobs/"+jid+"/status", failed)
	_, err := c.Complete(authed(), &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "lock was lost") {
		t.Errorf("Complete after the peer's write: %v, want Aborted saying the lock was lost", err)
	}
}

func TestALeaseSaysWhatAnInventoryRecordsAndWhereAnotherHostFetchesTheVersion(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	root := t.TempDir()
	vdir := filepath.Join(root, "ark_99999_fk4x", "v3")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, checkm.ProfileObject, []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"},
		[]checkm.Entry{{FileURL: checkm.FileURL(vdir + "/producer/a"), HashAlgorithm: "sha256", HashValue: strings.Repeat("0", 64), FileSize: 300, FileName: "producer/a"},
			{FileURL: checkm.FileURL(vdir + "/system/b"), HashAlgorithm: "sha256", HashValue: strings.Repeat("0", 64), FileSize: 45, FileName: "system/b"}}); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(vdir, "manifest.checkm")
	if err := os.WriteFile(manifest, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	c := serveWith(t, q, lease.Options{}, &versions.Store{Root: root, PublicURL: "http://127.0.0.1:7416"})
	erc := &v1.Metadata{Who: "Doe, Jane", What: "Hello", When: "2026", Where: "ark:/99999/fk4x"}
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x"},
		Configuration: &v1.JobConfiguration{ProfileName: "demo_profile", Collection: "demo"}, Metadata: erc}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: checkm.FileURL(manifest), Mode: "add", Version: 3}})
	resp := leaseFor(t, c, 10*time.Second, time.Minute)
	if resp.GetJobId() != jid {
		t.Fatalf("leased %q, want %s", resp.GetJobId(), jid)
	}
	if resp.GetVersion() != 3 || resp.GetCollection() != "demo" || resp.GetProfile() != "demo_profile" || !proto.Equal(resp.GetErc(), erc) ||
		resp.GetTotalSize() != 345 || resp.GetFileCount() != 2 ||
		resp.GetFetchUrl() != "http://127.0.0.1:7416/versions/ark_99999_fk4x/v3/manifest.checkm" || resp.GetFetchExpires() != nil {
		t.Errorf("lease %v", resp)
	}
}
