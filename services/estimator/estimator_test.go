package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
)

// depositor is a depositor's web server on loopback: /sized/N answers with
// a Content-Length of N, /unsized with none (a chunked answer), /status/C
// with HTTP C, /manifests/NAME with a manifest the test put there. It
// counts requests by method and path.
type depositor struct {
	*httptest.Server
	mu        sync.Mutex
	manifests map[string][]byte
	requests  map[string]int // "HEAD /sized/10" → count
}

func newDepositor(t *testing.T) *depositor {
	d := &depositor{manifests: map[string][]byte{}, requests: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/sized/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		if r.Method == http.MethodGet {
			w.Write(bytes.Repeat([]byte("x"), n))
		}
	})
	mux.HandleFunc("/unsized/", func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // headers go out before the length is known
		if r.Method == http.MethodGet {
			w.Write([]byte("some bytes"))
		}
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
	})
	mux.HandleFunc("/manifests/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		data, ok := d.manifests[r.PathValue("name")]
		d.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	})
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.requests[r.Method+" "+r.URL.Path]++
		d.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *depositor) count(methodPath string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests[methodPath]
}

// putManifest serves a manifest of entries at /manifests/name and returns
// its URL.
func (d *depositor) putManifest(t *testing.T, name, profile string, entries ...checkm.Entry) string {
	t.Helper()
	var b bytes.Buffer
	if err := checkm.Write(&b, profile, nil, entries); err != nil {
		t.Fatal(err)
	}
	return d.putRaw(name, b.Bytes())
}

func (d *depositor) putRaw(name string, data []byte) string {
	d.mu.Lock()
	d.manifests[name] = data
	d.mu.Unlock()
	return d.URL + "/manifests/" + name
}

// objectJob is a job whose files the batcher already listed.
func objectJob(files ...*v1.ManifestFile) batches.NewJob {
	return batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: "http://example.org/object.checkm",
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}, Manifest: &v1.Manifest{Files: files}}
}

func file(url string, size int64) *v1.ManifestFile {
	return &v1.ManifestFile{Url: url, Size: size, Name: url[strings.LastIndexByte(url, '/')+1:]}
}

func testEstimator(t *testing.T, policy fetch.Policy) *Estimator {
	e := &Estimator{
		Client:          fetch.New(policy),
		Policy:          policy,
		Limits:          checkm.Limits{MaxBytes: 1 << 20},
		Retry:           retry.Policy{Attempts: 3, Backoff: 10 * time.Millisecond},
		Concurrency:     4,
		Budget:          time.Hour,
		HostFailures:    3,
		UnsizedPenalty:  10,
		LargeJobBytes:   1 << 20,
		LargeJobPenalty: 20,
		Logger:          slog.Default(),
	}
	var err error
	if e.WorkRoot, err = workdir.At(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	return e
}

// startEstimator runs both of the estimator's runners on q until the test ends.
func startEstimator(t *testing.T, q *session.Session, e *Estimator) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var runners []*stage.Runner
	for _, cfg := range e.StageConfigs() {
		cfg.Service = "estimator"
		r, err := stage.New(jobs.New(q), cfg)
		if err != nil {
			t.Fatal(err)
		}
		go r.Run(ctx)
		runners = append(runners, r)
	}
	t.Cleanup(func() {
		cancel()
		for _, r := range runners {
			<-r.Done()
		}
	})
}

// entryPriority is the priority in the job's state entry: the one that
// orders it.
func entryPriority(t *testing.T, q *session.Session, state queue.JobState, jid string) int32 {
	t.Helper()
	jobs, _, err := jobs.NewReader(q).ListJobs(context.Background(), jobs.JobFilter{State: state})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.GetId() == jid {
			return j.GetPriority()
		}
	}
	t.Fatalf("%s not listed in %s", jid, queue.JobStateName(state))
	return 0
}

