package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/downloader/internal/download"
	"github.com/ingestq/ingestq/services/downloader/internal/unpack"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/workdir"
	"github.com/ingestq/ingestq/shared/zktest"
)

// depositor is a depositor's server on loopback: /files/NAME serves what the
// test put there, /flaky/NAME fails twice with 503 first, /missing/ is 404.
// It counts requests per path.
type depositor struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	count map[string]int
	// slow, when set, is called for the first request of a path instead of
	// serving it (the test streams as it likes).
	slow func(w http.ResponseWriter, r *http.Request, content []byte)
}

func newDepositor(t *testing.T) *depositor {
	d := &depositor{files: map[string][]byte{}, count: map[string]int{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.count[r.URL.Path]++
		n := d.count[r.URL.Path]
		content, ok := d.files[r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]]
		slow := d.slow
		d.mu.Unlock()
		switch {
		case !ok || strings.HasPrefix(r.URL.Path, "/missing/"):
			http.NotFound(w, r)
		case strings.HasPrefix(r.URL.Path, "/flaky/") && n <= 2:
			w.WriteHeader(http.StatusServiceUnavailable)
		case strings.HasPrefix(r.URL.Path, "/slow/") && n == 1 && slow != nil:
			slow(w, r, content)
		default:
			w.Header().Set("Content-Length", strconv.Itoa(len(content)))
			w.Write(content)
		}
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *depositor) put(name string, content []byte) {
	d.mu.Lock()
	d.files[name] = content
	d.mu.Unlock()
}

func (d *depositor) requests(p string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.count[p]
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// declared is a file list entry with the digest and size of content.
func declared(url, name string, content []byte) *v1.ManifestFile {
	return &v1.ManifestFile{Url: url, Name: name, HashAlgorithm: "sha256", HashValue: sha256Hex(content), Size: int64(len(content))}
}

// job is one job a test needs in Downloading.
type job struct {
	payload    v1.PayloadType // default file list of an object manifest
	workingDir string         // default <work root>/<bid>/<jid>, as the batcher makes it
	files      []*v1.ManifestFile
}

// createJobs stands in for the batcher and the stages before the
// downloader: the jobs are created with their file lists and moved on to
// Downloading. It returns their ids and working directories.
func createJobs(t testing.TB, q *session.Session, workRoot string, specs ...job) ([]string, []string) {
	t.Helper()
	news := make([]batches.NewJob, len(specs))
	for i, j := range specs {
		payload := j.payload
		if payload == 0 {
			payload = v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST
		}
		news[i] = batches.NewJob{Priority: 5, Manifest: &v1.Manifest{Files: j.files}, Configuration: &v1.JobConfiguration{
			PayloadUrl: "http://example.org/object", PayloadType: payload, WorkingDir: j.workingDir}}
		if j.workingDir == "" {
			news[i].WorkRoot = workRoot
		}
	}
	jids := queuetest.SpawnN(t, q, news, queue.Downloading)
	dirs := make([]string, len(jids))
	for i, jid := range jids {
		j, err := jobs.NewReader(q).GetJob(context.Background(), jid)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = j.GetConfiguration().GetWorkingDir()
	}
	return jids, dirs
}

func testDownloader(workRoot string, policy fetch.Policy) *Downloader {
	return &Downloader{
		Files: &download.Fetcher{Client: fetch.New(policy), Retry: retry.Policy{Attempts: 4, Backoff: 10 * time.Millisecond,
			Max: 50 * time.Millisecond, Jitter: 0.5}, MaxBytes: 1 << 20, TempDir: stagingDir},
		WorkRoot:    mustRoot(workRoot),
		Concurrency: 3,
		PerHost:     4, // the stage's default concurrency: no host waits
		Unpack:      unpack.Limits{MaxEntries: 100, MaxBytes: 1 << 20},
		Logger:      slog.Default(),
	}
}

// mustRoot is dir as a work root; tests give absolute ones.
func mustRoot(dir string) workdir.Root {
	root, err := workdir.At(dir)
	if err != nil {
		panic(err)
	}
	return root
}

// startDownloader runs a downloader replica on q until the test ends.
func startDownloader(t *testing.T, q *session.Session, d *Downloader) {
	t.Helper()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := d.StageConfig()
	cfg.Service = "downloader"
	r, err := stage.New(jobs.New(q), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go r.Run(ctx)
	t.Cleanup(func() {
		cancel()
		<-r.Done()
	})
}

// producer lists the files under dir/producer with their contents.
func producer(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	base := filepath.Join(dir, producerDir)
	filepath.WalkDir(base, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(base, p)
		out[rel] = string(data)
		return err
	})
	return out
}

func TestEveryFileLandsInProducerAndTheRealSizeIsRecorded(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	a, b, c := []byte("alpha\n"), bytes.Repeat([]byte("beta"), 1000), []byte("gamma, size undeclared")
	d.put("a.txt", a)
	d.put("b.bin", b)
	d.put("c.txt", c)
	undeclared := &v1.ManifestFile{Url: d.URL + "/files/c.txt", Name: "deep/er/c.txt", Size: -1}
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{
		declared(d.URL+"/files/a.txt", "a.txt", a), declared(d.URL+"/flaky/b.bin", "data/b.bin", b), undeclared}})
	startDownloader(t, q, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))

	j := queuetest.WaitState(t, q, jids[0], queue.Processing)
	want := map[string]string{"a.txt": string(a), "data/b.bin": string(b), "deep/er/c.txt": string(c)}
	if got := producer(t, dirs[0]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("producer/ holds %v, want %v", got, want)
	}
	if total := int64(len(a) + len(b) + len(c)); j.GetSpaceNeeded() != total {
		t.Errorf("space_needed %d, want the real %d", j.GetSpaceNeeded(), total)
	}
	st := j.GetStatus()
	if st.GetLastSuccessfulStatus() != queue.Downloading || st.GetMessage() != fmt.Sprintf("downloaded 3 files, %d bytes", len(a)+len(b)+len(c)) {
		t.Errorf("status %v", st)
	}
	if n := d.requests("/flaky/b.bin"); n != 3 {
		t.Errorf("the flaky file was asked for %d times, want 3 (two failures, then the file)", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(dirs[0], stagingDir)); len(entries) != 0 {
		t.Errorf("partial files left: %v", entries)
	}
}

