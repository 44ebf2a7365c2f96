// Package depositor is a depositor's web server on loopback: it serves a
// directory of deposits (manifests and files) and fills `{{base}}` in
// manifests with its own address. A test can replace what a path serves,
// as a depositor fixing a file would. It also takes the notifier's
// callbacks (POST CallbackPath) and keeps each as received.
package depositor

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves one directory.
type Server struct {
	// URL is the server's base address, http://127.0.0.1:port (or the host given).
	URL      string
	dir      string
	srv      *http.Server
	mu       sync.Mutex
	override map[string][]byte
	requests atomic.Int64
	delay    atomic.Int64    // time.Duration before each answer
	cut      atomic.Int64    // bytes of a body after which a path's first answer is closed (0: never)
	answered map[string]bool // paths answered, with cut set (under mu)
	calls    []Callback      // callbacks received, in order (under mu)
}

// CallbackPath is where the server takes callbacks: a profile's
// callback_url is URL + CallbackPath.
const CallbackPath = "/callback"

// Callback is one callback the server received: its body, as sent, and
// the key the notifier gives it to deduplicate deliveries
// (Idempotency-Key).
type Callback struct {
	Key  string
	Body []byte
	At   time.Time
}

// Callbacks returns the callbacks received so far, in order.
func (s *Server) Callbacks() []Callback {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Callback(nil), s.calls...)
}

// Start serves dir on a free loopback port.
func Start(dir string) (*Server, error) { return StartOn(dir, "127.0.0.1") }

// StartOn serves dir on a free port of host, one of this machine's
// addresses: a depositor that processes in another network namespace reach.
func StartOn(dir, host string) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), dir: dir, override: map[string][]byte{}, answered: map[string]bool{}}
	s.srv = &http.Server{Handler: s}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Set makes path (e.g. "/objects/a/b.txt") serve data instead of the file.
func (s *Server) Set(urlPath string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.override[path.Clean(urlPath)] = data
}

// SetDelay makes every answer wait d before it is sent, as a depositor's
// slow server would: downloads then take long enough for a crash or a
// freeze to catch a stage in the middle of them.
func (s *Server) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// SetCutFirst closes the first answer for each path after n bytes of its
// body (0: never), as a flaky link does: a download of a larger file goes
// on with a range from where that answer stopped.
func (s *Server) SetCutFirst(n int64) { s.cut.Store(n) }

// Requests counts the requests served so far.
func (s *Server) Requests() int64 { return s.requests.Load() }

// ServeHTTP serves a file, with `{{base}}` filled in manifests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	p := path.Clean("/" + r.URL.Path)
	if r.Method == http.MethodPost && p == CallbackPath {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.calls = append(s.calls, Callback{Key: r.Header.Get("Idempotency-Key"), Body: body, At: time.Now()})
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.mu.Lock()
	data, ok := s.override[p]
	s.mu.Unlock()
	if !ok {
		var err error
		data, err = os.ReadFile(filepath.Join(s.dir, filepath.FromSlash(p)))
		if err != nil {
			http.NotFound(w, r)
			return
		}
	}
	if strings.HasSuffix(p, ".checkm") {
		data = bytes.ReplaceAll(data, []byte("{{base}}"), []byte(s.URL))
	}
	if n := s.cut.Load(); n > 0 && r.Method == http.MethodGet && int64(len(data)) > n {
		s.mu.Lock()
		first := !s.answered[p]
		s.answered[p] = true
		s.mu.Unlock()
		if first {
			w = &cutter{ResponseWriter: w, left: n}
		}
	}
	// A fixed Last-Modified: responses must not depend on checkout times.
	http.ServeContent(w, r, path.Base(p), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), bytes.NewReader(data))
}

// cutter closes its answer after left bytes of body.
type cutter struct {
	http.ResponseWriter
	left int64
}

func (c *cutter) Write(p []byte) (int, error) {
	if int64(len(p)) < c.left {
		c.left -= int64(len(p))
		return c.ResponseWriter.Write(p)
	}
	c.ResponseWriter.Write(p[:c.left])
	c.ResponseWriter.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // the connection closes mid-body
}
