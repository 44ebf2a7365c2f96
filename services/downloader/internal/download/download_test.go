package download

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/waittest"
)

// server is a depositor's server on loopback that counts requests per path.
type server struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int
}

func newServer(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, n int)) *server {
	s := &server{count: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.count[r.URL.Path]++
		n := s.count[r.URL.Path]
		s.mu.Unlock()
		handler(w, r, n)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests(p string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[p]
}

func sum(alg, body string) string {
	switch alg {
	case "md5":
		h := md5.Sum([]byte(body))
		return hex.EncodeToString(h[:])
	case "sha1":
		h := sha1.Sum([]byte(body))
		return hex.EncodeToString(h[:])
	case "sha512":
		h := sha512.Sum512([]byte(body))
		return hex.EncodeToString(h[:])
	}
	h := sha256.Sum256([]byte(body))
	return hex.EncodeToString(h[:])
}

// fetcher fetches under policy, with loopback allowed: the tests' servers
// listen there.
func fetcher(policy fetch.Policy) *Fetcher {
	policy.Allow = append(policy.Allow, fetch.LoopbackRanges()...)
	return &Fetcher{Client: fetch.New(policy), Retry: retry.Policy{Attempts: 4, Backoff: 5 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: 0.5},
		MaxBytes: 1 << 20, TempDir: ".download"}
}

func openRoot(t *testing.T) (*os.Root, string) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root, dir
}

// noPartials checks that no partial file was left behind.
func noPartials(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(dir, ".download"))
	for _, e := range entries {
		t.Errorf("partial file left: %s", e.Name())
	}
}

const body = "the content of a file\n"

func TestFilesArriveCheckedWithEachDigestAlgorithm(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int) { w.Write([]byte(body)) })
	for _, alg := range []string{"md5", "sha1", "sha256", "sha512", ""} {
		t.Run("algorithm "+alg, func(t *testing.T) {
			root, dir := openRoot(t)
			f := File{URL: s.URL + "/a.txt", Size: int64(len(body))}
			if alg != "" {
				f.HashAlgorithm, f.HashValue = alg, sum(alg, body)
			}
			res, err := fetcher(fetch.Policy{}).Fetch(context.Background(), root, "producer/data/a.txt", f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "producer/data/a.txt"))
			if err != nil || string(got) != body || res.Size != int64(len(body)) || res.Attempts != 1 || res.Reused {
				t.Errorf("file %q, %v; result %+v", got, err, res)
			}
			noPartials(t, dir)
		})
	}
}

func TestFlakyServerIsRetriedUntilTheFileArrives(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch n {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			// Half the body, then the connection drops.
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write([]byte(body[:5]))
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			w.Write([]byte(body))
		}
	})
	root, dir := openRoot(t)
	res, err := fetcher(fetch.Policy{}).Fetch(context.Background(), root, "a.txt",
		File{URL: s.URL + "/a.txt", HashAlgorithm: "sha256", HashValue: sum("sha256", body), Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 3 || s.requests("/a.txt") != 3 {
		t.Errorf("attempts %d, requests %d; want 3 of each", res.Attempts, s.requests("/a.txt"))
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(got) != body {
		t.Errorf("file %q after retries", got)
	}
	noPartials(t, dir)
}

func TestFilesThatCannotBeHadFailSayingWhy(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/missing":
			http.NotFound(w, r)
		case "/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/to-denied":
			http.Redirect(w, r, "http://127.0.0.2:9/metadata", http.StatusFound)
		case "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		case "/stalls":
			w.Write([]byte("a few bytes"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case "/silent":
			<-r.Context().Done() // never answers
		case "/trickle":
			// A byte every 20ms, never stalling long enough for the idle
			// timeout: 50 bytes/s.
			for r.Context().Err() == nil {
				w.Write([]byte("."))
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond) // a trickle: the server's slowness is the point
			}
		case "/endless":
			chunk := make([]byte, 32<<10)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		default:
			w.Write([]byte(body))
		}
	})
	deny, _ := fetch.ParseDeny("loopback")
	deny127002, _ := fetch.ParseDeny("127.0.0.2")
	bad := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name     string
		policy   fetch.Policy
		file     File
		want     string
		requests int
	}{
		{"a missing file is not asked for again", fetch.Policy{}, File{URL: s.URL + "/missing", Size: -1},
			"GET " + s.URL + "/missing: HTTP 404 Not Found", 1},
		{"a server in trouble is tried a bounded number of times", fetch.Policy{}, File{URL: s.URL + "/busy", Size: -1},
			"HTTP 503 Service Unavailable (after 4 attempts)", 4},
		{"a digest mismatch names both digests", fetch.Policy{}, File{URL: s.URL + "/a.txt", Size: -1, HashAlgorithm: "sha256", HashValue: bad},
			"sha256 expected " + bad + ", got " + sum("sha256", body), 1},
		{"a size announced unlike the declared one", fetch.Policy{}, File{URL: s.URL + "/a.txt", Size: 5},
			fmt.Sprintf("size expected 5 bytes, got %d", len(body)), 1},
		{"an endless body past its declared size", fetch.Policy{}, File{URL: s.URL + "/endless", Size: 100},
			"size expected 100 bytes, got more", 1},
		{"an endless body of undeclared size", fetch.Policy{}, File{URL: s.URL + "/endless", Size: -1},
			"larger than allowed: more than 1048576 bytes", 1},
		{"a server that never answers times out", fetch.Policy{HeaderTimeout: 100 * time.Millisecond}, File{URL: s.URL + "/silent", Size: -1},
			"timed out", 4},
		{"a server that stops sending times out", fetch.Policy{IdleTimeout: 100 * time.Millisecond}, File{URL: s.URL + "/stalls", Size: -1},
			"no body data for 100ms (IdleTimeout) (after 4 attempts)", 4},
		{"a server that trickles slower than the least rate fails at once", fetch.Policy{MinRate: 1000, RateWindow: 200 * time.Millisecond}, File{URL: s.URL + "/trickle", Size: -1},
			"GET " + s.URL + "/trickle: reading the body: too slow: ", 1},
		{"a denied address is never reached", fetch.Policy{Deny: deny}, File{URL: s.URL + "/denied", Size: -1},
			"address denied by policy", 0},
		{"a scheme other than http and https", fetch.Policy{}, File{URL: "file:///etc/passwd", Size: -1},
			"scheme not allowed", 0},
		{"a redirect to a denied address is not followed", fetch.Policy{Deny: deny127002}, File{URL: s.URL + "/to-denied", Size: -1},
			"(redirected to http://127.0.0.2:9/metadata): address denied by policy: 127.0.0.2 is in 127.0.0.2/32", 1},
		{"a redirect to another scheme is not followed", fetch.Policy{}, File{URL: s.URL + "/to-file", Size: -1},
			"scheme not allowed", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, dir := openRoot(t)
			p := strings.TrimPrefix(tc.file.URL, s.URL)
			before := s.requests(p)
			_, err := fetcher(tc.policy).Fetch(context.Background(), root, "f", tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fetch: %v; want %q", err, tc.want)
			}
			// The server counts a request in a goroutine of its own, which
			// may come to it after the client gave up waiting: wait for it.
			waittest.True(t, 10*time.Second, "the server counted every request", func() bool { return s.requests(p)-before >= tc.requests })
			if n := s.requests(p) - before; n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			if _, err := os.Stat(filepath.Join(dir, "f")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed file was put in place: %v", err)
			}
			noPartials(t, dir)
		})
	}
}

