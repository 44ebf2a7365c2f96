package process

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/services/processor/internal/sysfiles"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

const shoulder = "ark:/99999/fk4"

// env is a queue, a work root, a store root and a running processor.
type env struct {
	q         *queue.Client
	zkRoot    string
	workRoot  string
	storeRoot string
	profiles  *profile.Set
	storing   bool                     // the storing step runs
	minter    mint.Minter              // nil: mint.Local
	storage   store.Storage            // nil: store.Local at storeRoot
	runners   map[string]*stage.Runner // by stage name
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
	e := &env{zkRoot: zktest.Root(t), workRoot: t.TempDir(), storeRoot: storeRoot, storing: storing}
	e.q = queuetest.Connect(t, e.zkRoot)
	if e.storeRoot == "" {
		e.storeRoot = t.TempDir()
	}
	profiles := t.TempDir()
	err := os.WriteFile(filepath.Join(profiles, "demo.yaml"), []byte("name: demo\ncollection: demo_coll\nowner: ark:/99999/j2owner\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if e.profiles, err = profile.Load(profiles); err != nil {
		t.Fatal(err)
	}
	return e
}

// run starts a processor replica's stages on q, chained as stage.Start
// chains them, and returns its runners by stage name.
func (e *env) run(t *testing.T, q *queue.Client, storing bool) map[string]*stage.Runner {
	t.Helper()
	var m mint.Minter = mint.Local{Shoulder: shoulder}
	if e.minter != nil {
		m = e.minter
	}
	var st store.Storage = store.Local{Root: e.storeRoot}
	if e.storage != nil {
		st = e.storage
	}
	p := &Processor{Queue: q, Minter: m, Storage: st,
		Profiles: e.profiles, WorkRoot: e.workRoot, LockRetry: 100e6}
	runners := map[string]*stage.Runner{}
	var prev *stage.Runner
	for _, cfg := range p.StageConfigs(storing) {
		cfg.Service, cfg.Concurrency = "processor", 2
		r, err := stage.New(q, cfg)
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

// spawn writes the object's producer files into a fresh working folder and
// puts its job in Processing.
func (e *env) spawn(t *testing.T, o object) (jid, wd string) {
	t.Helper()
	wd, err := os.MkdirTemp(e.workRoot, "job")
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
	jid = queuetest.Spawn(t, e.q, queue.NewJob{
		Configuration: &v1.JobConfiguration{ProfileName: "demo", Collection: "demo_coll", WorkingDir: wd,
			PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, SubmissionMode: o.mode},
		Identifiers: o.ids, Metadata: o.md, Manifest: &v1.Manifest{Files: declared},
	}, queue.Processing)
	return jid, wd
}

// ended waits until the processor is done with the job (it left
// Processing, and Storing when the storing step runs) and returns it.
func (e *env) ended(t *testing.T, jid string) *v1.Job {
	t.Helper()
	var job *v1.Job
	queuetest.Eventually(t, jid+" leaves the processor", func() bool {
		var err error
		job, err = e.q.GetJob(context.Background(), jid)
		st := job.GetStatus().GetStatus()
		return err == nil && st != queue.Processing && (st != queue.Storing || !e.storing) && !job.GetLocked()
	})
	return job
}

// versions lists the version folders of an object in the store.
func (e *env) versions(t *testing.T, ark string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(e.storeRoot, queue.LockName(ark)))
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

func TestProcessingMintsBindsWritesSystemFilesAndStores(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	jid, wd := e.spawn(t, object{
		files: map[string]string{"a.txt": "alpha", "dir/b.txt": "beta"},
		ids:   &v1.Identifiers{LocalId: []string{"loc001"}},
		md:    &v1.Metadata{Who: "Doe, Jane", What: "Letters & <drafts>", When: "1901"},
	})
	job := e.ended(t, jid)
	if job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job is %s (%q), want Recording", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if ark != mint.NOIDName(shoulder, 1) {
		t.Errorf("ARK %q, want the first minted %s", ark, mint.NOIDName(shoulder, 1))
	}
	if bound, err := e.q.LookupLocalID(ctx, "ark:/99999/j2owner", "loc001"); err != nil || bound != ark {
		t.Errorf("loc001 of the profile's owner is bound to %q (%v), want %s", bound, err, ark)
	}
	// The store node names what was stored, the inventory node the version.
	storageURL := store.FileURL(filepath.Join(wd, StorageManifest))
	wantURL := store.FileURL(filepath.Join(e.storeRoot, queue.LockName(ark), "v1", store.VersionManifest))
	if s := job.GetStore(); s.GetManifestUrl() != storageURL || s.GetMode() != "add" || s.GetDelete() {
		t.Errorf("store %v; want the storage manifest %s in add mode", s, storageURL)
	}
	if inv := job.GetInventory(); inv.GetManifestUrl() != wantURL || inv.GetMode() != "add" || inv.GetVersion() != 1 {
		t.Errorf("inventory %v; want version 1 at %s in add mode", inv, wantURL)
	}

	erc, err := os.ReadFile(filepath.Join(wd, "system", sysfiles.ERCName))
	if want := "erc:\nwho: Doe, Jane\nwhat: Letters & <drafts>\nwhen: 1901\nwhere: " + ark + "\nwhere: loc001\n"; err != nil || string(erc) != want {
		t.Errorf("ERC = %q (%v), want %q", erc, err, want)
	}
	dcData, err := os.ReadFile(filepath.Join(wd, "system", sysfiles.DublinCoreName))
	var dc struct {
		Title      string   `xml:"http://purl.org/dc/elements/1.1/ title"`
		Identifier []string `xml:"http://purl.org/dc/elements/1.1/ identifier"`
	}
	if err != nil || xml.Unmarshal(dcData, &dc) != nil || dc.Title != "Letters & <drafts>" || !slices.Equal(dc.Identifier, []string{ark, "loc001"}) {
		t.Errorf("Dublin Core %+v from %s (%v)", dc, dcData, err)
	}

	entries := readManifest(t, wantURL)
	want := map[string]string{"producer/a.txt": "alpha", "producer/dir/b.txt": "beta",
		"system/mrt-erc.txt": string(erc), "system/mrt-dc.xml": string(dcData)}
	if len(entries) != len(want) {
		t.Fatalf("version manifest lists %d files, want %d", len(entries), len(want))
	}
	for _, en := range entries {
		content, ok := want[en.FileName]
		if !ok || en.HashAlgorithm != "sha256" || en.HashValue != sha(content) || en.FileSize != int64(len(content)) {
			t.Errorf("manifest entry %+v, want sha256 %s of %d bytes", en, sha(content), len(content))
		}
		u, _ := url.Parse(en.FileURL)
		if stored, err := os.ReadFile(u.Path); err != nil || string(stored) != content {
			t.Errorf("%s holds %q (%v), want %q", en.FileURL, stored, err, content)
		}
	}
}

func TestProcessingReusesTheARKALocalIDIsBoundTo(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	const earlier = "ark:/99999/fk4earlier"
	if _, err := e.q.BindLocalID(ctx, "ark:/99999/j2owner", "loc001", earlier); err != nil {
		t.Fatal(err)
	}
	jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc001"}},
		mode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE})
	job := e.ended(t, jid)
	if job.GetStatus().GetStatus() != queue.Recording || job.GetIdentifiers().GetPrimaryId() != earlier {
		t.Fatalf("job %s (%q) with ARK %q, want Recording with %s", queue.JobStateName(job.GetStatus().GetStatus()),
			job.GetStatus().GetMessage(), job.GetIdentifiers().GetPrimaryId(), earlier)
	}
	if job.GetInventory().GetMode() != "update" {
		t.Errorf("inventory mode %q, want update", job.GetInventory().GetMode())
	}
	// Nothing was minted: the next job gets the counter's first name.
	jid2, _ := e.spawn(t, object{files: map[string]string{"a": "a"}})
	if got := e.ended(t, jid2).GetIdentifiers().GetPrimaryId(); got != mint.NOIDName(shoulder, 1) {
		t.Errorf("next minted ARK %s, want %s", got, mint.NOIDName(shoulder, 1))
	}
}

func TestProcessingFailsWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, e *env) object
		want    string
	}{
		{"local id bound to another ARK than the depositor's", func(t *testing.T, e *env) object {
			e.q.BindLocalID(context.Background(), "ark:/99999/j2owner", "loc001", "ark:/99999/fk4other")
			return object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{PrimaryId: "ark:/99999/fk4given", LocalId: []string{"loc001"}}}
		}, "local id loc001 is bound to ark:/99999/fk4other but the depositor gave ark:/99999/fk4given"},
		{"digest differs from the manifest", func(t *testing.T, e *env) object {
			return object{files: map[string]string{"a.txt": "alpha"},
				declared: []*v1.ManifestFile{{Name: "a.txt", HashAlgorithm: "sha256", HashValue: sha("ALPHA"), Size: -1}}}
		}, "producer/a.txt: sha256 is " + sha("alpha") + ", the manifest says " + sha("ALPHA")},
		{"a file name the storage manifest cannot carry", func(t *testing.T, e *env) object {
			return object{files: map[string]string{"ok.txt": "ok", "a|b.txt": "x"}}
		}, `file name "producer/a|b.txt" contains '|', the manifest's column separator`},
		{"store root blocked by a file", func(t *testing.T, e *env) object {
			os.Remove(e.storeRoot)
			os.WriteFile(e.storeRoot, []byte("not a folder"), 0o644)
			return object{files: map[string]string{"a": "a"}}
		}, "creating the object folder: mkdir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeRoot := filepath.Join(t.TempDir(), "store")
			e := start(t, storeRoot)
			jid, _ := e.spawn(t, tc.prepare(t, e))
			job := e.ended(t, jid)
			if st := job.GetStatus(); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), tc.want) {
				t.Fatalf("job %s %q; want Failed with %q", queue.JobStateName(st.GetStatus()), st.GetMessage(), tc.want)
			}
			if msg := job.GetStatus().GetMessage(); strings.Count(msg, e.workRoot) > 1 {
				t.Errorf("the message names a path twice: %q", msg)
			}
			if job.GetInventory() != nil {
				t.Errorf("a failed job has an inventory node: %v", job.GetInventory())
			}
		})
	}
}

