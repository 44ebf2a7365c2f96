// Package filenames tests the names of a deposit's files through the seven
// services as processes, on the local store and in an S3 bucket: a name
// holding a '|' (which a manifest spells "%7c", as Merritt's do) is stored,
// recorded and called back under that very name, and a name holding "%7c"
// itself, which no manifest can carry, fails its job where it is first
// known, before anything is stored. e2e/merritt does the same against
// Merritt's storage service.
package filenames

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime/quotedprintable"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/depositor"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const adminToken = "filenames-e2e-token"

// A deposit of each kind, each naming files with a '|' as its kind spells
// them, and the files each is to be stored with (under producer/).
var (
	// The manifest spells "a|b.txt" as Merritt's do; "%20" and "%7C" it
	// keeps as written.
	manifestFiles = map[string]string{"a|b.txt": "from a manifest", "100%20off.txt": "sale", "x%7Cy.txt": "upper"}
	// A container's entries are named as they are.
	containerFiles = map[string]string{"scans/a|b.txt": "from a container", "scans/c|d/e.txt": "in a folder"}
	// A single file is named by its URL's last segment, decoded: ".../a%7Cb.txt".
	singleFiles = map[string]string{"a|b.txt": "a single file"}
)

// TestAPipeInANameIsStoredRecordedAndCalledBackUnderThatName runs the same
// deposits through a stack storing locally, recording with the built-in
// inventory, and through one storing into a bucket, recorded by an
// Inventory client over RecordingService from the lease's fetch_url.
func TestAPipeInANameIsStoredRecordedAndCalledBackUnderThatName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "bin")
	if err := stack.Build(ctx, filepath.Join("..", ".."), bin); err != nil {
		t.Fatal(err)
	}
	t.Run("local store, built-in inventory", func(t *testing.T) {
		r := start(t, bin, nil)
		r.depositAndCheck(t, func(t *testing.T, j *v1.Job) map[string]string {
			r.waitJob(t, j.GetId(), queue.Completed)
			return r.builtinRecord(t, j)
		}, func(t *testing.T, manifestURL string) []byte {
			p, err := checkm.FilePath(manifestURL)
			if err != nil || !strings.HasPrefix(p, r.st.StoreRoot+"/") {
				t.Fatalf("the version manifest %s is not in the store: %v", manifestURL, err)
			}
			return readFile(t, p)
		})
	})
	t.Run("S3 store, an Inventory client over RecordingService", func(t *testing.T) {
		s3 := s3test.Start(t)
		bucket := s3.CreateBucket(t)
		r := start(t, bin, map[string]string{"INGESTQ_STORE": "s3", "INGESTQ_S3_ENDPOINT": s3.Endpoint, "INGESTQ_S3_BUCKET": bucket,
			"INGESTQ_S3_REGION": s3.Region, "INGESTQ_S3_PATH_STYLE": "true", "AWS_ACCESS_KEY_ID": s3.Access, "AWS_SECRET_ACCESS_KEY": s3.Secret,
			"INGESTQ_RECORDER_BUILTIN": "false"})
		r.depositAndCheck(t, r.leaseAndRecord, func(t *testing.T, manifestURL string) []byte {
			b, key, err := s3store.ParseURL(manifestURL)
			if err != nil || b != bucket {
				t.Fatalf("the version manifest %s is not in the bucket %s: %v", manifestURL, bucket, err)
			}
			// The gateway keeps a bucket's objects as files under its folder.
			return readFile(t, filepath.Join(s3.Dir, bucket, filepath.FromSlash(key)))
		})
	})
}

// run is one stack and its depositor.
type run struct {
	st  *stack.Stack
	dep *depositor.Server
	dir string
	q   *session.Session
	bs  v1.BatchServiceClient
	rec v1.RecordingServiceClient
	// leased are the versions the Inventory client recorded, by job.
	leased map[string]map[string]string
}

