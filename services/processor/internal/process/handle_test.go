package process

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/services/processor/internal/sysfiles"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
	"google.golang.org/protobuf/proto"
)

// The handlers' decisions, tried on jobs held in memory (stagetest) with
// the local id bindings held in memory too (memQueue): how the queue
// takes, commits and releases a job, and its locks, is what the
// queue-backed tests (process_test.go, storing_test.go, locks_test.go)
// are about.

// memQueue is a Queue held in memory: the local id bindings in a map, and
// every lock free. Its locks are nil, which a commit (jobs.Change.Unlock)
// and the processor's unlock skip.
type memQueue struct {
	mu       sync.Mutex
	bindings map[[2]string]string // ARKs by owner and local id
}

var _ Queue = (*memQueue)(nil)

func (q *memQueue) LookupLocalID(_ context.Context, owner, localID string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ark, ok := q.bindings[[2]string{owner, localID}]
	if !ok {
		return "", fmt.Errorf("local id %s of %s: %w", localID, owner, queue.ErrNotFound)
	}
	return ark, nil
}

func (q *memQueue) BindLocalID(_ context.Context, owner, localID, ark string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	key := [2]string{owner, localID}
	if bound, ok := q.bindings[key]; ok {
		return bound, nil
	}
	if q.bindings == nil {
		q.bindings = map[[2]string]string{}
	}
	q.bindings[key] = ark
	return ark, nil
}

func (q *memQueue) LockLocalID(context.Context, string, string) (*jobs.ObjectLock, error) {
	return nil, nil
}

func (q *memQueue) LockStorage(context.Context, string) (*jobs.ObjectLock, error) { return nil, nil }

// memEnv is a processor over jobs held in memory.
type memEnv struct {
	files
	q        *memQueue
	counters stagetest.Counters // the minting counters, shared by the jobs
	p        *Processor
	jobs     int
}

// newMem is a processor minting with mint.Local and storing with
// store.Local at storeRoot ("" makes a fresh one).
func newMem(t *testing.T, storeRoot string) *memEnv {
	t.Helper()
	e := &memEnv{files: newFiles(t, storeRoot), q: &memQueue{}}
	e.p = &Processor{Queue: e.q, Minter: mint.Local{Shoulder: shoulder}, Storage: store.Local{Root: e.storeRoot}, Profiles: e.profiles,
		WorkRoot: e.workRoot, LockRetry: 100e6}
	return e
}

// job writes the object's producer files into a fresh working folder and
// returns its job, as the downloader leaves it in Processing.
func (e *memEnv) job(t *testing.T, o object) (job *v1.Job, wd string) {
	t.Helper()
	nj, wd := e.newJob(t, o)
	e.jobs++
	return &v1.Job{Id: fmt.Sprintf("jid%010d", e.jobs), Bid: "bid0000000001", Configuration: nj.Configuration,
		Identifiers: nj.Identifiers, Metadata: nj.Metadata, Manifest: nj.Manifest}, wd
}