// TestAFailedDownloadFailsTheJobThroughTheQueue: a file that fails fails
// its job in the queue, keeping the last state it completed, and writes
// nothing. The failures themselves and their messages are the handler's
// (TestFailuresFailTheJobNamingTheFileTheURLAndTheReason).
func TestAFailedDownloadFailsTheJobThroughTheQueue(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	content := []byte("the real content")
	d.put("a.txt", content)
	startDownloader(t, q, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "a.txt", Size: 3}}})
	j := queuetest.WaitState(t, q, jids[0], queue.Failed)
	if want := "a.txt (" + d.URL + "/files/a.txt): size expected 3 bytes, got 16"; !strings.HasPrefix(j.GetStatus().GetMessage(), want) {
		t.Errorf("message\n %q\nwant\n %q", j.GetStatus().GetMessage(), want)
	}
	if j.GetStatus().GetLastSuccessfulStatus() != queue.Provisioning {
		t.Errorf("last_successful_status %v, want Provisioning (kept on failure)", j.GetStatus().GetLastSuccessfulStatus())
	}
	if got := producer(t, dirs[0]); len(got) != 0 {
		t.Errorf("producer/ holds %v after the failure", got)
	}
}

func TestACompleteFileIsNotFetchedAgainAfterARestart(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	a, b := []byte("already here"), []byte("still to fetch")
	d.put("a.txt", a)
	d.put("b.txt", b)
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{declared(d.URL+"/files/a.txt", "a.txt", a), declared(d.URL+"/files/b.txt", "b.txt", b)}})
	// An earlier attempt completed a.txt, and left a partial b.txt.
	os.MkdirAll(filepath.Join(dirs[0], producerDir), 0o755)
	os.WriteFile(filepath.Join(dirs[0], producerDir, "a.txt"), a, 0o644)
	os.MkdirAll(filepath.Join(dirs[0], stagingDir), 0o755)
	os.WriteFile(filepath.Join(dirs[0], stagingDir, "x.part"), b[:4], 0o644) // no state: not resumed
	startDownloader(t, q, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))

	j := queuetest.WaitState(t, q, jids[0], queue.Processing)
	if d.requests("/files/a.txt") != 0 || d.requests("/files/b.txt") != 1 {
		t.Errorf("requests: a.txt %d, b.txt %d; want 0 and 1", d.requests("/files/a.txt"), d.requests("/files/b.txt"))
	}
	if j.GetSpaceNeeded() != int64(len(a)+len(b)) || !strings.Contains(j.GetStatus().GetMessage(), "(1 already complete from an earlier attempt)") {
		t.Errorf("space_needed %d, message %q", j.GetSpaceNeeded(), j.GetStatus().GetMessage())
	}
	if entries, _ := os.ReadDir(filepath.Join(dirs[0], stagingDir)); len(entries) != 0 {
		t.Errorf("the dead attempt's partial file is still there: %v", entries)
	}
}

