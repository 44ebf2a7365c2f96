package download

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/waittest"
)

// depositor is a depositor's file server on loopback, serving one file
// with Go's own Range and If-Range handling (http.ServeContent), and
// misbehaving as servers behind proxies do: cutting every answer after
// so many bytes, ignoring Range, changing the file.
type depositor struct {
	*httptest.Server
	mu          sync.Mutex
	content     []byte
	etag        string // "" sends none
	modified    time.Time
	cutEvery    int64 // close each answer's connection after this many body bytes (0: never)
	ignoreRange bool
	busy        bool // answer every request 503
	sent        atomic.Int64
	ranges      []string // Range, If-Range of each request
}

func newDepositor(t *testing.T, content []byte) *depositor {
	d := &depositor{content: content, etag: `"v1"`, modified: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	d.Server = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.Close)
	return d
}

func (d *depositor) serve(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.ranges = append(d.ranges, r.Header.Get("Range")+" "+r.Header.Get("If-Range"))
	content, etag, cut, ignore, busy := d.content, d.etag, d.cutEvery, d.ignoreRange, d.busy
	d.mu.Unlock()
	if busy {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if ignore {
		r.Header.Del("Range")
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(&cutter{ResponseWriter: w, d: d, left: cut}, r, "", d.modified, bytes.NewReader(content))
}

// set changes the file, its ETag and how the server behaves.
func (d *depositor) set(fn func(d *depositor)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fn(d)
}

func (d *depositor) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.ranges...)
}

// cutter counts the bytes of the file sent (in 200 and 206 answers) and
// aborts the answer after left of them (left 0: never).
type cutter struct {
	http.ResponseWriter
	d      *depositor
	left   int64
	status int
}

func (c *cutter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *cutter) Write(p []byte) (int, error) {
	if c.status != 0 && c.status != http.StatusOK && c.status != http.StatusPartialContent {
		return c.ResponseWriter.Write(p)
	}
	if c.left > 0 && int64(len(p)) >= c.left {
		n, _ := c.ResponseWriter.Write(p[:c.left])
		c.d.sent.Add(int64(n))
		c.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is closed mid-body
	}
	if c.left > 0 {
		c.left -= int64(len(p))
	}
	n, err := c.ResponseWriter.Write(p)
	c.d.sent.Add(int64(n))
	return n, err
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// resumingFetcher tries 2 attempts in a row without progress, and saves
// its state every MiB.
func resumingFetcher() *Fetcher {
	fe := fetcher(fetch.Policy{IdleTimeout: 200 * time.Millisecond})
	fe.Retry = retry.Policy{Attempts: 2, Backoff: time.Millisecond, Max: 5 * time.Millisecond}
	fe.MaxBytes = 1 << 30
	fe.SyncEvery = 1 << 20
	return fe
}

func checkArrived(t *testing.T, dir, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes (%v), want the server's %d", name, len(got), err, len(want))
	}
	noPartials(t, dir)
}