// handle runs the handler of the stage that takes jobs in state from on a
// claim of job, and writes the data of an outcome that moves the job to
// job, as its commit would.
func (e *memEnv) handle(t *testing.T, job *v1.Job, from queue.JobState) stage.Outcome {
	t.Helper()
	h := e.p.Handle
	if from == queue.Storing {
		h = e.p.HandleStoring
	}
	claim := stagetest.New(job, from)
	claim.Counters = &e.counters
	out := h(context.Background(), claim)
	if s := out.String(); strings.HasPrefix(s, "next") || strings.HasPrefix(s, "to ") {
		if err := claim.Update(context.Background(), out.Change()); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// through runs job through processing and, if it moves on, storing, as
// one replica's chained stages do, and returns the last outcome.
func (e *memEnv) through(t *testing.T, job *v1.Job) stage.Outcome {
	t.Helper()
	out := e.handle(t, job, queue.Processing)
	if !strings.HasPrefix(out.String(), "next") {
		return out
	}
	return e.handle(t, job, queue.Storing)
}

// stored is the outcome of a job whose version v of ark was stored.
func stored(ark string, v int) string { return fmt.Sprintf("next: stored %s version %d", ark, v) }

func TestProcessingMintsBindsWritesSystemFilesAndStores(t *testing.T) {
	e := newMem(t, "")
	ctx := context.Background()
	job, wd := e.job(t, object{
		files: map[string]string{"a.txt": "alpha", "dir/b.txt": "beta"},
		ids:   &v1.Identifiers{LocalId: []string{"loc001"}},
		md:    &v1.Metadata{Who: "Doe, Jane", What: "Letters & <drafts>", When: "1901"},
	})
	out := e.through(t, job)
	ark := job.GetIdentifiers().GetPrimaryId()
	if out.String() != stored(ark, 1) {
		t.Fatalf("outcome %q, want %q (on to Recording)", out, stored(ark, 1))
	}
	if ark != mint.NOIDName(shoulder, 1) {
		t.Errorf("ARK %q, want the first minted %s", ark, mint.NOIDName(shoulder, 1))
	}
	if bound, err := e.q.LookupLocalID(ctx, "ark:/99999/j2owner", "loc001"); err != nil || bound != ark {
		t.Errorf("loc001 of the profile's owner is bound to %q (%v), want %s", bound, err, ark)
	}
	// The store node names what was stored, the inventory node the version.
	storageURL := checkm.FileURL(filepath.Join(wd, StorageManifest))
	wantURL := checkm.FileURL(filepath.Join(e.storeRoot, queue.LockName(ark), "v1", store.VersionManifest))
	if s := job.GetStore(); s.GetManifestUrl() != storageURL || s.GetMode() != "add" || len(s.GetDeletions()) != 0 {
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
	e := newMem(t, "")
	ctx := context.Background()
	const earlier = "ark:/99999/fk4earlier"
	if _, err := e.q.BindLocalID(ctx, "ark:/99999/j2owner", "loc001", earlier); err != nil {
		t.Fatal(err)
	}
	job, _ := e.job(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc001"}},
		mode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE})
	if out := e.through(t, job); out.String() != stored(earlier, 1) || job.GetIdentifiers().GetPrimaryId() != earlier {
		t.Fatalf("outcome %q with ARK %q, want %q with %s", out, job.GetIdentifiers().GetPrimaryId(), stored(earlier, 1), earlier)
	}
	if job.GetInventory().GetMode() != "update" {
		t.Errorf("inventory mode %q, want update", job.GetInventory().GetMode())
	}
	// Nothing was minted: the next job gets the counter's first name.
	next, _ := e.job(t, object{files: map[string]string{"a": "a"}})
	e.through(t, next)
	if got := next.GetIdentifiers().GetPrimaryId(); got != mint.NOIDName(shoulder, 1) {
		t.Errorf("next minted ARK %s, want %s", got, mint.NOIDName(shoulder, 1))
	}
}

func TestProcessingFailsWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, e *memEnv) object
		want    string
	}{
		{"local id bound to another ARK than the depositor's", func(t *testing.T, e *memEnv) object {
			e.q.BindLocalID(context.Background(), "ark:/99999/j2owner", "loc001", "ark:/99999/fk4other")
			return object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{PrimaryId: "ark:/99999/fk4given", LocalId: []string{"loc001"}}}
		}, "local id loc001 is bound to ark:/99999/fk4other but the depositor gave ark:/99999/fk4given"},
		{"digest differs from the manifest", func(t *testing.T, e *memEnv) object {
			return object{files: map[string]string{"a.txt": "alpha"},
				declared: []*v1.ManifestFile{{Name: "a.txt", HashAlgorithm: "sha256", HashValue: sha("ALPHA"), Size: -1}}}
		}, "producer/a.txt: sha256 is " + sha("alpha") + ", the manifest says " + sha("ALPHA")},
		{"a file name the storage manifest cannot carry", func(t *testing.T, e *memEnv) object {
			return object{files: map[string]string{"ok.txt": "ok", "a|b.txt": "x"}}
		}, `file name "producer/a|b.txt" contains '|', the manifest's column separator`},
		{"store root blocked by a file", func(t *testing.T, e *memEnv) object {
			os.Remove(e.storeRoot)
			os.WriteFile(e.storeRoot, []byte("not a folder"), 0o644)
			return object{files: map[string]string{"a": "a"}}
		}, "creating the object folder: mkdir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storeRoot := filepath.Join(t.TempDir(), "store")
			e := newMem(t, storeRoot)
			job, _ := e.job(t, tc.prepare(t, e))
			out := e.through(t, job)
			msg, failed := strings.CutPrefix(out.String(), "to Failed: ")
			if !failed || !strings.Contains(msg, tc.want) {
				t.Fatalf("outcome %q; want Failed with %q", out, tc.want)
			}
			if strings.Count(msg, e.workRoot) > 1 {
				t.Errorf("the message names a path twice: %q", msg)
			}
			if job.GetInventory() != nil {
				t.Errorf("a failed job has an inventory node: %v", job.GetInventory())
			}
		})
	}
}