func TestEstimateSizesEveryFileAndLowersThePriorityOfUnsizedAndLargeJobs(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	for _, tc := range []struct {
		name      string
		priority  int32
		files     []*v1.ManifestFile
		wantSpace int64
		wantPrio  int32
		wantMsg   string
	}{
		{"sizes announced by the server are summed", 5,
			[]*v1.ManifestFile{file(d.URL+"/sized/100", -1), file(d.URL+"/sized/2000", -1), file(d.URL+"/sized/30000", -1)},
			32100, 5, "estimated 32100 bytes for 3 files"},
		{"a file without Content-Length counts 0 and lowers the priority", 5,
			[]*v1.ManifestFile{file(d.URL+"/sized/100", -1), file(d.URL+"/unsized/a.txt", -1)},
			100, 15, "estimated 100 bytes for 2 files; priority 5 → 15 (1 of 2 files without a usable size)"},
		{"the declared size stands in when the server gives none", 5,
			[]*v1.ManifestFile{file(d.URL+"/unsized/b.txt", 500), file(d.URL+"/status/404", 7)},
			507, 5, "estimated 507 bytes for 2 files"},
		{"a file whose HEAD fails is unsized", 5,
			[]*v1.ManifestFile{file(d.URL+"/status/500", -1)},
			0, 15, "priority 5 → 15 (1 of 1 files without a usable size)"},
		{"a large job is lowered", 5,
			[]*v1.ManifestFile{file(d.URL+"/sized/600000", -1), file(d.URL+"/sized/600000", -1)},
			1200000, 25, "priority 5 → 25 (larger than 1048576 bytes)"},
		{"penalties stop at 99", 90,
			[]*v1.ManifestFile{file(d.URL+"/sized/1048577", -1), file(d.URL+"/unsized/c.txt", -1)},
			1048577, 99, "priority 90 → 99 (1 of 2 files without a usable size, larger than 1048576 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := objectJob(tc.files...)
			j.Priority = tc.priority
			jid := queuetest.Spawn(t, q, j, queue.Pending)
			job := queuetest.WaitState(t, q, jid, queue.Provisioning)
			if job.GetSpaceNeeded() != tc.wantSpace {
				t.Errorf("space_needed %d, want %d", job.GetSpaceNeeded(), tc.wantSpace)
			}
			if got := entryPriority(t, q, queue.Provisioning, jid); got != tc.wantPrio {
				t.Errorf("priority in the state entry %d, want %d", got, tc.wantPrio)
			}
			if job.GetPriority() != tc.wantPrio {
				t.Errorf("priority node %d, want %d", job.GetPriority(), tc.wantPrio)
			}
			if !strings.Contains(job.GetStatus().GetMessage(), tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", job.GetStatus().GetMessage(), tc.wantMsg)
			}
		})
	}
	if n := d.count("HEAD /sized/100"); n != 2 {
		t.Errorf("HEAD /sized/100 sent %d times, want once per job that lists it (2)", n)
	}
	if n := d.count("GET /sized/600000"); n != 0 {
		t.Errorf("the estimator downloaded a file (%d GETs): it should only ask for headers", n)
	}
}

func TestPendingJobGetsItsObjectManifestFetchedAndKept(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	url := d.putManifest(t, "object1.checkm", checkm.ProfileObject,
		checkm.Entry{FileURL: d.URL + "/sized/11", HashAlgorithm: "SHA-256", HashValue: strings.Repeat("AB", 32), FileSize: 11, FileName: "data/a.txt"},
		checkm.Entry{FileURL: d.URL + "/sized/22", FileSize: -1, FileName: "b.txt"})
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)

	job := queuetest.WaitState(t, q, jid, queue.Provisioning)
	m, err := jobs.NewReader(q).GetManifest(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	want := []*v1.ManifestFile{
		{Url: d.URL + "/sized/11", HashAlgorithm: "sha256", HashValue: strings.Repeat("ab", 32), Size: 11, Name: "data/a.txt"},
		{Url: d.URL + "/sized/22", Size: -1, Name: "b.txt"},
	}
	if got := m.GetFiles(); len(got) != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("kept file list %v, want %v", got, want)
	}
	if job.GetSpaceNeeded() != 33 {
		t.Errorf("space_needed %d, want 33", job.GetSpaceNeeded())
	}
	if n := d.count("GET /manifests/object1.checkm"); n != 1 {
		t.Errorf("manifest fetched %d times, want 1", n)
	}
}

