// Package console tests the operator console (services/console) as an
// operator meets it: over HTTP and in a headless Chromium, against the
// batcher's AdminService served over gRPC on loopback on a real ZooKeeper.
// The queue's states are set up with the queue library, as the stages
// would leave them; the batcher's batch runner does not run, so that no
// batch moves but as a test moves it.
package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/adminservice"
	"github.com/ingestq/ingestq/services/console/web"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/server"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// signInCookie is the console's sign-in cookie.
const signInCookie = "ingestq_console_session"

// workerURL is the address of a worker's controls.
func workerURL(id string) string { return "/workers/" + url.PathEscape(id) }

const testToken = "console-test-token"

const demoProfile = `name: demo
collection: demo_coll
owner: ark:/99999/fk4owner
notification_addresses: [depositor@example.org]
priority: 5
notify_on_queue: false
storage_target: local
`

// fixture is a console on a loopback port, calling the batcher's
// AdminService (adminservice.Server) over gRPC on another, on a private root of
// the test ZooKeeper.
type fixture struct {
	t       *testing.T
	zkRoot  string // the queue's root in the test ZooKeeper
	q       *session.Session
	root    workdir.Root
	admin   *adminservice.Server
	batcher string // the AdminService's address
	con     *web.Console
	srv     *httptest.Server
	client  *http.Client // keeps cookies, does not follow redirects
	ctx     context.Context
}

// newFixture starts a console; token "" makes it read-only.
func newFixture(t *testing.T, token string) *fixture {
	t.Helper()
	return newFixtureAt(t, token, zktest.Root(t))
}

// newFixtureAt starts a console on the queue under root, with a batcher
// (and ZooKeeper connection) of its own: another replica of both.
func newFixtureAt(t *testing.T, token, root string) *fixture {
	t.Helper()
	return newFixtureKeyed(t, token, root, nil)
}

// newFixtureKeyed is newFixtureAt with a sign-in key (nil: a random one).
func newFixtureKeyed(t *testing.T, token, root string, key []byte) *fixture {
	t.Helper()
	return newFixtureOpts(t, token, root, web.Options{SignInKey: key})
}

// newFixtureWith is newFixture with stage credentials: the workers
// table's controls on.
func newFixtureWith(t *testing.T, token string, creds credentials.TransportCredentials) *fixture {
	t.Helper()
	return newFixtureOpts(t, token, zktest.Root(t), web.Options{StageCredentials: creds})
}

// newFixtureOpts starts a batcher's AdminService guarded by token and a
// console with opts (their batcher, token and logger set here).
func newFixtureOpts(t *testing.T, token, root string, opts web.Options) *fixture {
	t.Helper()
	f := &fixture{t: t, zkRoot: root, ctx: context.Background()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	f.q, err = session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: root, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.q.Close)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "demo.yaml"), []byte(demoProfile), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.root, err = workdir.Open(filepath.Join(t.TempDir(), "work")); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	f.admin = &adminservice.Server{Session: f.q, Profiles: profiles, Root: f.root, Logger: log,
		TraceURL: "https://tracing.example/trace/{trace_id}"}
	f.batcher = serveAdmin(t, f.admin, token)
	opts.Batcher, opts.Token, opts.Logger = f.batcher, token, log
	if f.con, err = web.New(opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.con.Close() })
	f.srv = httptest.NewServer(f.con)
	t.Cleanup(f.srv.Close)
	f.client = newClient(t)
	return f
}

// serveAdmin serves a as AdminService, guarded by token, on a loopback
// port until the test ends, as the batcher's gRPC server does; it returns
// the address.
func serveAdmin(t *testing.T, a *adminservice.Server, token string) string {
	t.Helper()
	srv, err := server.New(server.Options{Logger: slog.New(slog.DiscardHandler), AdminToken: token})
	if err != nil {
		t.Fatal(err)
	}
	v1.RegisterAdminServiceServer(srv, a)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetServing(true)
	go srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return lis.Addr().String()
}

func newClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// answer is a response with its body read.
type answer struct {
	code   int
	header http.Header
	body   string
}

func (f *fixture) do(req *http.Request) answer {
	f.t.Helper()
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: string(body)}
}

func (f *fixture) get(path string) answer {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.do(req)
}

func (f *fixture) post(path string, form url.Values) answer {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return f.do(req)
}