func TestAnUpdateAddsAVersionAndARerunAddsNone(t *testing.T) {
	e := newMem(t, "")
	first, _ := e.job(t, object{files: map[string]string{"a": "v1"}, ids: &v1.Identifiers{LocalId: []string{"loc9"}}})
	e.through(t, first)
	ark := first.GetIdentifiers().GetPrimaryId()
	second, _ := e.job(t, object{files: map[string]string{"a": "v2", "b": "new"}, ids: &v1.Identifiers{LocalId: []string{"loc9"}},
		mode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE})
	e.through(t, second)
	if second.GetIdentifiers().GetPrimaryId() != ark || !strings.HasSuffix(second.GetInventory().GetManifestUrl(), "/v2/manifest.checkm") ||
		second.GetInventory().GetVersion() != 2 {
		t.Fatalf("update stored %q at %q (store %v, inventory %v); want %s version 2", second.GetIdentifiers().GetPrimaryId(),
			second.GetInventory().GetManifestUrl(), second.GetStore(), second.GetInventory(), ark)
	}
	inventory := proto.Clone(second.GetInventory()).(*v1.Inventory)
	// An admin sends the second job through Processing again.
	if out := e.through(t, second); out.String() != stored(ark, 2) || second.GetInventory().GetManifestUrl() != inventory.GetManifestUrl() ||
		second.GetInventory().GetVersion() != 2 {
		t.Errorf("re-run: %q at %q version %d, want %q at %q version 2", out, second.GetInventory().GetManifestUrl(),
			second.GetInventory().GetVersion(), stored(ark, 2), inventory.GetManifestUrl())
	}
	if names := e.versions(t, ark); !slices.Equal(names, []string{"v1", "v2"}) {
		t.Errorf("object folder holds %v, want [v1 v2]", names)
	}
}