// TestAFileListTooLongForTheJobsNodeIsKeptInItsWorkingFolder: an object
// manifest whose list would take more than a job's manifest node may hold
// is kept in the job's working folder, the node naming it with its digest:
// ZooKeeper holds nothing per file. Estimating reads it back and asks for
// every file; a list changed under the job fails it, saying so.
func TestAFileListTooLongForTheJobsNodeIsKeptInItsWorkingFolder(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()})
	startEstimator(t, q, e)
	const n = 300
	var entries []checkm.Entry
	for i := range n {
		entries = append(entries, checkm.Entry{FileURL: fmt.Sprintf("%s/sized/%d", d.URL, i), FileSize: -1, FileName: fmt.Sprintf("data/file-%04d.txt", i)})
	}
	url := d.putManifest(t, "big.checkm", checkm.ProfileObject, entries...)
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)

	job := queuetest.WaitState(t, q, jid, queue.Provisioning)
	if want := int64(n * (n - 1) / 2); job.GetSpaceNeeded() != want {
		t.Errorf("space_needed %d, want %d (every file sized)", job.GetSpaceNeeded(), want)
	}
	node, err := jobs.NewReader(q).GetManifest(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	if len(node.GetFiles()) != 0 || node.GetKept().GetFiles() != n || node.GetKept().GetName() != workdir.FileListName {
		t.Fatalf("manifest node lists %d files and keeps %v; want none listed, %d kept in %s", len(node.GetFiles()), node.GetKept(), n, workdir.FileListName)
	}
	if size := len(queue.EncodeManifest(node)); size > 200 {
		t.Errorf("the manifest node takes %d bytes: more than a reference", size)
	}
	wd := e.WorkRoot.Job(job.GetBid(), jid)
	files, err := e.WorkRoot.FileList(wd, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(files.GetFiles()) != n || files.GetFiles()[n-1].GetName() != fmt.Sprintf("data/file-%04d.txt", n-1) {
		t.Errorf("kept list has %d files (last %v); want %d, in the manifest's order", len(files.GetFiles()), files.GetFiles()[len(files.GetFiles())-1], n)
	}
	if got := d.count("HEAD /sized/299"); got != 1 {
		t.Errorf("HEAD /sized/299 sent %d times, want 1", got)
	}
	if got := d.count("GET /manifests/big.checkm"); got != 1 {
		t.Errorf("manifest fetched %d times, want 1", got)
	}

	// The list in the working folder changed under a job: Estimating
	// fails it rather than sizing other files.
	wd2 := filepath.Join(e.WorkRoot.Dir(), "bid-other", "job")
	ref, err := e.WorkRoot.KeepFileList(wd2, files)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.WorkRoot.KeepFileList(wd2, &v1.Manifest{Files: files.GetFiles()[1:]}); err != nil {
		t.Fatal(err)
	}
	other := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, WorkingDir: wd2,
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}, Manifest: ref}, queue.Estimating)
	failed := queuetest.WaitState(t, q, other, queue.Failed)
	if msg := failed.GetStatus().GetMessage(); !strings.Contains(msg, "file list of the job unreadable") || !strings.Contains(msg, "not the one the job's manifest names") {
		t.Errorf("message %q; want it to say the kept list is not the one named", msg)
	}
}

func TestPendingJobFailsWithAMessageSayingWhatIsWrong(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	corrupt := d.putRaw("corrupt.checkm", []byte("#%checkm_0.7\n#%profile | "+checkm.ProfileObject+"\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue\n"+
		d.URL+"/sized/1 | md5 | 0123456789abcdef0123456789abcdef\n"+
		d.URL+"/sized/2 | crc32 | 01234567\n"))
	batch := d.putManifest(t, "batch.checkm", checkm.ProfileBatch, checkm.Entry{FileURL: d.URL + "/manifests/corrupt.checkm", FileSize: -1})
	for _, tc := range []struct {
		name, url string
		want      string
		requests  int
	}{
		{"corrupt manifest names the URL and the line", corrupt,
			"manifest " + corrupt + ": line 5: unknown hash algorithm \"crc32\" (want md5, sha1, sha256 or sha512)", 1},
		{"a batch manifest is not an object manifest", batch,
			"manifest " + batch + " declares profile " + checkm.ProfileBatch + ": a batch manifest, not the object manifest its job needs", 1},
		{"a missing manifest is not fetched again", d.URL + "/manifests/missing.checkm",
			"fetching the manifest failed: GET " + d.URL + "/manifests/missing.checkm: HTTP 404 Not Found (attempt 1 of 3)", 1},
		{"a server in trouble is tried a bounded number of times", d.URL + "/status/503",
			"fetching the manifest failed: GET " + d.URL + "/status/503: HTTP 503 Service Unavailable (attempt 3 of 3)", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: tc.url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)
			job := queuetest.WaitState(t, q, jid, queue.Failed)
			if got := job.GetStatus().GetMessage(); got != tc.want {
				t.Errorf("message\n %q\nwant\n %q", got, tc.want)
			}
			if job.GetStatus().GetLastSuccessfulStatus() != v1.JobState_JOB_STATE_UNSPECIFIED {
				t.Errorf("last_successful_status %v, want null: the job never got past Pending", job.GetStatus().GetLastSuccessfulStatus())
			}
			path := tc.url[len(d.URL):]
			if n := d.count("GET " + path); n != tc.requests {
				t.Errorf("GET %s sent %d times, want %d", path, n, tc.requests)
			}
			if m, err := jobs.NewReader(q).GetManifest(context.Background(), jid); err != nil || m != nil {
				t.Errorf("failed job kept a file list: %v, %v", m, err)
			}
		})
	}
}