func TestACompleteFileIsNotFetchedAgain(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int) { w.Write([]byte(body)) })
	wrong := strings.Repeat("x", len(body)) // right size, wrong content
	for _, tc := range []struct {
		name     string
		present  string
		file     File
		reused   bool
		requests int
	}{
		{"size and digest match", body, File{Size: int64(len(body)), HashAlgorithm: "md5", HashValue: sum("md5", body)}, true, 0},
		{"digest matches, size undeclared", body, File{Size: -1, HashAlgorithm: "sha1", HashValue: sum("sha1", body)}, true, 0},
		{"nothing declared: a file in place is complete", body, File{Size: -1}, true, 0},
		{"same size, other digest", wrong, File{Size: int64(len(body)), HashAlgorithm: "sha256", HashValue: sum("sha256", body)}, false, 1},
		{"other size", body[:3], File{Size: int64(len(body))}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, dir := openRoot(t)
			if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte(tc.present), 0o644); err != nil {
				t.Fatal(err)
			}
			tc.file.URL = s.URL + "/" + strings.ReplaceAll(tc.name, " ", "-")
			res, err := fetcher(fetch.Policy{}).Fetch(context.Background(), root, "a.txt", tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if res.Reused != tc.reused || s.requests(strings.TrimPrefix(tc.file.URL, s.URL)) != tc.requests {
				t.Errorf("reused %v after %d requests; want %v after %d", res.Reused, s.requests(strings.TrimPrefix(tc.file.URL, s.URL)), tc.reused, tc.requests)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(got) != body {
				t.Errorf("file holds %q, want the server's content", got)
			}
		})
	}
}

func TestPartialFilesKeptForResumingStayAndOthersOfDeadAttemptsAreRemoved(t *testing.T) {
	root, dir := openRoot(t)
	os.MkdirAll(filepath.Join(dir, ".download"), 0o755)
	k, orphan := key("producer/a"), key("producer/b")
	for _, n := range []string{"X1ABC.part", k + ".abc.tmp", k + ".state.tmp", k + ".part", k + ".state", orphan + ".state", "keep.me", "container"} {
		os.WriteFile(filepath.Join(dir, ".download", n), []byte("partial"), 0o644)
	}
	if err := fetcher(fetch.Policy{}).RemovePartial(root); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(filepath.Join(dir, ".download"))
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"container", k + ".part", k + ".state", "keep.me"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("left %v, want %v: the resumable partial file with its state, and what is not a partial file", left, want)
	}
}

func TestFetchStopsWhenItsContextEnds(t *testing.T) {
	started := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("Content-Length", "1000000")
		w.Write([]byte("first bytes"))
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
	})
	root, dir := openRoot(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-started
		cancel(errors.New("lock lost"))
	}()
	_, err := fetcher(fetch.Policy{}).Fetch(ctx, root, "a.txt", File{URL: s.URL + "/a.txt", Size: -1})
	if err == nil || err.Error() != "lock lost" {
		t.Errorf("Fetch: %v, want the cause of the cancellation", err)
	}
	if s.requests("/a.txt") != 1 {
		t.Errorf("%d requests: a cancelled fetch must not be retried", s.requests("/a.txt"))
	}
	noPartials(t, dir)
}