// TestTempFilesOfAProcessingCutShortStayOutOfTheVersion: a processor dies
// while it writes a job's system files (or its storage manifest), leaving
// their temporary files in the working folder. The job is processed again
// elsewhere: what it stores must hold the system files and the producer's,
// never a temporary file.
func TestTempFilesOfAProcessingCutShortStayOutOfTheVersion(t *testing.T) {
	e := newMem(t, "")
	job, wd := e.job(t, object{
		files: map[string]string{"a.txt": "alpha",
			"../system/." + sysfiles.ERCName + ".tmp-4242":        "erc:\nwho: half",
			"../system/." + sysfiles.DublinCoreName + ".tmp-4243": "<oai_dc:dc",
			"../." + StorageManifest + ".tmp-4244":                "%checkm_0.7\n",
		},
		declared: []*v1.ManifestFile{{Name: "a.txt", HashAlgorithm: "md5", HashValue: md5hex("alpha"), Size: 5, Url: "http://127.0.0.1:1/a.txt"}},
	})
	if out := e.through(t, job); !strings.HasPrefix(out.String(), "next: stored ") {
		t.Fatalf("outcome %q, want the job stored and on to Recording", out)
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

// TestARequeueToStoringStoresNoSecondVersion: an admin sends a stored job
// back to Storing; the step finds the version the job stored and hands it on
// with that version, as after a crash between storing and the commit.
func TestARequeueToStoringStoresNoSecondVersion(t *testing.T) {
	e := newMem(t, "")
	job, _ := e.job(t, object{files: map[string]string{"a.txt": "alpha"}})
	out := e.through(t, job)
	ark := job.GetIdentifiers().GetPrimaryId()
	if out.String() != stored(ark, 1) {
		t.Fatalf("outcome %q, want %q", out, stored(ark, 1))
	}
	first := proto.Clone(job.GetInventory()).(*v1.Inventory)
	if again := e.handle(t, job, queue.Storing); again.String() != stored(ark, 1) || !proto.Equal(job.GetInventory(), first) {
		t.Fatalf("after the requeue: %q with inventory %v, want %q with %v", again, job.GetInventory(), stored(ark, 1), first)
	}
	if got := e.versions(t, ark); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("object folder holds %v, want [v1]", got)
	}
}

func TestStoringRefusesAStoreNodeNamingAnotherManifest(t *testing.T) {
	e := newMem(t, "")
	job, _ := e.job(t, object{files: map[string]string{"a.txt": "alpha"}})
	if out := e.handle(t, job, queue.Processing); !strings.HasPrefix(out.String(), "next: processed ") {
		t.Fatalf("outcome %q, want the job processed, on to Storing", out)
	}
	// Another writer points the store node at a manifest of its own, whose
	// file the store would take were the node followed.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("other"))
	if err := store.WriteManifest(filepath.Join(dir, StorageManifest), []checkm.Entry{{FileURL: checkm.FileURL(filepath.Join(dir, "a.txt")),
		HashAlgorithm: "sha256", HashValue: hex.EncodeToString(sum[:]), FileSize: 5, FileName: "producer/a.txt"}}); err != nil {
		t.Fatal(err)
	}
	elsewhere := checkm.FileURL(filepath.Join(dir, StorageManifest))
	job.Store = &v1.Store{ManifestUrl: elsewhere, Mode: "add"}
	out := e.handle(t, job, queue.Storing)
	if !strings.HasPrefix(out.String(), "to Failed: ") || !strings.Contains(out.String(), "the store node names \""+elsewhere+"\"") {
		t.Fatalf("outcome %q, want Failed naming %s", out, elsewhere)
	}
	if des, err := os.ReadDir(e.storeRoot); err != nil || len(des) != 0 {
		t.Errorf("the store holds %v (%v), want nothing", des, err)
	}
}

// TestAJobWhoseDataCannotBeReadIsFailedReleasedOrTriedAgain: each step's
// outcome when reading the job fails. Data that cannot be decoded fails
// the job, saying so; a job lost to another consumer (fenced) is given
// back untouched; any other failure to read (the queue in trouble) leaves
// the job to be tried again; none of them writes the job or stores
// anything. A step whose context ends (the processor stopping) gives the
// job back whatever failed meanwhile: it is not the job's fault.
func TestAJobWhoseDataCannotBeReadIsFailedReleasedOrTriedAgain(t *testing.T) {
	corrupt := fmt.Errorf("jobs/jid0000000001/configuration: %w", queue.ErrCorrupt)
	fenced := fmt.Errorf("job jid0000000001: %w", queue.ErrFenced)
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for _, from := range []queue.JobState{queue.Processing, queue.Storing} {
		for _, tc := range []struct {
			name string
			ctx  context.Context
			err  error
			want string
		}{
			{"undecodable", context.Background(), corrupt, "to Failed: working folder: " + corrupt.Error()},
			{"fenced", context.Background(), fenced, "release"},
			{"unreadable", context.Background(), errors.New("zk: connection closed"), "wait 100ms"},
			{"stopped", stopped, nil, "release"},
		} {
			t.Run(queue.JobStateName(from)+" "+tc.name, func(t *testing.T) {
				e := newMem(t, "")
				job, _ := e.job(t, object{files: map[string]string{"a.txt": "alpha"}})
				h := e.p.Handle
				if from == queue.Storing {
					if out := e.handle(t, job, queue.Processing); !strings.HasPrefix(out.String(), "next: ") {
						t.Fatalf("processing: %q", out)
					}
					h = e.p.HandleStoring
				}
				claim := stagetest.New(job, from)
				claim.Err = tc.err
				if out := h(tc.ctx, claim); out.String() != tc.want {
					t.Errorf("outcome %q, want %q", out, tc.want)
				}
				if tc.err == nil {
					return
				}
				if len(claim.Updates()) != 0 {
					t.Errorf("the job was written: %v", claim.Updates())
				}
				if des, err := os.ReadDir(e.storeRoot); err != nil || len(des) != 0 {
					t.Errorf("the store holds %v (%v), want nothing", des, err)
				}
			})
		}
	}
}

// TestAnARKEZIDWillNotMintFailsTheJob: EZID (on loopback) refuses to mint;
// the job fails saying why, with no ARK, and nothing is stored.
func TestAnARKEZIDWillNotMintFailsTheJob(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "error: unauthorized\n")
	}))
	defer srv.Close()
	e := newMem(t, "")
	e.p.Minter = mint.EZID{BaseURL: srv.URL, User: "apitest", Password: "wrong", Shoulder: shoulder,
		Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()})}
	job, _ := e.job(t, object{files: map[string]string{"a.txt": "alpha"}, ids: &v1.Identifiers{LocalId: []string{"loc001"}}})
	out := e.through(t, job)
	if want := "to Failed: minting an ARK: "; !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), "HTTP 401: unauthorized") {
		t.Errorf("outcome %q, want %q with EZID's answer", out, want+"…HTTP 401: unauthorized")
	}
	if ark := job.GetIdentifiers().GetPrimaryId(); ark != "" {
		t.Errorf("the job has ARK %q", ark)
	}
	if _, err := e.q.LookupLocalID(context.Background(), "ark:/99999/j2owner", "loc001"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("the local id was bound: %v", err)
	}
	if des, err := os.ReadDir(e.storeRoot); err != nil || len(des) != 0 {
		t.Errorf("the store holds %v (%v), want nothing", des, err)
	}
}

