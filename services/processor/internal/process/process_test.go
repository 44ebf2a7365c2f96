package process

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const shoulder = "ark:/99999/fk4"

// files are a processor's work root, store root and profiles.
type files struct {
	workRoot  string
	storeRoot string
	profiles  *profile.Set
}

// newFiles makes a work root and the profile demo; storeRoot "" makes a
// fresh store root.
func newFiles(t *testing.T, storeRoot string) files {
	t.Helper()
	f := files{workRoot: t.TempDir(), storeRoot: storeRoot}
	if f.storeRoot == "" {
		f.storeRoot = t.TempDir()
	}
	profiles := t.TempDir()
	err := os.WriteFile(filepath.Join(profiles, "demo.yaml"), []byte("name: demo\ncollection: demo_coll\nowner: ark:/99999/j2owner\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if f.profiles, err = profile.Load(profiles); err != nil {
		t.Fatal(err)
	}
	return f
}

// env is a queue, a work root, a store root and a running processor.
type env struct {
	files
	q       *session.Session
	zkRoot  string
	storing bool                     // the storing step runs
	minter  mint.Minter              // nil: mint.Local
	storage store.Storage            // nil: store.Local at storeRoot (store.Merritt with merritt)
	merritt *Merritt                 // nil: versions go to storage alone
	retry   StoreRetry               // the zero value: a store's failure fails the job at once
	runners map[string]*stage.Runner // by stage name
}

// start runs the processor's stages, processing and storing; storeRoot ""
// makes a fresh one.
func start(t *testing.T, storeRoot string) *env { return startWith(t, storeRoot, true) }

// startWith runs processing, and storing if storing is set.
func startWith(t *testing.T, storeRoot string, storing bool) *env {
	t.Helper()
	e := newEnv(t, storeRoot, storing)
	e.runners = e.run(t, e.q, storing)
	return e
}

// newEnv is startWith without the processor running.
func newEnv(t *testing.T, storeRoot string, storing bool) *env {
	t.Helper()
	e := &env{files: newFiles(t, storeRoot), zkRoot: zktest.Root(t), storing: storing}
	e.q = queuetest.Connect(t, e.zkRoot)
	return e
}

// run starts a processor replica's stages on q, chained as stage.Start
// chains them, and returns its runners by stage name.
func (e *env) run(t *testing.T, q *session.Session, storing bool) map[string]*stage.Runner {
	t.Helper()
	var m mint.Minter = mint.Local{Shoulder: shoulder}
	if e.minter != nil {
		m = e.minter
	}
	var st store.Storage = store.Local{Root: e.storeRoot}
	if e.merritt != nil {
		st = store.Merritt{Client: e.merritt.Storage, Serving: e.merritt.Serving}
	}
	if e.storage != nil {
		st = e.storage
	}
	jc := jobs.New(q)
	p := &Processor{Queue: jc, Minter: m, Storage: st, Merritt: e.merritt,
		Profiles: e.profiles, WorkRoot: e.workRoot, LockRetry: 100e6, StoreRetry: e.retry}
	runners := map[string]*stage.Runner{}
	var prev *stage.Runner
	for _, cfg := range p.StageConfigs(storing) {
		cfg.Service, cfg.Concurrency = "processor", 2
		r, err := stage.New(jc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil {
			if err := prev.Chain(r); err != nil {
				t.Fatal(err)
			}
		}
		prev, runners[cfg.Name] = r, r
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, r := range runners {
		go r.Run(ctx)
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range runners {
			<-r.Done()
		}
	})
	return runners
}

// object is a job to put in Processing: its downloaded files and what its
// manifest declares about them.
type object struct {
	files    map[string]string
	declared []*v1.ManifestFile // nil: every file declared with its md5 and size
	ids      *v1.Identifiers
	md       *v1.Metadata
	mode     v1.SubmissionMode
}

func md5hex(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }
func sha(s string) string    { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// newJob writes the object's producer files into a fresh working folder
// (<work root>/<batch>/<job>, as the work root lays them out) and returns
// its job.
func (f files) newJob(t *testing.T, o object) (job batches.NewJob, wd string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(f.workRoot, "batch"), 0o755); err != nil {
		t.Fatal(err)
	}
	wd, err := os.MkdirTemp(filepath.Join(f.workRoot, "batch"), "job")
	if err != nil {
		t.Fatal(err)
	}
	declared := o.declared
	for name, content := range o.files {
		p := filepath.Join(wd, "producer", filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if o.declared == nil {
			declared = append(declared, &v1.ManifestFile{Name: name, HashAlgorithm: "md5", HashValue: md5hex(content), Size: int64(len(content)),
				Url: "http://127.0.0.1:1/" + name})
		}
	}
	return batches.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: "demo", Collection: "demo_coll", WorkingDir: wd,
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: o.mode},
		Identifiers: o.ids, Metadata: o.md, Manifest: &v1.Manifest{Files: declared},
	}, wd
}

// spawn writes the object's producer files into a fresh working folder and
// puts its job in Processing.
func (e *env) spawn(t *testing.T, o object) (jid, wd string) {
	t.Helper()
	job, wd := e.newJob(t, o)
	return queuetest.Spawn(t, e.q, job, queue.Processing), wd
}

// ended waits until the processor is done with the job (it left
// Processing, and Storing when the storing step runs) and returns it.
func (e *env) ended(t *testing.T, jid string) *v1.Job {
	t.Helper()
	var job *v1.Job
	queuetest.Eventually(t, jid+" leaves the processor", func() bool {
		var err error
		job, err = jobs.NewReader(e.q).GetJob(context.Background(), jid)
		st := job.GetStatus().GetStatus()
		return err == nil && st != queue.Processing && (st != queue.Storing || !e.storing) && !job.GetLocked()
	})
	return job
}

// versions lists the version folders of an object in the store.
func (f files) versions(t *testing.T, ark string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(f.storeRoot, queue.LockName(ark)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func readManifest(t *testing.T, raw string) []checkm.Entry {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "file" {
		t.Fatalf("manifest URL %q: %v", raw, err)
	}
	f, err := os.Open(u.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return m.Entries
}

func TestStoringWaitsForTheStorageLock(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	const ark = "ark:/99999/fk4busy"
	lock, err := jobs.New(e.q).LockStorage(ctx, ark) // as another job storing the object would

	if err != nil {
		t.Fatal(err)
	}
	jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{PrimaryId: ark}})
	queuetest.Eventually(t, "the storing step met the lock", func() bool {
		return e.runners["storing"].Status().GetOutcomes()["retried"] > 0
	})
	if st := queuetest.Status(t, e.q, jid); st.GetStatus() != queue.Storing {
		t.Fatalf("job is %s while its object is locked", queue.JobStateName(st.GetStatus()))
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if job := e.ended(t, jid); job.GetStatus().GetStatus() != queue.Recording {
		t.Errorf("after the lock went: %s %q", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
}

func TestNoARKIsMintedForALocalIDWhileMerrittsIngestHoldsItsLock(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	peer := merrittzk.Connect(t, zktest.Servers(t), e.zkRoot)
	// Merritt's ingest service locks "<local id>_<owner's ARK>" while it
	// looks the local id up or mints its ARK (the owner of profile demo).
	const lockName = "loc-busy_ark:/99999/j2owner"
	if ok, err := peer.Locks().LocalID(lockName); !ok || err != nil {
		t.Fatalf("peer lock: %v, %v", ok, err)
	}
	jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-busy"}}})
	queuetest.Eventually(t, "the processor met the local id lock (or went past it)", func() bool {
		return e.runners["processing"].Status().GetOutcomes()["retried"] > 0 || queuetest.Status(t, e.q, jid).GetStatus() != queue.Processing
	})
	job, err := jobs.NewReader(e.q).GetJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if job.GetStatus().GetStatus() != queue.Processing || job.GetIdentifiers().GetPrimaryId() != "" {
		t.Fatalf("while Merritt held the local id's lock the job went to %s with ARK %q",
			queue.JobStateName(job.GetStatus().GetStatus()), job.GetIdentifiers().GetPrimaryId())
	}
	if _, err := jobs.New(e.q).LookupLocalID(ctx, "ark:/99999/j2owner", "loc-busy"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the local id was bound meanwhile: %v", err)
	}
	if err := peer.Locks().UnlockLocalID(lockName); err != nil {
		t.Fatal(err)
	}
	job = e.ended(t, jid)
	if job.GetStatus().GetStatus() != queue.Recording || !strings.HasPrefix(job.GetIdentifiers().GetPrimaryId(), shoulder) {
		t.Fatalf("after the lock was released: %v", job)
	}
	// The processor took the same node while it minted, and let it go.
	if held, err := peer.Exists("/locks/localid/" + merrittzk.LockName(lockName)); err != nil || held {
		t.Errorf("local id lock left behind: %v, %v", held, err)
	}
	if ok, err := peer.Locks().LocalID(lockName); !ok || err != nil {
		t.Errorf("Merritt cannot take the lock after the processor: %v, %v", ok, err)
	}
}

// localIDLockRequests counts the requests q sent on local id locks, by
// operation ("multi.create" for one inside a multi).
func localIDLockRequests(q *session.Session) map[string]int64 {
	n := map[string]int64{}
	for _, r := range q.Requests() {
		if r.Node == "locks/localid/*" {
			n[r.Op] += r.Count
		}
	}
	return n
}

// TestTheLocalIDLocksGoWithTheJobsCommit: a job's local id locks are
// taken as Merritt's ingest service names them and released by the job's
// commit, whether it moves the job on or fails it, in its request: no
// request of their own (a look at the owner and a delete each). A job
// without local ids takes none.
func TestTheLocalIDLocksGoWithTheJobsCommit(t *testing.T) {
	e := start(t, "")
	jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}})
	if job := e.ended(t, jid); job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job without local ids: %s %q", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	if n := localIDLockRequests(e.q); len(n) != 0 {
		t.Errorf("a job without local ids made requests on local id locks: %v", n)
	}
	jid, _ = e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-a", "loc-b"}}})
	if job := e.ended(t, jid); job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job with local ids: %s %q", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	// loc-a, loc-b, and both together as "loc-a;loc-b".
	n := localIDLockRequests(e.q)
	if n["multi.create"] != 3 || n["multi.delete"] != 3 || n["exists"] != 0 || n["delete"] != 0 {
		t.Errorf("requests on local id locks %v; want 3 creates and 3 deletes inside multis, nothing alone", n)
	}
	// A job that fails once its ARK is settled (a digest differs) has its
	// lock released by the commit that fails it.
	jid, _ = e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}, ids: &v1.Identifiers{LocalId: []string{"loc-c"}},
		declared: []*v1.ManifestFile{{Name: "a.txt", HashAlgorithm: "sha256", HashValue: sha("ALPHA"), Size: -1}}})
	if job := e.ended(t, jid); job.GetStatus().GetStatus() != queue.Failed {
		t.Fatalf("job with a wrong digest: %s %q", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	if n := localIDLockRequests(e.q); n["multi.create"] != 4 || n["multi.delete"] != 4 || n["exists"] != 0 || n["delete"] != 0 {
		t.Errorf("requests on local id locks %v; want 4 creates and 4 deletes inside multis, nothing alone", n)
	}
	peer := merrittzk.Connect(t, zktest.Servers(t), e.zkRoot)
	for _, name := range []string{"loc-a", "loc-b", "loc-a;loc-b", "loc-c"} {
		lock := "/locks/localid/" + merrittzk.LockName(name+"_ark:/99999/j2owner")
		if held, err := peer.Exists(lock); err != nil || held {
			t.Errorf("%s left behind: %v, %v", lock, held, err)
		}
	}
}