// signIn signs the fixture's client in with the token.
func (f *fixture) signIn() {
	f.t.Helper()
	a := f.post("/signin", url.Values{"token": {testToken}, "return": {"/"}})
	if a.code != http.StatusSeeOther {
		f.t.Fatalf("sign-in: %d %s", a.code, a.body)
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the CSRF token the console puts in its forms.
func (f *fixture) csrf() string {
	f.t.Helper()
	a := f.get("/fsck")
	m := csrfField.FindStringSubmatch(a.body)
	if m == nil {
		f.t.Fatalf("no CSRF token on /fsck (%d):\n%s", a.code, a.body)
	}
	return m[1]
}

// act posts an action form with the sign-in's CSRF token.
func (f *fixture) act(path string, form url.Values) answer {
	f.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", f.csrf())
	return f.post(path, form)
}

// batch creates a Processing batch of n pending jobs, each with a file list
// and a working directory; it returns the bid and the jids.
func (f *fixture) batch(submitter string, n int) (string, []string) {
	f.t.Helper()
	return f.batchOf(&v1.Submission{ProfileName: "demo", Submitter: submitter, PayloadUrl: "http://127.0.0.1/batch.checkm",
		Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, Collection: "demo_coll",
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, n, "")
}

// batchOf creates a Processing batch of sub with n pending jobs whose
// metadata "what" is what.
func (f *fixture) batchOf(sub *v1.Submission, n int, what string) (string, []string) {
	f.t.Helper()
	bid, err := batches.New(f.q).CreateBatch(f.ctx, sub)
	if err != nil {
		f.t.Fatal(err)
	}
	bc, err := batches.New(f.q).ClaimBatch(f.ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(f.ctx, batches.BatchChange{To: queue.BatchProcessing, KeepLock: true}); err != nil {
		f.t.Fatal(err)
	}
	jobs := make([]batches.NewJob, n)
	for i := range jobs {
		jobs[i] = batches.NewJob{Priority: 5, WorkRoot: f.root.Dir(),
			Configuration: &v1.JobConfiguration{ProfileName: sub.GetProfileName(), Collection: sub.GetCollection(),
				Submitter: sub.GetSubmitter(), PayloadUrl: fmt.Sprintf("http://127.0.0.1/%d.checkm", i),
				PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, BatchEntry: int32(i), Traceparent: sub.GetTraceparent()},
			Identifiers: &v1.Identifiers{LocalId: []string{fmt.Sprintf("loc-%d", i)}},
			Metadata:    &v1.Metadata{What: what},
			Manifest: &v1.Manifest{Files: []*v1.ManifestFile{{Url: "http://127.0.0.1/a.txt", Size: 1234567, Name: "a.txt",
				HashAlgorithm: "md5", HashValue: "0cc175b9c0f1b6a831c399e269772661"}}}}
	}
	jids, err := bc.CreateJobs(f.ctx, jobs)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, jid := range jids {
		if err := os.MkdirAll(filepath.Join(f.root.Job(bid, jid), "producer"), 0o750); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := bc.FinishSpawning(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	return bid, jids
}

// move takes a job through the given states, one claim per step, the last
// with message.
func (f *fixture) move(jid, message string, states ...queue.JobState) {
	f.t.Helper()
	for i, to := range states {
		cl, err := jobs.New(f.q).ClaimJob(f.ctx, jid)
		if err != nil {
			f.t.Fatal(err)
		}
		ch := queuetest.WithProducts(jobs.Change{To: to})
		if i == len(states)-1 {
			ch.Message = message
		}
		if err := cl.Commit(f.ctx, ch); err != nil {
			f.t.Fatalf("%s → %s: %v", jid, queue.JobStateName(to), err)
		}
	}
}

// fail moves a pending job to Failed in Downloading: its last successful
// state is Provisioning, so a requeue resumes it at Downloading.
func (f *fixture) fail(jid, message string) {
	f.t.Helper()
	f.move(jid, message, queue.Estimating, queue.Provisioning, queue.Downloading, queue.Failed)
}

// moveBatch takes a batch through the given states, one claim per step.
func (f *fixture) moveBatch(bid string, states ...queue.BatchState) {
	f.t.Helper()
	for _, to := range states {
		bc, err := batches.New(f.q).ClaimBatch(f.ctx, bid)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := bc.Commit(f.ctx, batches.BatchChange{To: to, Message: "batch is " + queue.BatchStateName(to)}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// failedBatch creates a batch of one failed job that reported Failed.
func (f *fixture) failedBatch() (string, string) {
	f.t.Helper()
	bid, jids := f.batch("jdoe", 1)
	f.fail(jids[0], "digest mismatch")
	f.moveBatch(bid, queue.BatchReporting, queue.BatchFailed)
	return bid, jids[0]
}

// heldBatch creates a batch a batcher held (no jobs).
func (f *fixture) heldBatch() string {
	f.t.Helper()
	bid, err := batches.New(f.q).CreateBatch(f.ctx, &v1.Submission{ProfileName: "demo", Submitter: "jdoe", PayloadUrl: "http://127.0.0.1/a.pdf",
		Type: v1.PayloadType_PAYLOAD_TYPE_FILE, Collection: "demo_coll"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.moveBatch(bid, queue.BatchHeld)
	return bid
}

func (f *fixture) job(jid string) *v1.Job {
	f.t.Helper()
	j, err := jobs.NewReader(f.q).GetJob(f.ctx, jid)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

func (f *fixture) jobState(jid string) string {
	f.t.Helper()
	return queue.JobStateName(f.job(jid).GetStatus().GetStatus())
}

func (f *fixture) batchState(bid string) string {
	f.t.Helper()
	b, err := batches.New(f.q).GetBatch(f.ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	return queue.BatchStateName(b.GetStatus().GetStatus())
}

// zkConn is a raw ZooKeeper connection, to damage the tree as a broken
// writer would.
func zkConn(t *testing.T) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(zktest.Servers(t), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// wantBody checks that a body has every part.
func wantBody(t *testing.T, a answer, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(a.body, p) {
			t.Errorf("answer %d lacks %q:\n%s", a.code, p, a.body)
			return
		}
	}
}

// wantNot checks that a body has none of the parts.
func wantNot(t *testing.T, a answer, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(a.body, p) {
			t.Errorf("answer %d has %q:\n%s", a.code, p, a.body)
			return
		}
	}
}

// reportedBatch makes a failed batch of one failed job whose report was
// mailed (its status carries the report's headline and figures), and
// returns its bid and the job's jid.
func (f *fixture) reportedBatch() (string, string) {
	f.t.Helper()
	bid, jid := f.failedBatch()
	f.moveBatch(bid, queue.BatchUpdateReporting)
	bc, err := batches.New(f.q).ClaimBatch(f.ctx, bid)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := bc.Commit(f.ctx, batches.BatchChange{To: queue.BatchFailed, Message: "1 job(s): 0 completed, 1 failed",
		Report: &v1.StatusReport{LastModified: timestamppb.Now(), FailedJobs: []string{jid}}}); err != nil {
		f.t.Fatal(err)
	}
	return bid, jid
}