// requests keeps the requests a store is given, and passes them on.
type requests struct {
	store.Storage
	got []store.Request
}

func (r *requests) Store(ctx context.Context, req store.Request) (store.Version, error) {
	r.got = append(r.got, req)
	return r.Storage.Store(ctx, req)
}

// TestStoringOnTheClaimProcessingHeldGetsWhatItDigested: a job the runner
// chains from processing to storing (one claim, its lock kept) is stored
// with what processing saw of each of its files as it digested them, so
// that the store need not read them again; a job stored on another claim
// (another process, a later attempt) is stored with nothing of the sort.
func TestStoringOnTheClaimProcessingHeldGetsWhatItDigested(t *testing.T) {
	e := newMem(t, "")
	rec := &requests{Storage: e.p.Storage}
	e.p.Storage = rec
	e.p.StageConfigs(true)
	ctx := context.Background()

	job, _ := e.job(t, object{files: map[string]string{"a.txt": "alpha", "dir/b.txt": "beta"}})
	claim := stagetest.New(job, queue.Processing)
	claim.Counters = &e.counters
	out := e.p.Handle(ctx, claim)
	if err := claim.Update(ctx, out.Change()); err != nil {
		t.Fatal(err)
	}
	if out := e.p.HandleStoring(ctx, claim); !strings.HasPrefix(out.String(), "next: stored") {
		t.Fatalf("storing: %q", out)
	}
	d := rec.got[0].Digested
	if _, ok := d["producer/a.txt"]; !ok || len(d) < 3 {
		t.Errorf("stored with %d files digested (%v); want every file of the version, producer/a.txt among them", len(d), d)
	}

	job, _ = e.job(t, object{files: map[string]string{"c.txt": "gamma"}})
	if out := e.handle(t, job, queue.Processing); !strings.HasPrefix(out.String(), "next") {
		t.Fatalf("processing: %q", out)
	}
	if out := e.handle(t, job, queue.Storing); !strings.HasPrefix(out.String(), "next: stored") {
		t.Fatalf("storing: %q", out)
	}
	if d := rec.got[1].Digested; d != nil {
		t.Errorf("a job stored on another claim than processing's was given %d files as digested", len(d))
	}
}