func zipBytes(t *testing.T, files map[string]string) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for name, body := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	zw.Close()
	return b.Bytes()
}

func tarGzBytes(t *testing.T, files map[string]string) []byte {
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Size: int64(len(body)), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return b.Bytes()
}

func TestContainersAreUnpackedIntoProducerAndRemoved(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	startDownloader(t, q, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	files := map[string]string{"a.txt": "alpha", "sub/b.txt": "beta beta"}
	for _, tc := range []struct {
		name, served string // the name misleads: the format comes from the bytes
		archive      []byte
		format       string
	}{
		{"zip", "payload.tar.gz", zipBytes(t, files), "zip"},
		{"tar.gz", "payload.zip", tarGzBytes(t, files), "tar.gz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.put(tc.served, tc.archive)
			url := d.URL + "/files/" + tc.served
			jids, dirs := createJobs(t, q, work, job{payload: v1.PayloadType_PAYLOAD_TYPE_CONTAINER, files: []*v1.ManifestFile{declared(url, tc.served, tc.archive)}})
			j := queuetest.WaitState(t, q, jids[0], queue.Processing)
			if got := producer(t, dirs[0]); fmt.Sprint(got) != fmt.Sprint(files) {
				t.Errorf("producer/ holds %v, want %v", got, files)
			}
			if _, err := os.Stat(filepath.Join(dirs[0], archivePath)); !os.IsNotExist(err) {
				t.Errorf("the archive was kept: %v", err)
			}
			if j.GetSpaceNeeded() != 14 {
				t.Errorf("space_needed %d, want the 14 bytes unpacked", j.GetSpaceNeeded())
			}
			if want := "unpacked " + tc.format + " container " + tc.served + ": 2 files, 0 folders, 14 bytes"; j.GetStatus().GetMessage() != want {
				t.Errorf("message %q, want %q", j.GetStatus().GetMessage(), want)
			}
		})
	}
}

