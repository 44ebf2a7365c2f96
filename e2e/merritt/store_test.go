package merritt

// ingestq's storing step storing into a node of Merritt's storage service
// (INGESTQ_STORE=merritt), against the stand-in that answers as the
// service's source shows it does: its failures, a call that goes on after
// its caller gave up, the names it reads, an outage.

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// storingEnv is ingestq's settings for storing into the site's node
// itself, with extra's added.
func (s *site) storingEnv(extra map[string]string) map[string]string {
	env := map[string]string{"INGESTQ_STORE": "merritt", "INGESTQ_MERRITT_STORAGE_URL": s.storage.URL,
		"INGESTQ_MERRITT_NODE": strconv.Itoa(node), "INGESTQ_FIXITY_AUDIT_INTERVAL": "0"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// object writes an object's files into the deposits, and its object
// manifest naming each as the manifest spells it (the key), and returns
// the manifest's URL.
func (s *site) object(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest\n" +
		"#%prefix | mrt: | http://merritt.cdlib.org/terms#\n#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n")
	for _, file := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		p := filepath.Join(s.depDir, "objects", name, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[file]), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "{{base}}%s | md5 | %s | %d | | %s\n", (&url.URL{Path: "/objects/" + name + "/" + file}).EscapedPath(),
			md5hex(files[file]), len(files[file]), file)
	}
	b.WriteString("#%eof\n")
	if err := os.WriteFile(filepath.Join(s.depDir, name+".checkm"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return s.dep.URL + "/" + name + ".checkm"
}

func md5hex(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }

// batchOf writes a manifest of the object manifests named and returns its
// URL.
func (s *site) batchOf(t *testing.T, name string, objects ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\n" +
		"#%prefix | mrt: | http://merritt.cdlib.org/terms#\n#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:primaryIdentifier | mrt:localIdentifier | mrt:creator | mrt:title | mrt:date\n")
	for _, o := range objects {
		fmt.Fprintf(&b, "{{base}}/%s.checkm | | | | | %s.checkm | | loc-%s | e2e | %s | 2026\n", o, o, o, o)
	}
	b.WriteString("#%eof\n")
	if err := os.WriteFile(filepath.Join(s.depDir, name+".checkm"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return s.dep.URL + "/" + name + ".checkm"
}

// stored is a stack storing into the site's node and a session on its
// queue.
type stored struct {
	*site
	st *stack.Stack
	q  *session.Session
	bs v1.BatchServiceClient
}

func (s *site) startStoring(t *testing.T, extra map[string]string) *stored {
	t.Helper()
	st := s.start(t, nil, "", s.storingEnv(extra))
	q, err := session.Connect(context.Background(), session.Options{Servers: st.Servers, Root: st.Root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	conn, err := grpc.NewClient(st.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &stored{site: s, st: st, q: q, bs: v1.NewBatchServiceClient(conn)}
}

// submit submits a payload and returns its batch's id.
func (s *stored) submit(t *testing.T, payload string, typ v1.PayloadType) string {
	t.Helper()
	resp, err := s.bs.Submit(context.Background(), &v1.SubmitRequest{Submitter: "e2e", Profile: "demo", PayloadUrl: payload, PayloadType: typ})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetBatchId()
}

// ended waits for a batch's end and returns its jobs.
func (s *stored) ended(t *testing.T, bid string) []*v1.Job {
	t.Helper()
	waitBatch(t, s.q, bid, queue.BatchCompleted, queue.BatchFailed)
	return batchJobs(t, s.q, bid)
}

// stays are a job's stays in Storing: its failed attempts to store.
func stays(j *v1.Job) []string {
	var out []string
	for _, h := range j.GetStatus().GetHistory() {
		if h.GetFrom() == queue.Storing && h.GetTo() == queue.Storing {
			out = append(out, h.GetMessage())
		}
	}
	return out
}

// recorded is the version of ark the built-in inventory recorded for the
// job, and its files' names.
func (s *stored) recorded(t *testing.T, ark, jid string) (int, []string) {
	t.Helper()
	db, err := sql.Open("sqlite", s.st.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var number int
	if err := db.QueryRow(`SELECT number FROM versions WHERE ark = ? AND jid = ?`, ark, jid).Scan(&number); err != nil {
		return 0, nil
	}
	rows, err := db.Query(`SELECT name FROM files WHERE ark = ? AND version = ? ORDER BY name`, ark, number)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	return number, names
}

// TestAnAnswerThatCannotPassFailsTheJobAtOnceNamingTheServicesReason: the
// service refuses with its exception, whose Java stack trace (over 6 KiB)
// comes before its reason; the job fails at once, with 30 minutes of
// retries allowed, its message and history naming the service's reason.
func TestAnAnswerThatCannotPassFailsTheJobAtOnceNamingTheServicesReason(t *testing.T) {
	s := newSite(t).startStoring(t, nil)
	for _, f := range []merritttest.Fault{
		{Refuse: 500, Status: "INVALID_DATA_FORMAT", Detail: "validateManifest - size argument does not match passed manifest - passed size=1 - manifest size=2"},
		{Refuse: 400, Detail: "VersionMap: Delete list component not found:producer/nope.txt"},
	} {
		t.Run(strconv.Itoa(f.Refuse), func(t *testing.T) {
			before := len(s.storage.Calls())
			s.storage.Next(f)
			name := "refused-" + strconv.Itoa(f.Refuse)
			js := s.ended(t, s.submit(t, s.object(t, name, map[string]string{"a.txt": "alpha"}), v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST))
			if len(js) != 1 {
				t.Fatalf("%d jobs", len(js))
			}
			j := js[0]
			st := j.GetStatus()
			if st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Processing {
				t.Fatalf("job %s after %s (%q), want Failed in Storing", queue.JobStateName(st.GetStatus()),
					queue.JobStateName(st.GetLastSuccessfulStatus()), st.GetMessage())
			}
			want := fmt.Sprintf("with HTTP %d %s: %s", f.Refuse, map[int]string{400: "REQUEST_INVALID", 500: "INVALID_DATA_FORMAT"}[f.Refuse], f.Detail)
			if !strings.HasSuffix(st.GetMessage(), want) || strings.Contains(st.GetMessage(), "at org.") || strings.Contains(st.GetMessage(), "exc:") {
				t.Errorf("message %q, want one ending %q", st.GetMessage(), want)
			}
			h := st.GetHistory()
			if last := h[len(h)-1]; last.GetTo() != queue.Failed || !strings.Contains(last.GetMessage(), "HTTP "+strconv.Itoa(f.Refuse)) {
				t.Errorf("the history's last entry: %v", last)
			}
			if n := len(s.storage.Calls()) - before; len(stays(j)) != 0 || n != 1 {
				t.Errorf("%d attempts in the history, %d calls: want the one that failed", len(stays(j)), n)
			}
		})
	}
}

// TestACallThatTimesOutAndGoesOnWhileTheNextAttemptRunsMakesNoSecondVersion:
// the service holds the first add past INGESTQ_MERRITT_TIMEOUT and goes on
// with it once the next attempt's add has fetched its files, which waits
// for it before it commits. The first call's fetch is refused: one call
// makes a version, the object has one, and the inventory records it for
// the job.
func TestACallThatTimesOutAndGoesOnWhileTheNextAttemptRunsMakesNoSecondVersion(t *testing.T) {
	s := newSite(t).startStoring(t, map[string]string{"INGESTQ_MERRITT_TIMEOUT": "3s", "INGESTQ_MERRITT_RETRY_BACKOFF": "200ms"})
	s.storage.Next(merritttest.Fault{HoldForNext: true})
	js := s.ended(t, s.submit(t, s.object(t, "stale", map[string]string{"a.txt": "alpha", "b.txt": "beta"}), v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST))
	if len(js) != 1 || !completedOnce(js[0]) {
		t.Fatalf("jobs %v", js)
	}
	j := js[0]
	ark := j.GetIdentifiers().GetPrimaryId()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	calls, err := s.storage.WaitCalls(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.storage.Commits(ark); n != 1 || s.storage.Versions(node, ark) != 1 {
		t.Errorf("%d calls made a version, the object has %d: %+v", n, s.storage.Versions(node, ark), calls)
	}
	if stale := calls[0]; !stale.CallerGone || stale.Version != 0 || stale.Code != 404 {
		t.Errorf("the stale call: %+v, want it refused its manifest (404) and storing nothing", stale)
	}
	if s := stays(j); len(s) != 1 || !strings.Contains(s[0], "did not answer") {
		t.Errorf("the job's failed attempts: %q", s)
	}
	if number, _ := s.recorded(t, ark, j.GetId()); number != 1 || j.GetInventory().GetVersion() != 1 {
		t.Errorf("the inventory recorded version %d, the job names %d; want 1", number, j.GetInventory().GetVersion())
	}
}

// TestNamesAreStoredAsTheyAreOrRefusedBeforeAnythingIsStored: names the
// service reads back exactly once written for it are stored and recorded
// under them: "a|b.txt" from a manifest (which spells it "a%7cb.txt", as
// Merritt's manifests do), from a container's entry and from a single
// file's URL (".../a%7Cb.txt"). A name the service would read otherwise
// ("%20" is a space to it) fails its job in Processing, before any call;
// one holding "%7c", which no manifest can carry, fails where it is first
// known: a container's entry in Downloading, a single file's URL before
// its batch has a job.
func TestNamesAreStoredAsTheyAreOrRefusedBeforeAnythingIsStored(t *testing.T) {
	s := newSite(t).startStoring(t, nil)
	exact := map[string]string{"100% off.txt": "1", "x%7Cy.txt": "2", "50%25.txt": "3", "two  spaces.txt": "4", "plain.txt": "5"}
	s.object(t, "exact", exact)
	s.object(t, "sale", map[string]string{"100%20off.txt": "sale"})
	s.object(t, "pipe", map[string]string{"a%7cb.txt": "pipe"})
	js := s.ended(t, s.submit(t, s.batchOf(t, "names", "exact", "sale", "pipe"), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS))
	if len(js) != 3 {
		t.Fatalf("%d jobs", len(js))
	}
	// stored checks that a job completed and its version holds, and the
	// inventory records, exactly the files named.
	stored := func(what string, j *v1.Job, files map[string]string) {
		t.Helper()
		if !completedOnce(j) {
			t.Fatalf("%s: %s (%q)", what, queue.JobStateName(j.GetStatus().GetStatus()), j.GetStatus().GetMessage())
		}
		ark := j.GetIdentifiers().GetPrimaryId()
		got := s.storage.Files(node, ark, 1)
		_, names := s.recorded(t, ark, j.GetId())
		for name, body := range files {
			if string(got["producer/"+name]) != body || !slices.Contains(names, "producer/"+name) {
				t.Errorf("%s: %q: stored %q, recorded %v", what, name, got["producer/"+name], names)
			}
		}
		if n := len(slices.DeleteFunc(slices.Clone(names), func(n string) bool { return !strings.HasPrefix(n, "producer/") })); n != len(files) {
			t.Errorf("%s: recorded %v", what, names)
		}
	}
	for _, j := range js {
		ark := j.GetIdentifiers().GetPrimaryId()
		st := j.GetStatus()
		switch title := j.GetMetadata().GetWhat(); title {
		case "exact":
			stored(title, j, exact)
		case "pipe":
			stored(title, j, map[string]string{"a|b.txt": "pipe"})
		default:
			if st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Downloading ||
				!strings.Contains(st.GetMessage(), "cannot be stored in Merritt's storage service under its own name") {
				t.Errorf("%s: %s after %s (%q), want Failed in Processing", title, queue.JobStateName(st.GetStatus()),
					queue.JobStateName(st.GetLastSuccessfulStatus()), st.GetMessage())
			}
			if ark != "" && s.storage.Versions(node, ark) != 0 {
				t.Errorf("%s: stored", title)
			}
		}
	}

	// A container and a single file, each named with a '|'.
	container := s.zip(t, "pipe.zip", map[string]string{"scans/a|b.txt": "entry", "x%7Cy.txt": "upper"})
	js = s.ended(t, s.submit(t, container, v1.PayloadType_PAYLOAD_TYPE_CONTAINER))
	if len(js) != 1 {
		t.Fatalf("%d jobs", len(js))
	}
	stored("container", js[0], map[string]string{"scans/a|b.txt": "entry", "x%7Cy.txt": "upper"})
	single := s.file(t, "a|b.txt", "single")
	if !strings.HasSuffix(single, "/a%7Cb.txt") {
		t.Fatalf("the file's URL %s", single)
	}
	js = s.ended(t, s.submit(t, single, v1.PayloadType_PAYLOAD_TYPE_FILE))
	if len(js) != 1 {
		t.Fatalf("%d jobs", len(js))
	}
	stored("single file", js[0], map[string]string{"a|b.txt": "single"})

	// "%7c" in a container's entry, and in a single file's name.
	calls := len(s.storage.Calls())
	escaped := s.zip(t, "escaped.zip", map[string]string{"ok.txt": "fine", "x%7cy.txt": "x"})
	js = s.ended(t, s.submit(t, escaped, v1.PayloadType_PAYLOAD_TYPE_CONTAINER))
	want := `entry "x%7cy.txt": name cannot be listed in a manifest: contains "%7c", which a manifest reads as '|'`
	if len(js) != 1 || js[0].GetStatus().GetStatus() != queue.Failed || js[0].GetStatus().GetLastSuccessfulStatus() != queue.Provisioning ||
		!strings.Contains(js[0].GetStatus().GetMessage(), want) || js[0].GetIdentifiers().GetPrimaryId() != "" {
		t.Errorf("the container with \"x%%7cy.txt\": %v, want it Failed in Downloading, no ARK minted, saying %q", js, want)
	}
	bid := s.submit(t, s.file(t, "x%7cy.txt", "x"), v1.PayloadType_PAYLOAD_TYPE_FILE)
	b := waitBatch(t, s.q, bid, queue.BatchFailed, queue.BatchCompleted)
	if msg := b.GetStatus().GetMessage(); b.GetStatus().GetStatus() != queue.BatchFailed || len(batchJobs(t, s.q, bid)) != 0 ||
		!strings.Contains(msg, `file name "x%7cy.txt" contains "%7c", which a manifest reads as '|'`) {
		t.Errorf("the file named \"x%%7cy.txt\": batch %s %q with %d jobs, want Failed with none", queue.BatchStateName(b.GetStatus().GetStatus()),
			msg, len(batchJobs(t, s.q, bid)))
	}
	if n := len(s.storage.Calls()); n != calls {
		t.Errorf("%d calls for the names that cannot be carried", n-calls)
	}
	if n := len(s.storage.Calls()); n != 4 {
		t.Errorf("%d calls, want the four of the objects whose names can be stored", n)
	}
}

// zip writes a zip of files into the deposits and returns its URL.
func (s *site) zip(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, files[n])
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.depDir, name), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return s.dep.URL + "/" + name
}

// file writes a single file into the deposits under its name and returns
// its URL.
func (s *site) file(t *testing.T, name, body string) string {
	t.Helper()
	dir := filepath.Join(s.depDir, "files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return s.dep.URL + (&url.URL{Path: "/files/" + name}).EscapedPath()
}

// TestTheServiceDownForThirtySecondsThenUpEveryJobCompletesOnce: the
// storage service is down while a batch is stored (connections refused);
// the jobs stay in Storing, trying again, and once it is back every one
// completes with no operator's action, one version each.
func TestTheServiceDownForThirtySecondsThenUpEveryJobCompletesOnce(t *testing.T) {
	s := newSite(t).startStoring(t, map[string]string{"INGESTQ_MERRITT_RETRY_BACKOFF": "1s"})
	for i := range 3 {
		s.object(t, "outage-"+strconv.Itoa(i), map[string]string{"a.txt": "alpha " + strconv.Itoa(i), "b.txt": "beta"})
	}
	down := time.Now()
	s.storage.Down()
	bid := s.submit(t, s.batchOf(t, "outage", "outage-0", "outage-1", "outage-2"), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	// Every job tries, and stays in Storing.
	waittest.Until(t, 2*time.Minute, func() error {
		js := batchJobs(t, s.q, bid)
		waiting := 0
		for _, j := range js {
			if j.GetStatus().GetStatus() == queue.Storing && len(stays(j)) > 0 {
				waiting++
			}
			if j.GetStatus().GetStatus() == queue.Failed {
				t.Fatalf("%s failed while the service was down: %q", j.GetId(), j.GetStatus().GetMessage())
			}
		}
		if len(js) != 3 || waiting != 3 {
			return fmt.Errorf("%d of %d jobs waiting in Storing", waiting, len(js))
		}
		return nil
	})
	// The outage lasts its 30 s, whatever the jobs do meanwhile: the
	// length of the fault itself, nothing to wait for.
	waittest.For(t.Context(), time.Until(down.Add(30*time.Second)))
	if err := s.storage.Up(); err != nil {
		t.Fatal(err)
	}
	js := s.ended(t, bid)
	for _, j := range js {
		ark := j.GetIdentifiers().GetPrimaryId()
		if !completedOnce(j) || s.storage.Commits(ark) != 1 || s.storage.Versions(node, ark) != 1 {
			t.Errorf("%s: %s (%q), %d calls made a version, %d versions", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()),
				j.GetStatus().GetMessage(), s.storage.Commits(ark), s.storage.Versions(node, ark))
		}
		for _, h := range j.GetStatus().GetHistory() {
			if h.GetTo() == queue.Failed {
				t.Errorf("%s failed on the way: %q", j.GetId(), h.GetMessage())
			}
		}
		if st := stays(j); len(st) == 0 || !strings.Contains(st[0], "calling the storage service") {
			t.Errorf("%s: attempts %q", j.GetId(), st)
		}
		if number, _ := s.recorded(t, ark, j.GetId()); number != 1 {
			t.Errorf("%s: recorded version %d", j.GetId(), number)
		}
		if got, err := merrittstore.ObjectFromManifestURL(j.GetInventory().GetManifestUrl()); err != nil || got != ark {
			t.Errorf("%s: inventory node %q", j.GetId(), j.GetInventory().GetManifestUrl())
		}
	}
	if len(js) != 3 {
		t.Errorf("%d jobs", len(js))
	}
}