func TestAnUpdateAddsAVersionAndARerunAddsNone(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	first, _ := e.spawn(t, object{files: map[string]string{"a": "v1"}, ids: &v1.Identifiers{LocalId: []string{"loc9"}}})
	ark := e.ended(t, first).GetIdentifiers().GetPrimaryId()
	second, _ := e.spawn(t, object{files: map[string]string{"a": "v2", "b": "new"}, ids: &v1.Identifiers{LocalId: []string{"loc9"}},
		mode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE})
	job := e.ended(t, second)
	if job.GetIdentifiers().GetPrimaryId() != ark || !strings.HasSuffix(job.GetInventory().GetManifestUrl(), "/v2/manifest.checkm") ||
		job.GetInventory().GetVersion() != 2 {
		t.Fatalf("update stored %q at %q (store %v, inventory %v); want %s version 2", job.GetIdentifiers().GetPrimaryId(),
			job.GetInventory().GetManifestUrl(), job.GetStore(), job.GetInventory(), ark)
	}
	// An admin sends the second job through Processing again.
	if _, err := admin.New(e.q).FailJob(ctx, second, "test: redo"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.New(e.q).RequeueJob(ctx, second, queue.Processing, "test: redo"); err != nil {
		t.Fatal(err)
	}
	again := e.ended(t, second)
	if again.GetStatus().GetStatus() != queue.Recording || again.GetInventory().GetManifestUrl() != job.GetInventory().GetManifestUrl() ||
		again.GetInventory().GetVersion() != 2 {
		t.Errorf("re-run: %s at %q version %d, want Recording at %q version 2", queue.JobStateName(again.GetStatus().GetStatus()),
			again.GetInventory().GetManifestUrl(), again.GetInventory().GetVersion(), job.GetInventory().GetManifestUrl())
	}
	if names := e.versions(t, ark); !slices.Equal(names, []string{"v1", "v2"}) {
		t.Errorf("object folder holds %v, want [v1 v2]", names)
	}
}

func TestStoringWaitsForTheStorageLock(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	const ark = "ark:/99999/fk4busy"
	lock, err := e.q.LockStorage(ctx, ark) // as another job storing the object would

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
	if ok, err := peer.LockLocalID(lockName); !ok || err != nil {
		t.Fatalf("peer lock: %v, %v", ok, err)
	}
	jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-busy"}}})
	queuetest.Eventually(t, "the processor met the local id lock (or went past it)", func() bool {
		return e.runners["processing"].Status().GetOutcomes()["retried"] > 0 || queuetest.Status(t, e.q, jid).GetStatus() != queue.Processing
	})
	job, err := e.q.GetJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if job.GetStatus().GetStatus() != queue.Processing || job.GetIdentifiers().GetPrimaryId() != "" {
		t.Fatalf("while Merritt held the local id's lock the job went to %s with ARK %q",
			queue.JobStateName(job.GetStatus().GetStatus()), job.GetIdentifiers().GetPrimaryId())
	}
	if _, err := e.q.LookupLocalID(ctx, "ark:/99999/j2owner", "loc-busy"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the local id was bound meanwhile: %v", err)
	}
	if err := peer.UnlockLocalID(lockName); err != nil {
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
	if ok, err := peer.LockLocalID(lockName); !ok || err != nil {
		t.Errorf("Merritt cannot take the lock after the processor: %v, %v", ok, err)
	}
}

// localIDLockRequests counts the requests q sent on local id locks, by
// operation ("multi.create" for one inside a multi).
func localIDLockRequests(q *queue.Client) map[string]int64 {
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

// TestTempFilesOfAProcessingCutShortStayOutOfTheVersion: a processor dies
// while it writes a job's system files (or its storage manifest), leaving
// their temporary files in the working folder. The job is processed again
// elsewhere: what it stores must hold the system files and the producer's,
// never a temporary file.
func TestTempFilesOfAProcessingCutShortStayOutOfTheVersion(t *testing.T) {
	e := start(t, "")
	jid, wd := e.spawn(t, object{
		files: map[string]string{"a.txt": "alpha",
			"../system/." + sysfiles.ERCName + ".tmp-4242":        "erc:\nwho: half",
			"../system/." + sysfiles.DublinCoreName + ".tmp-4243": "<oai_dc:dc",
			"../." + StorageManifest + ".tmp-4244":                "%checkm_0.7\n",
		},
		declared: []*v1.ManifestFile{{Name: "a.txt", HashAlgorithm: "md5", HashValue: md5hex("alpha"), Size: 5, Url: "http://127.0.0.1:1/a.txt"}},
	})
	job := e.ended(t, jid)
	if job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job is %s (%q), want Recording", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	var names []string
	for _, en := range readManifest(t, job.GetInventory().GetManifestUrl()) {
		names = append(names, en.FileName)
	}
	if want := []string{"producer/a.txt", "system/mrt-dc.xml", "system/mrt-erc.txt"}; !slices.Equal(names, want) {
		t.Errorf("the version holds %v, want %v", names, want)
	}
	vdir := filepath.Join(e.storeRoot, queue.LockName(job.GetIdentifiers().GetPrimaryId()), "v1")
	filepath.WalkDir(vdir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("the stored version holds %s", p)
		}
		return err
	})
	left, _ := filepath.Glob(filepath.Join(wd, "*", ".*.tmp-*"))
	top, _ := filepath.Glob(filepath.Join(wd, ".*.tmp-*"))
	if left = append(left, top...); len(left) > 0 {
		t.Errorf("temporary files left in the working folder: %v", left)
	}
}