func TestAHostileContainerFailsTheJobAndLeavesNothingOutside(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	startDownloader(t, q, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	slip := zipBytes(t, map[string]string{"../../evil.txt": "owned"})
	d.put("slip.zip", slip)
	url := d.URL + "/files/slip.zip"
	jids, dirs := createJobs(t, q, work, job{payload: v1.PayloadType_PAYLOAD_TYPE_CONTAINER, files: []*v1.ManifestFile{declared(url, "slip.zip", slip)}})

	msg := queuetest.WaitState(t, q, jids[0], queue.Failed).GetStatus().GetMessage()
	if want := `slip.zip (` + url + `): unpacking: entry "../../evil.txt": path would leave the directory: ".." segment`; msg != want {
		t.Errorf("message\n %q\nwant\n %q", msg, want)
	}
	for _, p := range []string{filepath.Join(dirs[0], "evil.txt"), filepath.Join(filepath.Dir(dirs[0]), "evil.txt"), filepath.Join(work, "evil.txt")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if got := producer(t, dirs[0]); len(got) != 0 {
		t.Errorf("producer/ of a refused container holds %v", got)
	}
}

func TestADownloaderKilledMidFileLeavesTheJobToAnotherReplica(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	root := zktest.Root(t)
	admin := queuetest.Connect(t, root)
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	d.put("big.bin", big)
	streaming := make(chan struct{})
	var once sync.Once
	d.slow = func(w http.ResponseWriter, r *http.Request, content []byte) {
		// The first replica gets the file slowly: a little, then a trickle
		// until it goes away.
		w.Header().Set("Content-Length", strconv.Itoa(len(content)))
		for off := 0; off < len(content) && r.Context().Err() == nil; off += 64 << 10 {
			w.Write(content[off : off+64<<10])
			w.(http.Flusher).Flush()
			once.Do(func() { close(streaming) })
			time.Sleep(50 * time.Millisecond) // a trickle: the server's slowness is the point
		}
	}
	url := d.URL + "/slow/big.bin"
	jids, dirs := createJobs(t, admin, work, job{files: []*v1.ManifestFile{declared(url, "big.bin", big)}})

	first := queuetest.Connect(t, root)
	startDownloader(t, first, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	select {
	case <-streaming:
	case <-time.After(30 * time.Second):
		t.Fatal("the first replica never started the download")
	}
	// The first replica dies mid-file: its session, and with it the job's
	// lock, is gone.
	first.Close()
	startDownloader(t, queuetest.Connect(t, root), testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))

	j := queuetest.WaitState(t, admin, jids[0], queue.Processing)
	got, err := os.ReadFile(filepath.Join(dirs[0], producerDir, "big.bin"))
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("big.bin: %d bytes, %v; want the whole %d", len(got), err, len(big))
	}
	if j.GetSpaceNeeded() != int64(len(big)) || j.GetStatus().GetRetryCount() != 0 {
		t.Errorf("job %v", j)
	}
	if n := d.requests("/slow/big.bin"); n != 2 {
		t.Errorf("%d requests for the file, want 2 (the dead replica's and the survivor's)", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(dirs[0], stagingDir)); len(entries) != 0 {
		t.Errorf("partial files left: %v", entries)
	}
}

func TestValidateRefusesUnusableSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Downloader)
		want   string
	}{
		{"no work root", func(d *Downloader) { d.WorkRoot = workdir.Root{} }, "no work root"},
		{"no concurrency", func(d *Downloader) { d.Concurrency = 0 }, "at least 1"},
		{"no job per host", func(d *Downloader) { d.PerHost = 0 }, "download jobs per host 0 must be at least 1"},
		{"negative sync linger", func(d *Downloader) { d.Durable.Linger = -time.Millisecond }, "sync linger -1ms must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDownloader(t.TempDir(), fetch.Policy{})
			tc.change(d)
			if err := d.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// hostServer is a depositor's server on a loopback address of its own:
// 127.0.0.2 is another host than 127.0.0.1. It counts the requests it is
// answering at once, and the most it ever answered at once.
type hostServer struct {
	*httptest.Server
	mu           sync.Mutex
	active, most int
}

func serveOn(t testing.TB, ip string, h http.HandlerFunc) *hostServer {
	t.Helper()
	s := &hostServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.active++
		s.most = max(s.most, s.active)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.active--
			s.mu.Unlock()
		}()
		h(w, r)
	}))
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *hostServer) load() (active, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active, s.most
}