func TestAFileCutEveryFewMiBArrivesResumedWhereEachAttemptStopped(t *testing.T) {
	content := randomBytes(10<<20, 1)
	for _, tc := range []struct {
		name       string
		etag       bool
		hash       bool
		resumeWith string
	}{
		{"by its ETag", true, true, `"v1"`},
		{"by its Last-Modified", false, true, "Fri, 02 Jan 2026 03:04:05 GMT"},
		{"by its ETag, no digest declared", true, false, `"v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDepositor(t, content)
			d.set(func(d *depositor) {
				d.cutEvery = 3<<20 + 12345
				if !tc.etag {
					d.etag = ""
				}
			})
			root, dir := openRoot(t)
			f := File{URL: d.URL + "/big.bin", Size: int64(len(content))}
			if tc.hash {
				f.HashAlgorithm, f.HashValue = "sha256", sha256Hex(content)
			}
			meter := stage.NewMeter("downloading", nil)
			res, err := resumingFetcher().Fetch(stage.WithMeter(context.Background(), meter), root, "producer/big.bin", f)
			if err != nil {
				t.Fatal(err)
			}
			checkArrived(t, dir, "producer/big.bin", content)
			// Four answers: 0-, and three resumed ranges, the last one whole.
			reqs := d.requests()
			if res.Attempts != 4 || res.Resumes != 3 || len(res.Restarts) != 0 || len(reqs) != 4 {
				t.Fatalf("result %+v after requests %q; want 4 attempts, 3 resumes", res, reqs)
			}
			for i, off := range []int64{3<<20 + 12345, 2 * (3<<20 + 12345), 3 * (3<<20 + 12345)} {
				if want := fmt.Sprintf("bytes=%d- %s", off, tc.resumeWith); reqs[i+1] != want {
					t.Errorf("request %d: %q, want %q", i+2, reqs[i+1], want)
				}
			}
			if sent := d.sent.Load(); sent != int64(len(content)) {
				t.Errorf("the server sent %d bytes for a file of %d", sent, len(content))
			}
			if meter.Done() != int64(len(content)) {
				t.Errorf("meter: %d bytes done", meter.Done())
			}
		})
	}
}

func TestAFileIsStartedAgainWhenItCannotBeResumed(t *testing.T) {
	content := randomBytes(4<<20, 2)
	other := randomBytes(4<<20, 3)
	for _, tc := range []struct {
		name     string
		change   func(d *depositor) // after the first answer was cut
		declared []byte             // the file the digest declares
		restart  string             // why it was started again
		err      string             // the fetch's error ("": none)
		sent     int64              // bytes the server sent in all
		size     int64              // the declared size (0: the declared file's, -1 none)
	}{
		{"the server ignores Range", func(d *depositor) { d.ignoreRange, d.cutEvery = true, 0 }, content,
			"the server ignored the range from byte 1572864 (HTTP 200)", "", 1<<20 + 1<<19 + 4<<20, 0},
		{"the file changed (another ETag)", func(d *depositor) { d.content, d.etag, d.cutEvery = other, `"v2"`, 0 }, other,
			`the file changed on the server (now "v2", was "v1")`, "", 1<<20 + 1<<19 + 4<<20, 0},
		{"the file changed, and is not the declared one", func(d *depositor) { d.content, d.etag, d.cutEvery = other, `"v2"`, 0 }, content,
			`the file changed on the server (now "v2", was "v1")`, "sha256 expected " + sha256Hex(content) + ", got " + sha256Hex(other), 1<<20 + 1<<19 + 4<<20, -1},
		{"the file shrank past the range (416)", func(d *depositor) { d.content, d.cutEvery = content[:1<<20], 0 }, content[:1<<20],
			"the server refused the range from byte 1572864 (HTTP 416)", "", 1<<20 + 1<<19 + 1<<20, -1},
		{"the file changed under the same ETag: its digest tells", func(d *depositor) { d.content, d.cutEvery = other, 0 }, other,
			"its sha256 after resuming was " + sha256Hex(append(append([]byte(nil), content[:1<<20+1<<19]...), other[1<<20+1<<19:]...)) + ", not the declared " + sha256Hex(other) + ": fetching it whole", "",
			1<<20 + 1<<19 + (4<<20 - (1<<20 + 1<<19)) + 4<<20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDepositor(t, content)
			d.set(func(d *depositor) { d.cutEvery = 1<<20 + 1<<19 })
			// The first answer is cut; the change comes before the next.
			var once sync.Once
			inner := d.Config.Handler
			d.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Range") != "" {
					once.Do(func() { d.set(tc.change) })
				}
				inner.ServeHTTP(w, r)
			})
			root, dir := openRoot(t)
			meter := stage.NewMeter("downloading", nil)
			f := File{URL: d.URL + "/f", Size: int64(len(tc.declared)), HashAlgorithm: "sha256", HashValue: sha256Hex(tc.declared)}
			if tc.size != 0 {
				f.Size = tc.size
			}
			res, err := resumingFetcher().Fetch(stage.WithMeter(context.Background(), meter), root, "producer/f", f)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Fetch: %v; want %q", err, tc.err)
				}
				noPartials(t, dir)
			} else {
				if err != nil {
					t.Fatalf("Fetch: %v (requests %q)", err, d.requests())
				}
				checkArrived(t, dir, "producer/f", tc.declared)
				if meter.Done() != int64(len(tc.declared)) {
					t.Errorf("meter: %d bytes done, want %d", meter.Done(), len(tc.declared))
				}
			}
			if len(res.Restarts) != 1 || res.Restarts[0] != tc.restart {
				t.Errorf("restarts %q; want [%q]", res.Restarts, tc.restart)
			}
			if sent := d.sent.Load(); sent != tc.sent {
				t.Errorf("the server sent %d bytes, want %d (requests %q)", sent, tc.sent, d.requests())
			}
		})
	}
}

func TestAContentRangeThatDoesNotContinueTheFileStartsItAgain(t *testing.T) {
	content := randomBytes(3<<20, 4)
	var n atomic.Int32
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("ETag", `"e"`)
		switch n.Add(1) {
		case 1: // cut after 1.5 MiB
			w.Header().Set("Content-Length", fmt.Sprint(len(content)))
			w.Write(content[:1<<20+1<<19])
			panic(http.ErrAbortHandler)
		case 2: // a range from another byte than asked for
			w.Header().Set("Content-Range", fmt.Sprintf("bytes 10-%d/%d", len(content)-1, len(content)))
			w.WriteHeader(http.StatusPartialContent)
			w.Write(content[10:])
		default:
			w.Write(content)
		}
	})
	root, dir := openRoot(t)
	res, err := resumingFetcher().Fetch(context.Background(), root, "f", File{URL: s.URL + "/f", Size: int64(len(content)), HashAlgorithm: "md5", HashValue: sum("md5", string(content))})
	if err != nil {
		t.Fatal(err)
	}
	checkArrived(t, dir, "f", content)
	if want := "the server's Content-Range does not fit: it begins at byte 10, not 1572864"; len(res.Restarts) != 1 || res.Restarts[0] != want {
		t.Errorf("restarts %q, want [%q]", res.Restarts, want)
	}
}

func TestAFileWithoutAVersionOrADigestIsNotResumed(t *testing.T) {
	content := randomBytes(3<<20, 5)
	d := newDepositor(t, content)
	d.set(func(d *depositor) { d.etag, d.modified, d.cutEvery = "", time.Time{}, 2<<20 })
	inner := d.Config.Handler
	var n atomic.Int32
	d.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			d.set(func(d *depositor) { d.cutEvery = 0 })
		}
		inner.ServeHTTP(w, r)
	})
	root, dir := openRoot(t)
	res, err := resumingFetcher().Fetch(context.Background(), root, "f", File{URL: d.URL + "/f", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkArrived(t, dir, "f", content)
	if reqs := d.requests(); len(reqs) != 2 || reqs[1] != " " || len(res.Restarts) != 1 || !strings.Contains(res.Restarts[0], "it cannot be resumed") {
		t.Errorf("requests %q, restarts %q: want the file asked for whole again", reqs, res.Restarts)
	}
}

func TestAttemptsThatTakeTheFileNoFurtherAreBounded(t *testing.T) {
	content := randomBytes(4<<20, 6)
	for _, tc := range []struct {
		name     string
		setup    func(d *depositor)
		requests int
		kept     bool // the partial file is kept for a later attempt at the job
	}{
		// Each answer brings 100 KiB more: less than the least progress.
		{"a server that sends a little each time", func(d *depositor) { d.cutEvery = 100 << 10 }, 2, false},
		// Each answer starts again at 0 and is cut at the same place.
		{"a server that ignores Range and cuts each answer", func(d *depositor) { d.cutEvery, d.ignoreRange = 1<<20+1<<19, true }, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDepositor(t, content)
			d.set(tc.setup)
			root, dir := openRoot(t)
			res, err := resumingFetcher().Fetch(context.Background(), root, "f", File{URL: d.URL + "/f", Size: int64(len(content)), HashAlgorithm: "sha256", HashValue: sha256Hex(content)})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("(after %d attempts)", tc.requests)) {
				t.Fatalf("Fetch: %v (result %+v); want it to fail after %d attempts", err, res, tc.requests)
			}
			if n := len(d.requests()); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			entries, _ := os.ReadDir(filepath.Join(dir, ".download"))
			if tc.kept != (len(entries) == 2) || (!tc.kept && len(entries) != 0) {
				t.Errorf("left %v; kept %v", entries, tc.kept) // under SyncEvery nothing is worth keeping
			}
		})
	}
}

// stopAt runs a fetch of d's file whose first answer is cut after n
// bytes, the later ones refused, until its attempts are spent: the
// partial file is kept, saved.
func stopAt(t *testing.T, d *depositor, root *os.Root, f File, n int64) {
	t.Helper()
	d.set(func(d *depositor) { d.cutEvery = n })
	inner := d.Config.Handler
	d.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer d.set(func(d *depositor) { d.busy = true }) // the answer ends in a panic
		inner.ServeHTTP(w, r)
	})
	if _, err := resumingFetcher().Fetch(context.Background(), root, "producer/big.bin", f); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("the cut fetch: %v", err)
	}
	d.Config.Handler = inner
	d.set(func(d *depositor) { d.cutEvery, d.ranges, d.busy = 0, nil, false; d.sent.Store(0) })
}

func TestAFetchResumesThePartialFileAnEarlierAttemptSaved(t *testing.T) {
	content := randomBytes(6<<20, 7)
	f := func(url string) File {
		return File{URL: url + "/big.bin", Size: int64(len(content)), HashAlgorithm: "sha512", HashValue: sum("sha512", string(content))}
	}
	k := key("producer/big.bin")
	part := func(dir string) string { return filepath.Join(dir, ".download", k+partSuffix) }
	state := func(dir string) string { return filepath.Join(dir, ".download", k+stateSuffix) }
	for _, tc := range []struct {
		name    string
		tamper  func(t *testing.T, dir, url string) // what the crash, or a later change, left
		from    int64                               // the byte the next attempt asks from (0: the whole file)
		restart string
	}{
		{"bytes written past the last sync are cut", func(t *testing.T, dir, _ string) {
			fh, _ := os.OpenFile(part(dir), os.O_WRONLY|os.O_APPEND, 0)
			fh.Write([]byte("written, never synced"))
			fh.Close()
		}, 3<<20 + 5, ""},
		{"a partial file shorter than its state is started again", func(t *testing.T, dir, _ string) {
			os.Truncate(part(dir), 2<<20)
		}, 0, "the partial file of an earlier attempt (2097152 bytes) was not used: it is 2097152 bytes, shorter than the 3145733 its saved state vouches for"},
		{"a partial file without a state is started again", func(t *testing.T, dir, _ string) {
			os.Remove(state(dir))
		}, 0, "the partial file of an earlier attempt (3145733 bytes) was not used: no saved state beside it"},
		{"a state of another file is not trusted", func(t *testing.T, dir, url string) {
			data, _ := os.ReadFile(state(dir))
			os.WriteFile(state(dir), bytes.ReplaceAll(data, []byte("big.bin"), []byte("other.bin")), 0o644)
		}, 0, "the partial file of an earlier attempt (3145733 bytes) was not used: its saved state is of another file (the file list changed)"},
		{"an unreadable digest state is not trusted", func(t *testing.T, dir, url string) {
			data, _ := os.ReadFile(state(dir))
			os.WriteFile(state(dir), bytes.Replace(data, []byte(`"hash":"`), []byte(`"hash":"AAAA`), 1), 0o644)
		}, 0, "the partial file of an earlier attempt (3145733 bytes) was not used: its saved digest state is unreadable: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDepositor(t, content)
			root, dir := openRoot(t)
			stopAt(t, d, root, f(d.URL), 3<<20+5)
			if fi, err := os.Stat(part(dir)); err != nil || fi.Size() != 3<<20+5 {
				t.Fatalf("the partial file of the failed attempt: %v, %v", fi, err)
			}
			tc.tamper(t, dir, d.URL)
			meter := stage.NewMeter("downloading", nil)
			res, err := resumingFetcher().Fetch(stage.WithMeter(context.Background(), meter), root, "producer/big.bin", f(d.URL))
			if err != nil {
				t.Fatal(err)
			}
			checkArrived(t, dir, "producer/big.bin", content)
			reqs := d.requests()
			want := " "
			if tc.from > 0 {
				want = fmt.Sprintf("bytes=%d- %s", tc.from, `"v1"`)
			}
			if len(reqs) != 1 || reqs[0] != want {
				t.Errorf("requests %q, want [%q]", reqs, want)
			}
			if sent := d.sent.Load(); sent != int64(len(content))-tc.from {
				t.Errorf("the server sent %d bytes, want %d", sent, int64(len(content))-tc.from)
			}
			if tc.restart == "" && (res.Kept != tc.from || len(res.Restarts) != 0) {
				t.Errorf("result %+v, want %d bytes kept", res, tc.from)
			}
			if tc.restart != "" && (res.Kept != 0 || len(res.Restarts) != 1 || !strings.HasPrefix(res.Restarts[0], tc.restart)) {
				t.Errorf("result %+v, want the restart %q", res, tc.restart)
			}
			if meter.Done() != int64(len(content)) {
				t.Errorf("meter: %d bytes done", meter.Done())
			}
		})
	}
}

func TestAPartialFileAnotherAttemptStillWritesIsLeftToIt(t *testing.T) {
	content := randomBytes(2<<20, 8)
	d := newDepositor(t, content)
	root, dir := openRoot(t)
	os.MkdirAll(filepath.Join(dir, ".download"), 0o755)
	name := filepath.Join(dir, ".download", key("f")+partSuffix)
	other, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.Write([]byte("another attempt's bytes"))
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := resumingFetcher().Fetch(context.Background(), root, "f", File{URL: d.URL + "/f", Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); !bytes.Equal(got, content) {
		t.Error("the file did not arrive")
	}
	if got, _ := os.ReadFile(name); string(got) != "another attempt's bytes" {
		t.Errorf("the other attempt's partial file was touched: %q", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, ".download"))
	if len(entries) != 1 {
		t.Errorf("left %v, want only the other attempt's file", entries)
	}
}

func TestAStoppedFetchKeepsWhatIsWorthResumingAndTheNextOneAsksOnlyForTheRest(t *testing.T) {
	content := randomBytes(4<<20, 9)
	d := newDepositor(t, content)
	started := make(chan struct{})
	inner := d.Config.Handler
	var n atomic.Int32
	d.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Content-Length", fmt.Sprint(len(content)))
			w.Write(content[:2<<20+7])
			w.(http.Flusher).Flush()
			close(started)
			<-r.Context().Done()
			return
		}
		inner.ServeHTTP(w, r)
	})
	root, dir := openRoot(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	f := File{URL: d.URL + "/f", Size: int64(len(content)), HashAlgorithm: "sha1", HashValue: sum("sha1", string(content))}
	fetched := make(chan error, 1)
	go func() {
		_, err := resumingFetcher().Fetch(ctx, root, "f", f)
		fetched <- err
	}()
	<-started
	// Stopped once the bytes sent are read, in its partial file.
	waittest.True(t, 10*time.Second, "the bytes sent written to the partial file", func() bool { return largestPartial(dir) >= 2<<20+7 })
	cancel(errors.New("lock lost"))
	if err := <-fetched; err == nil || err.Error() != "lock lost" {
		t.Fatalf("Fetch: %v, want the cause of the cancellation", err)
	}
	// Stopped, it saved all it had, past its last sync point.
	res, err := resumingFetcher().Fetch(context.Background(), root, "f", f)
	if err != nil {
		t.Fatal(err)
	}
	checkArrived(t, dir, "f", content)
	if reqs := d.requests(); res.Kept != 2<<20+7 || len(reqs) != 1 || reqs[0] != fmt.Sprintf("bytes=%d- \"v1\"", 2<<20+7) {
		t.Errorf("kept %d, requests %q", res.Kept, d.requests())
	}
}

// largestPartial is the size of the largest file in dir's partial files.
func largestPartial(dir string) int64 {
	var most int64
	entries, _ := os.ReadDir(filepath.Join(dir, ".download"))
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			most = max(most, info.Size())
		}
	}
	return most
}