func TestManifestOnAnInternalAddressFailsTheJobWithoutARequestByDefault(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	startEstimator(t, q, testEstimator(t, fetch.Policy{AllowSetting: "INGESTQ_FETCH_ALLOW"}))
	url := d.putManifest(t, "object.checkm", checkm.ProfileObject, checkm.Entry{FileURL: d.URL + "/sized/1", FileSize: -1})
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)

	job := queuetest.WaitState(t, q, jid, queue.Failed)
	msg := job.GetStatus().GetMessage()
	if !strings.Contains(msg, url) || !strings.Contains(msg, "address denied by policy: 127.0.0.1 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)") ||
		!strings.Contains(msg, "attempt 1 of 3") {
		t.Errorf("message %q: want the URL, the denial naming the setting that allows it, and no second attempt", msg)
	}
	if n := d.count("GET /manifests/object.checkm"); n != 0 {
		t.Errorf("the denied server got %d requests", n)
	}
}

func TestManifestRowsOnInternalAddressesFailTheJobNamingTheLineUnlessAllowed(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	// Only the depositor's own address is allowed, as an operator would
	// allow one server: the rest of the internal ranges stay denied.
	allow, err := fetch.ParseAllow("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: allow, AllowSetting: "INGESTQ_FETCH_ALLOW"}))
	for _, tc := range []struct{ row, why string }{
		{"http://127.0.0.2/a.bin", "127.0.0.2 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)"},
		{"http://10.0.0.7/a.bin", "10.0.0.7 is in 10.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=10.0.0.0/8 allows it)"},
		{"http://[fd00::7]/a.bin", "fd00::7 is in fc00::/7, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=fc00::/7 allows it)"},
		{"http://169.254.169.254/a.bin", "169.254.169.254 is in 169.254.0.0/16"},
	} {
		t.Run(tc.row, func(t *testing.T) {
			name := strings.NewReplacer("/", "_", ":", "_").Replace(tc.row) + ".checkm"
			url := d.putManifest(t, name, checkm.ProfileObject,
				checkm.Entry{FileURL: d.URL + "/sized/1", FileSize: -1, FileName: "ok.bin"},
				checkm.Entry{FileURL: tc.row, FileSize: -1, FileName: "a.bin"})
			jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)
			msg := queuetest.WaitState(t, q, jid, queue.Failed).GetStatus().GetMessage()
			if !strings.Contains(msg, "manifest "+url+": line ") || !strings.Contains(msg, "fetch: "+tc.row+": address denied by policy: "+tc.why) {
				t.Errorf("message %q: want the manifest, the line and %q", msg, tc.why)
			}
		})
	}
	// The allowed address's rows pass: a manifest of them is estimated.
	url := d.putManifest(t, "allowed.checkm", checkm.ProfileObject, checkm.Entry{FileURL: d.URL + "/sized/5", FileSize: -1, FileName: "ok.bin"})
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)
	if job := queuetest.WaitState(t, q, jid, queue.Provisioning); job.GetSpaceNeeded() != 5 {
		t.Errorf("space_needed %d, want 5", job.GetSpaceNeeded())
	}
}

func TestJobOfAHeldCollectionGoesToHeld(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	if err := admin.New(q).Queue.HoldCollection(context.Background(), "demo"); err != nil {
		t.Fatal(err)
	}
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	jid := queuetest.Spawn(t, q, objectJob(file(d.URL+"/sized/1", -1)), queue.Pending)

	job := queuetest.WaitState(t, q, jid, queue.Held)
	if job.GetStatus().GetMessage() != "collection demo is held" {
		t.Errorf("message %q", job.GetStatus().GetMessage())
	}
	if n := d.count("HEAD /sized/1"); n != 0 {
		t.Errorf("a held job was estimated (%d HEADs)", n)
	}
}