func start(t *testing.T, bin string, env map[string]string) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &run{dir: t.TempDir()}
	var err error
	if r.dep, err = depositor.Start(filepath.Join(r.dir, "deposits")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.dep.Close() })
	profiles := filepath.Join(r.dir, "profiles")
	os.MkdirAll(profiles, 0o755)
	if err := os.WriteFile(filepath.Join(profiles, "names.yaml"), []byte("name: names\ncollection: names\nowner: ark:/99999/fk4owner\n"+
		"notification_addresses: [depositor@example.org]\ncallback_url: "+r.dep.URL+depositor.CallbackPath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.st, err = stack.Start(ctx, stack.Options{Dir: filepath.Join(r.dir, "stack"), BinDir: bin, ProfilesDir: profiles,
		AdminToken: adminToken, Env: env}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := r.st.Stop(ctx); err != nil {
			t.Errorf("stopping the stack: %v", err)
		}
		if t.Failed() {
			t.Logf("the stack's logs are in %s", r.st.LogDir)
		}
	})
	if r.q, err = session.Connect(ctx, session.Options{Servers: r.st.Servers, Root: r.st.Root}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.q.Close)
	conn, err := grpc.NewClient(r.st.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rconn, err := grpc.NewClient(r.st.Addr("recorder"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rconn.Close() })
	r.bs, r.rec = v1.NewBatchServiceClient(conn), v1.NewRecordingServiceClient(rconn)
	return r
}

// depositAndCheck submits the deposits, has record give each stored job's
// recorded names and files (name → digest), and checks that each is
// stored, recorded and called back under the names it was deposited with,
// read with version, and that the names no manifest can carry fail their
// jobs before anything is stored, each named in the batch's report.
func (r *run) depositAndCheck(t *testing.T, record func(*testing.T, *v1.Job) map[string]string, version func(*testing.T, string) []byte) {
	base := r.dep.URL
	put := func(name string, data []byte) string {
		p := filepath.Join(r.dir, "deposits", filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return base + (&url.URL{Path: "/" + name}).EscapedPath()
	}
	var m strings.Builder
	m.WriteString("#%checkm_0.7\n#%profile | " + checkm.ProfileObject + "\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n")
	for _, name := range slices.Sorted(maps.Keys(manifestFiles)) {
		u := put("files/"+strings.ReplaceAll(name, "|", "_"), []byte(manifestFiles[name]))
		fmt.Fprintf(&m, "%s | sha256 | %s | %d | | %s\n", u, sha256hex(manifestFiles[name]), len(manifestFiles[name]), strings.ReplaceAll(name, "|", "%7c"))
	}
	m.WriteString("#%eof\n")
	object := put("pipe.checkm", []byte(m.String()))
	unnamed := put("unnamed.checkm", []byte("#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize\n"+
		put("files/x%7cy.txt", []byte("x"))+" | | | 1\n#%eof\n"))
	batchManifest := put("objects.checkm", []byte("#%checkm_0.7\n#%profile | "+checkm.ProfileBatch+"\n#%fields | nfo:fileUrl | mrt:title\n"+
		object+" | manifest\n"+unnamed+" | unnamed\n#%eof\n"))
	container := put("pipe.zip", zipOf(t, containerFiles))
	single := put("single/a|b.txt", []byte(singleFiles["a|b.txt"]))
	escaped := put("escaped.zip", zipOf(t, map[string]string{"ok.txt": "fine", "scans/x%7cy.txt": "x"}))

	byTitle := map[string]*v1.Job{}
	for _, d := range []struct {
		url  string
		typ  v1.PayloadType
		jobs int
	}{{batchManifest, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, 2}, {container, v1.PayloadType_PAYLOAD_TYPE_CONTAINER, 1},
		{single, v1.PayloadType_PAYLOAD_TYPE_FILE, 1}, {escaped, v1.PayloadType_PAYLOAD_TYPE_CONTAINER, 1}} {
		resp, err := r.bs.Submit(context.Background(), &v1.SubmitRequest{Submitter: "e2e", Profile: "names", PayloadUrl: d.url, PayloadType: d.typ})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range r.batchJobs(t, resp.GetBatchId(), d.jobs) {
			title := j.GetMetadata().GetWhat()
			if title == "" {
				title = path(j.GetConfiguration().GetPayloadUrl())
			}
			byTitle[title] = j
		}
	}
	for title, files := range map[string]map[string]string{"manifest": manifestFiles, "pipe.zip": containerFiles, "a|b.txt": singleFiles} {
		j := byTitle[title]
		if j == nil {
			t.Fatalf("no job of the %s deposit: %v", title, slices.Collect(maps.Keys(byTitle)))
		}
		recorded := record(t, j)
		j = r.waitJob(t, j.GetId(), queue.Completed)
		want := map[string]string{}
		for name, body := range files {
			want["producer/"+name] = sha256hex(body)
		}
		maps.DeleteFunc(recorded, func(name, _ string) bool { return !strings.HasPrefix(name, "producer/") })
		if !maps.Equal(recorded, want) {
			t.Errorf("%s: recorded %v, want %v", title, recorded, want)
		}
		// The callback names the version manifest, which names the files.
		cb := r.callback(t, j.GetId())
		if cb.ManifestURL != j.GetInventory().GetManifestUrl() {
			t.Errorf("%s: called back with %s, the job's version is %s", title, cb.ManifestURL, j.GetInventory().GetManifestUrl())
		}
		text := version(t, cb.ManifestURL)
		vm, err := checkm.Parse(bytes.NewReader(text), checkm.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string]string{}
		for _, e := range vm.Entries {
			if strings.HasPrefix(e.FileName, "producer/") {
				stored[e.FileName] = e.HashValue
			}
		}
		if !maps.Equal(stored, want) || !bytes.Contains(text, []byte("\n#%encoded | %7c\n")) {
			t.Errorf("%s: the version manifest lists %v:\n%s", title, slices.Sorted(maps.Keys(stored)), text)
		}
	}

	for title, want := range map[string]struct {
		from queue.JobState
		msg  string
	}{
		"unnamed":     {queue.Pending, `line 3: no nfo:fileName and the URL's file name "x%7cy.txt" contains "%7c", which a manifest reads as '|'`},
		"escaped.zip": {queue.Provisioning, `entry "scans/x%7cy.txt": name cannot be listed in a manifest: contains "%7c", which a manifest reads as '|'`},
	} {
		j := r.waitJob(t, byTitle[title].GetId(), queue.Failed)
		st := j.GetStatus()
		last := st.GetLastSuccessfulStatus()
		if want.from == queue.Pending {
			last = st.GetHistory()[len(st.GetHistory())-1].GetFrom()
		}
		if last != want.from || !strings.Contains(st.GetMessage(), want.msg) || j.GetInventory() != nil || j.GetIdentifiers().GetPrimaryId() != "" {
			t.Errorf("%s: failed after %s, %q, inventory %v, ARK %q; want it failed after %s, saying %q, nothing stored",
				title, queue.JobStateName(last), st.GetMessage(), j.GetInventory(), j.GetIdentifiers().GetPrimaryId(), queue.JobStateName(want.from), want.msg)
		}
		bid := j.GetBid()
		waitBatch(t, r.q, bid, queue.BatchFailed)
		if report := r.report(t, bid); !strings.Contains(report, want.msg) {
			t.Errorf("%s: the report does not say %q:\n%s", title, want.msg, report)
		}
	}
}

// builtinRecord is what the built-in inventory recorded of the job's
// version: file name → digest.
func (r *run) builtinRecord(t *testing.T, j *v1.Job) map[string]string {
	t.Helper()
	db, err := sql.Open("sqlite", r.st.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT f.name, f.digest FROM files f JOIN versions v ON f.ark = v.ark AND f.version = v.number WHERE v.jid = ?`, j.GetId())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, digest string
		if err := rows.Scan(&name, &digest); err != nil {
			t.Fatal(err)
		}
		out[name] = digest
	}
	return out
}

// leaseAndRecord is an Inventory client: it leases jobs over
// RecordingService, in the order it gets them, until it has recorded j's:
// each version's manifest read at the lease's fetch_url, then the lease
// completed. It returns j's files (name → digest).
func (r *run) leaseAndRecord(t *testing.T, j *v1.Job) map[string]string {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
	deadline := time.Now().Add(2 * time.Minute)
	for r.leased[j.GetId()] == nil && time.Now().Before(deadline) {
		l, err := r.rec.Lease(ctx, &v1.LeaseRequest{Wait: durationpb.New(10 * time.Second), LeaseDuration: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if l.GetLeaseId() == "" {
			continue
		}
		if l.GetFetchUrl() == "" || l.GetFetchExpires() == nil {
			t.Fatalf("lease of %s: fetch_url %q, expiring %v: want a presigned URL", l.GetJobId(), l.GetFetchUrl(), l.GetFetchExpires())
		}
		resp, err := http.Get(l.GetFetchUrl())
		if err != nil {
			t.Fatal(err)
		}
		m, err := checkm.Parse(resp.Body, checkm.Limits{})
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the manifest at the fetch_url: %s, %v", resp.Status, err)
		}
		files := map[string]string{}
		for _, e := range m.Entries {
			files[e.FileName] = e.HashValue
		}
		if r.leased == nil {
			r.leased = map[string]map[string]string{}
		}
		r.leased[l.GetJobId()] = files
		if _, err := r.rec.Complete(ctx, &v1.CompleteRequest{LeaseId: l.GetLeaseId()}); err != nil {
			t.Fatal(err)
		}
	}
	if r.leased[j.GetId()] == nil {
		t.Fatalf("job %s was never leased", j.GetId())
	}
	return maps.Clone(r.leased[j.GetId()])
}

// callbackBody is what the notifier posts.
type callbackBody struct {
	JobID       string `json:"jid"`
	ManifestURL string `json:"manifest_url"`
}

// callback waits for the job's callback.
func (r *run) callback(t *testing.T, jid string) callbackBody {
	t.Helper()
	var b callbackBody
	waittest.True(t, time.Minute, "a callback of "+jid, func() bool {
		return slices.ContainsFunc(r.dep.Callbacks(), func(c depositor.Callback) bool {
			return c.Key == jid && json.Unmarshal(c.Body, &b) == nil
		})
	})
	return b
}

// report is the batch's report as mailed (to the outbox), decoded.
func (r *run) report(t *testing.T, bid string) string {
	t.Helper()
	var paths []string
	waittest.True(t, time.Minute, "a report of "+bid, func() bool {
		paths, _ = filepath.Glob(filepath.Join(r.st.OutboxDir, bid+"*"))
		return len(paths) > 0
	})
	text, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(readFile(t, paths[0]))))
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

// batchJobs waits for a batch's n jobs to be made and returns them.
func (r *run) batchJobs(t *testing.T, bid string, n int) []*v1.Job {
	t.Helper()
	var ids []string
	waittest.Until(t, time.Minute, func() error {
		folders, err := jobs.NewReader(r.q).BatchJobIDs(context.Background(), bid)
		if err != nil {
			t.Fatal(err)
		}
		// A job moved between two folders' readings is in both.
		ids = slices.Concat(slices.Collect(maps.Values(folders))...)
		slices.Sort(ids)
		if ids = slices.Compact(ids); len(ids) < n {
			return fmt.Errorf("batch %s has %d jobs, want %d", bid, len(ids), n)
		}
		return nil
	})
	var out []*v1.Job
	for _, jid := range ids {
		j, err := jobs.NewReader(r.q).GetJob(context.Background(), jid)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	if len(out) != n {
		t.Fatalf("batch %s has %d jobs, want %d", bid, len(out), n)
	}
	return out
}

// waitJob waits for a job to reach state and returns it.
func (r *run) waitJob(t *testing.T, jid string, state queue.JobState) *v1.Job {
	t.Helper()
	var j *v1.Job
	waittest.Until(t, 3*time.Minute, func() error {
		var err error
		if j, err = jobs.NewReader(r.q).GetJob(context.Background(), jid); err == nil && j.GetStatus().GetStatus() == state {
			return nil
		}
		if j.GetStatus().GetStatus() == queue.Failed && state != queue.Failed {
			t.Fatalf("job %s failed: %s", jid, j.GetStatus().GetMessage())
		}
		return fmt.Errorf("job %s is not %s: %v (%v)", jid, queue.JobStateName(state), j.GetStatus(), err)
	})
	return j
}

// waitBatch waits for a batch to reach one of states.
func waitBatch(t *testing.T, q *session.Session, bid string, states ...queue.BatchState) *v1.Batch {
	t.Helper()
	var b *v1.Batch
	waittest.Until(t, 3*time.Minute, func() error {
		var err error
		if b, err = batches.New(q).GetBatch(context.Background(), bid); err == nil && slices.Contains(states, b.GetStatus().GetStatus()) {
			return nil
		}
		return fmt.Errorf("batch %s is not in %v: %v (%v)", bid, states, b.GetStatus(), err)
	})
	return b
}

func zipOf(t *testing.T, files map[string]string) []byte {
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
	return b.Bytes()
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// path is the last segment of a URL's path, decoded.
func path(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Path[strings.LastIndexByte(u.Path, '/')+1:]
}

func sha256hex(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