// trickle answers with a declared size of size bytes, then sends one byte
// every interval, until the client goes away or stop is closed: a hostile
// depositor that never lets the idle timeout run out.
func trickle(size int, interval time.Duration, stop <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-stop:
				return
			case <-tick.C:
				w.Write([]byte("."))
				w.(http.Flusher).Flush()
			}
		}
	}
}

func TestAFileSlowerThanTheLeastRateFailsItsJobNamingTheFileAndTheRate(t *testing.T) {
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	content := bytes.Repeat([]byte("a normal pace "), 10_000)
	var slowRequests atomic.Int64
	slowFile := trickle(1<<20, 20*time.Millisecond, t.Context().Done())
	s := serveOn(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow.bin" {
			slowRequests.Add(1)
			slowFile(w, r)
			return
		}
		w.Write(content)
	})
	// Short windows stand for the real ones: a byte every 20ms is 50
	// bytes/s, and the idle timeout never runs out.
	policy := fetch.Policy{Allow: fetch.LoopbackRanges(), MinRate: 1000, RateWindow: 300 * time.Millisecond, IdleTimeout: time.Minute}
	startDownloader(t, q, testDownloader(work, policy))
	jids, dirs := createJobs(t, q, work,
		job{files: []*v1.ManifestFile{{Url: s.URL + "/slow.bin", Name: "slow.bin", Size: 1 << 20}}},
		job{files: []*v1.ManifestFile{declared(s.URL+"/fast.bin", "fast.bin", content)}})

	msg := queuetest.WaitState(t, q, jids[0], queue.Failed).GetStatus().GetMessage()
	want := fmt.Sprintf("slow.bin (%s/slow.bin): fetch: GET %s/slow.bin: reading the body: too slow: ", s.URL, s.URL)
	if !strings.HasPrefix(msg, want) || !strings.Contains(msg, " bytes/s over the last ") || !strings.HasSuffix(msg, "below the least allowed 1000 bytes/s (MinRate)") {
		t.Errorf("message\n %q\nwant it to start\n %q\nand give the rate measured and the least allowed", msg, want)
	}
	if n := slowRequests.Load(); n != 1 {
		t.Errorf("the slow file was asked for %d times, want 1 (a file too slow is not tried again)", n)
	}
	// A file at a normal pace passes under the same policy.
	queuetest.WaitState(t, q, jids[1], queue.Processing)
	if got := producer(t, dirs[1]); got["fast.bin"] != string(content) {
		t.Errorf("fast.bin: %d bytes, want %d", len(got["fast.bin"]), len(content))
	}
}

func TestASlowHostHoldsAtMostItsShareOfTheWorkersWhileAnotherHostsJobCompletes(t *testing.T) {
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	stop := make(chan struct{})
	slow := serveOn(t, "127.0.0.1", trickle(1<<20, 100*time.Millisecond, stop))
	small := bytes.Repeat([]byte("k"), 1024)
	other := serveOn(t, "127.0.0.2", func(w http.ResponseWriter, r *http.Request) { w.Write(small) })

	// No least rate: the share alone must let the other host's job through.
	d := testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges(), MinRate: -1, IdleTimeout: time.Minute})
	d.PerHost = 2 // of the stage's 4 workers
	var slowJobs []job
	for i := range 4 {
		name := fmt.Sprintf("slow%d.bin", i)
		slowJobs = append(slowJobs, job{files: []*v1.ManifestFile{{Url: slow.URL + "/" + name, Name: name, Size: 1 << 20}}})
	}
	slowIDs, _ := createJobs(t, q, work, slowJobs...)
	startDownloader(t, q, d)
	// Run before the downloader stops: the trickles end, and with them the
	// downloads that would otherwise hold the stage's drain.
	t.Cleanup(func() { close(stop) })

	queuetest.Eventually(t, "the slow host is sending files", func() bool {
		active, _ := slow.load()
		return active >= 2
	})
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{declared(other.URL+"/small.bin", "small.bin", small)}})
	queuetest.WaitState(t, q, jids[0], queue.Processing)
	if got := producer(t, dirs[0]); got["small.bin"] != string(small) {
		t.Errorf("small.bin: %q", got["small.bin"])
	}
	active, most := slow.load()
	if active != 2 || most != 2 {
		t.Errorf("the slow host sends %d files at once, %d at most; want 2 and 2 (its share of the workers)", active, most)
	}
	for _, jid := range slowIDs {
		if j, err := jobs.NewReader(q).GetJob(t.Context(), jid); err != nil || j.GetStatus().GetStatus() != queue.Downloading {
			t.Errorf("slow job %s: %v, %v; want it still Downloading (waiting or downloading)", jid, queue.JobStateName(j.GetStatus().GetStatus()), err)
		}
	}
}