func TestFileAndContainerJobsWithoutAFileListGetTheirPayload(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: d.URL + "/sized/42?x=1", PayloadType: v1.PayloadType_PAYLOAD_TYPE_CONTAINER}}, queue.Pending)

	job := queuetest.WaitState(t, q, jid, queue.Provisioning)
	m, err := jobs.NewReader(q).GetManifest(context.Background(), jid)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]*v1.ManifestFile{{Url: d.URL + "/sized/42?x=1", Size: -1, Name: "42"}}); fmt.Sprint(m.GetFiles()) != want {
		t.Errorf("file list %v, want %v", m.GetFiles(), want)
	}
	if job.GetSpaceNeeded() != 42 {
		t.Errorf("space_needed %d, want 42", job.GetSpaceNeeded())
	}
}

func TestSettingsThatCannotWorkAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Estimator)
		want   string
	}{
		{"no attempt", func(e *Estimator) { e.Retry.Attempts = 0 }, "manifest attempts 0 must be at least 1"},
		{"no concurrency", func(e *Estimator) { e.Concurrency = 0 }, "estimate concurrency 0 must be at least 1"},
		{"penalty past the last priority", func(e *Estimator) { e.UnsizedPenalty = 100 }, "unsized penalty 100 must be in 0..99"},
		{"negative penalty", func(e *Estimator) { e.LargeJobPenalty = -1 }, "large job penalty -1 must be in 0..99"},
		{"no work root", func(e *Estimator) { e.WorkRoot = workdir.Root{} }, "estimator: no work root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()})
			tc.change(e)
			if err := e.Validate(); err == nil || err.Error() != tc.want {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestARequeueToEstimatingReadsTheCorrectedObjectManifest: a job whose
// object manifest declared a wrong digest failed; the depositor corrects
// the manifest, an operator requeues the job to Estimating, and the
// estimator reads the manifest again: the job goes on with the corrected
// digest, and its history says the file list was dropped and which
// manifest was read, by its sha256.
func TestARequeueToEstimatingReadsTheCorrectedObjectManifest(t *testing.T) {
	d := newDepositor(t)
	q := queuetest.Connect(t, zktest.Root(t))
	allow, err := fetch.ParseAllow("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: allow}))
	entry := checkm.Entry{FileURL: d.URL + "/sized/5", HashAlgorithm: "md5", HashValue: "00000000000000000000000000000000", FileSize: 5, FileName: "a.txt"}
	url := d.putManifest(t, "object.checkm", checkm.ProfileObject, entry)
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url,
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)
	queuetest.WaitState(t, q, jid, queue.Provisioning)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Downloading})
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Failed, Message: "a.txt: md5 digest mismatch"})

	entry.HashValue = "d41d8cd98f00b204e9800998ecf8427e"
	fixed := d.putManifest(t, "object.checkm", checkm.ProfileObject, entry)
	var b bytes.Buffer
	if err := checkm.Write(&b, checkm.ProfileObject, nil, []checkm.Entry{entry}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b.Bytes())
	if _, err := admin.New(q).Jobs.Requeue(context.Background(), jid, queue.Estimating, ""); err != nil {
		t.Fatal(err)
	}
	job := queuetest.WaitState(t, q, jid, queue.Provisioning)
	m, err := jobs.NewReader(q).GetManifest(context.Background(), jid)
	if err != nil || len(m.GetFiles()) != 1 || m.GetFiles()[0].GetHashValue() != entry.HashValue {
		t.Fatalf("file list after the requeue: %v (%v), want the corrected digest", m, err)
	}
	hist := job.GetStatus().GetHistory()
	requeued, read := hist[len(hist)-2], hist[len(hist)-1]
	if requeued.GetTo() != queue.Estimating ||
		requeued.GetMessage() != "requeued by an operator to Estimating; its file list is dropped: Estimating reads the object manifest "+fixed+" again" {
		t.Errorf("the requeue's history entry: %v", requeued)
	}
	if want := fmt.Sprintf("object manifest %s read (sha256 %s): 1 files; estimated 5 bytes for 1 files", fixed, hex.EncodeToString(sum[:])); read.GetTo() != queue.Provisioning || read.GetMessage() != want {
		t.Errorf("the estimate's history entry: %v\nwant the message %q", read, want)
	}
	if n := d.count("GET /manifests/object.checkm"); n != 2 {
		t.Errorf("the manifest was fetched %d times, want twice (first, then after the requeue)", n)
	}
}
