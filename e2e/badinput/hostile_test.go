package badinput

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	"github.com/ingestq/ingestq/shared/checkm"
)

// hostileServer is a depositor's web server gone wrong: it serves what a
// well-behaved one never would, generated as it is sent (nothing of it is
// a file on disk). The last path segment of every URL is a file name, so
// any of them can be submitted as a single-file payload.
//
//	/million/<name>.checkm   an object manifest of 1,000,000 rows
//	/endless/<name>.checkm   an object manifest whose rows never end
//	/endless/<name>          a body of zeros that never ends
//	/silent/<name>           accepts the request and never answers
//	/stall/<name>            answers, sends 1 KiB of the body, then nothing
//	/truncated/<name>        declares 4096 bytes, sends 1000, drops the connection
//	/redirect/<name>?to=URL  302 to URL
type hostileServer struct {
	*httptest.Server
	closing chan struct{} // closed first by Close: ends the handlers that wait

	mu   sync.Mutex
	hits map[string]int // requests per path
}

// millionRows is the size of the manifest the batcher must refuse: with its
// header lines it is over checkm's default limit of 1,000,000 lines.
const millionRows = 1_000_000

func startHostileServer() *hostileServer {
	h := &hostileServer{closing: make(chan struct{}), hits: map[string]int{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	return h
}

// Close ends the handlers that are waiting, then the server.
func (h *hostileServer) Close() {
	close(h.closing)
	h.Server.Close()
}

// Hits counts the requests that reached path.
func (h *hostileServer) Hits(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[path]
}

func (h *hostileServer) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.hits[r.URL.Path]++
	h.mu.Unlock()
	kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	manifest := strings.HasSuffix(r.URL.Path, ".checkm")
	switch {
	case kind == "million" && manifest:
		h.manifestRows(w, r, millionRows)
	case kind == "endless" && manifest:
		h.manifestRows(w, r, -1)
	case kind == "endless":
		h.zeros(w, r)
	case kind == "silent":
		h.wait(r)
	case kind == "stall":
		w.Header().Set("Content-Length", "1048576")
		w.Write(make([]byte, 1024))
		w.(http.Flusher).Flush()
		h.wait(r)
	case kind == "truncated":
		w.Header().Set("Content-Length", "4096")
		w.Write(make([]byte, 1000))
		w.(http.Flusher).Flush()
		// Drops the connection: the client reads an unexpected EOF.
		panic(http.ErrAbortHandler)
	case kind == "redirect":
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// wait holds a request open until the client gives up or the server closes.
func (h *hostileServer) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-h.closing:
	}
}

// zeros sends zeros until the client stops reading.
func (h *hostileServer) zeros(w http.ResponseWriter, r *http.Request) {
	chunk := make([]byte, 64<<10)
	for r.Context().Err() == nil {
		select {
		case <-h.closing:
			return
		default:
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// manifestRows sends an object manifest of rows rows (-1: without end),
// each a well-formed row, so that only a limit can refuse it.
func (h *hostileServer) manifestRows(w http.ResponseWriter, r *http.Request, rows int) {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString(checkm.Header + "\n#%profile | " + checkm.ProfileObject + "\n#%fields | nfo:fileUrl | nfo:fileSize\n")
	line := make([]byte, 0, 64)
	for n := 0; rows < 0 || n < rows; n++ {
		if n%4096 == 0 && (r.Context().Err() != nil || h.isClosing()) {
			return
		}
		line = append(line[:0], "http://127.0.0.1/f/"...)
		line = strconv.AppendInt(line, int64(n), 10)
		line = append(line, " | 1\n"...)
		if _, err := bw.Write(line); err != nil {
			return
		}
	}
	bw.WriteString("#%eof\n")
	bw.Flush()
}

func (h *hostileServer) isClosing() bool {
	select {
	case <-h.closing:
		return true
	default:
		return false
	}
}