func TestAJobThePeerLibraryMadeWithoutWorkingDirDownloadsUnderTheWorkRoot(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	peer := merrittzk.Connect(t, zktest.Servers(t), root)
	content := []byte("a letter\n")
	d.put("letter.txt", content)
	// createBatch, acquirePendingBatch and createJob as a Merritt producer
	// calls them: the configuration has no working_dir.
	if _, err := peer.CreateBatch(map[string]any{"batchID": "wd-uuid", "profile_name": "demo"}); err != nil {
		t.Fatal(err)
	}
	b, err := peer.AcquirePendingBatch()
	if err != nil || b == nil {
		t.Fatalf("peer took %v, %v", b, err)
	}
	pj, err := peer.CreateJob(b.ID, 5, merrittzk.JobConfiguration("demo", "peer", d.URL+"/files/letter.txt", "file", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The stages before give it its file list.
	queuetest.Move(t, q, pj.ID, jobs.Change{To: queue.Estimating,
		Manifest: &v1.Manifest{Files: []*v1.ManifestFile{declared(d.URL+"/files/letter.txt", "letter.txt", content)}}})
	queuetest.Move(t, q, pj.ID, jobs.Change{To: queue.Provisioning})
	queuetest.Move(t, q, pj.ID, jobs.Change{To: queue.Downloading})
	startDownloader(t, q, testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()}))

	j := queuetest.WaitState(t, q, pj.ID, queue.Processing)
	if j.GetConfiguration().GetWorkingDir() != "" {
		t.Fatalf("the job's configuration was given a working_dir: %q", j.GetConfiguration().GetWorkingDir())
	}
	want := map[string]string{"letter.txt": string(content)}
	if got := producer(t, filepath.Join(work, b.ID, pj.ID)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("<work root>/<bid>/<jid>/producer holds %v, want %v", got, want)
	}
}

// panickingGetter is a client whose every GET panics, as a bug on a
// download's path would.
type panickingGetter struct{}

func (panickingGetter) Get(context.Context, string) (*http.Response, error) {
	panic("a bug on the download's path")
}

func (panickingGetter) GetFrom(context.Context, string, int64, string) (*http.Response, error) {
	panic("a bug on the download's path")
}

// TestAPanicWhileDownloadingAFileFailsItsJobNotTheProcess: a job's files
// are fetched in goroutines of their own, outside the stage runner's
// recover. A panic there fails the job, naming the file, as a panic in the
// handler does; it does not end the replica with every job in flight (and
// again at each retry of the same payload).
func TestAPanicWhileDownloadingAFileFailsItsJobNotTheProcess(t *testing.T) {
	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	dl := testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()})
	dl.Files.Client = panickingGetter{}
	startDownloader(t, q, dl)
	jids, _ := createJobs(t, q, work, job{files: []*v1.ManifestFile{{Url: "http://127.0.0.1:1/a.txt", Name: "a.txt", Size: 3},
		{Url: "http://127.0.0.1:1/b.txt", Name: "b.txt", Size: 3}}})
	j := queuetest.WaitState(t, q, jids[0], queue.Failed)
	if msg := j.GetStatus().GetMessage(); !strings.Contains(msg, "internal error") || !strings.Contains(msg, "a bug on the download's path") {
		t.Errorf("message %q, want the internal error naming the panic", msg)
	}
}
