// Package bigfile is a depositor's server of big files on loopback: each
// file is made as it is served (a random block over and over, nothing
// stored), with Go's own Range and If-Range handling, and the server
// misbehaves as servers behind proxies do when told to: it cuts answers
// after so many bytes, ignores Range, changes a file. It counts the bytes
// of files it sent, answer by answer, for the tests and benchmarks that
// prove what a resume costs.
package bigfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// blockSize is the length of the block a file repeats: not a power of two,
// so that bytes put at a wrong offset by a whole number of MiB show in
// the digest.
const blockSize = 1<<20 + 7

// File is the content of one file: Size bytes of the block its Seed makes,
// over and over.
type File struct {
	Size int64
	Seed uint64
}

// ETag names the file's version.
func (f File) ETag() string { return fmt.Sprintf(`"%x-%d"`, f.Seed, f.Size) }

// Reader reads the file's content from its first byte.
func (f File) Reader() io.ReadSeeker { return &content{block: block(f.Seed), size: f.Size} }

// SHA256 is the digest of the file's content, lower-case hex.
func (f File) SHA256() string {
	h := sha256.New()
	if _, err := io.Copy(h, f.Reader()); err != nil {
		panic(err) // a reader of memory does not fail
	}
	return hex.EncodeToString(h.Sum(nil))
}

func block(seed uint64) []byte {
	b := make([]byte, blockSize)
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	rand.NewChaCha8(key).Read(b)
	return b
}

// content is a file's bytes as an io.ReadSeeker (what http.ServeContent
// serves ranges of).
type content struct {
	block     []byte
	size, off int64
}

func (c *content) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.size-c.off)]
	n := 0
	for n < len(p) {
		n += copy(p[n:], c.block[(c.off+int64(n))%blockSize:])
	}
	c.off += int64(n)
	return n, nil
}

func (c *content) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += c.off
	case io.SeekEnd:
		offset += c.size
	}
	if offset < 0 {
		return 0, errors.New("bigfile: seek before the start")
	}
	c.off = offset
	return offset, nil
}

// Answer is one request the server answered: its Range and If-Range, the
// status and how many bytes of the file it sent.
type Answer struct {
	Path, Range, IfRange string
	Status               int
	Sent                 int64
}

// Server serves files and documents on a loopback port.
type Server struct {
	URL string
	srv *http.Server

	mu          sync.Mutex
	files       map[string]File
	docs        map[string][]byte
	cutEvery    map[string]int64 // path → answers cut after this many bytes
	cutOnce     map[string]int64 // path → its next answer cut after this many bytes
	then        map[string]File  // path → the version it has once that answer is cut
	ignoreRange map[string]bool
	rate        int64 // bytes a second each answer is held to (0: as fast as it goes)
	answers     []*Answer
	sent        atomic.Int64
}

// Start serves on a free port of host (127.0.0.1 for loopback).
func Start(host string) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), files: map[string]File{}, docs: map[string][]byte{},
		cutEvery: map[string]int64{}, cutOnce: map[string]int64{}, then: map[string]File{}, ignoreRange: map[string]bool{}}
	s.srv = &http.Server{Handler: s}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Put serves f at path ("/big.bin"); a file put again is a new version.
func (s *Server) Put(path string, f File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = f
}

// PutDoc serves data at path: a manifest naming the files.
func (s *Server) PutDoc(path string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[path] = data
}

// CutEvery closes each answer for path after n bytes of the file (0:
// never), as a proxy that cuts long connections does.
func (s *Server) CutEvery(path string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cutEvery[path] = n
}

// CutOnce closes the next answer for path after n bytes of the file.
func (s *Server) CutOnce(path string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cutOnce[path] = n
}

// CutOnceThen closes the next answer for path after n bytes of the file,
// and from then on serves next there: a file that changed between two
// attempts.
func (s *Server) CutOnceThen(path string, n int64, next File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cutOnce[path] = n
	s.then[path] = next
}

// IgnoreRange makes the server answer path whole (200), whatever the
// request's Range.
func (s *Server) IgnoreRange(path string, ignore bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignoreRange[path] = ignore
}

// SetRate holds each answer to bytesPerSecond (0: no limit).
func (s *Server) SetRate(bytesPerSecond int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate = bytesPerSecond
}

// Sent is how many bytes of files the server has sent.
func (s *Server) Sent() int64 { return s.sent.Load() }

// Answers are the GET requests for files answered so far, in order (an answer
// still being sent shows the bytes sent so far).
func (s *Server) Answers() []Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Answer, len(s.answers))
	for i, a := range s.answers {
		out[i] = *a
		out[i].Sent = atomic.LoadInt64(&a.Sent)
	}
	return out
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	s.mu.Lock()
	doc, isDoc := s.docs[p]
	f, isFile := s.files[p]
	if isFile && r.Method != http.MethodGet {
		// A HEAD (the estimator's) sends no bytes of the file: it is
		// neither counted nor cut.
		s.mu.Unlock()
		w.Header().Set("ETag", f.ETag())
		http.ServeContent(w, r, "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), f.Reader())
		return
	}
	cut := s.cutEvery[p]
	var next *File
	if n, ok := s.cutOnce[p]; ok && isFile {
		cut = n
		delete(s.cutOnce, p)
		if f, ok := s.then[p]; ok {
			next = &f
			delete(s.then, p)
		}
	}
	ignore, rate := s.ignoreRange[p], s.rate
	var a *Answer
	if isFile {
		a = &Answer{Path: p, Range: r.Header.Get("Range"), IfRange: r.Header.Get("If-Range")}
		s.answers = append(s.answers, a)
	}
	s.mu.Unlock()
	switch {
	case isDoc:
		w.Write(doc)
		return
	case !isFile:
		http.NotFound(w, r)
		return
	}
	if ignore {
		r.Header.Del("Range")
	}
	w.Header().Set("ETag", f.ETag())
	cw := &countingWriter{ResponseWriter: w, s: s, a: a, left: cut, rate: rate, start: time.Now(), next: next}
	// A fixed Last-Modified: answers must not depend on when the test ran.
	http.ServeContent(cw, r, "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), f.Reader())
}

// countingWriter counts the bytes of the file an answer sends, holds them
// to a rate, and cuts the answer after left of them (0: never).
type countingWriter struct {
	http.ResponseWriter
	s     *Server
	a     *Answer
	left  int64
	rate  int64
	start time.Time
	sent  int64
	next  *File // the file's version once the answer is cut
}

func (c *countingWriter) WriteHeader(code int) {
	c.a.Status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.a.Status != 0 && c.a.Status != http.StatusOK && c.a.Status != http.StatusPartialContent {
		return c.ResponseWriter.Write(p) // an error's text: no bytes of the file
	}
	cut := false
	if c.left > 0 && int64(len(p)) >= c.left {
		p, cut = p[:c.left], true
	}
	if c.rate > 0 {
		// Sleep until the bytes sent so far are due at the rate.
		due := c.start.Add(time.Duration(float64(c.sent) / float64(c.rate) * float64(time.Second)))
		time.Sleep(time.Until(due))
	}
	n, err := c.ResponseWriter.Write(p)
	c.sent += int64(n)
	c.s.sent.Add(int64(n))
	atomic.AddInt64(&c.a.Sent, int64(n))
	if c.left > 0 {
		c.left -= int64(n)
	}
	if cut {
		c.ResponseWriter.(http.Flusher).Flush()
		if c.next != nil {
			c.s.Put(c.a.Path, *c.next)
		}
		panic(http.ErrAbortHandler) // the connection closes mid-body
	}
	return n, err
}

// ReadFrom sends the file in large writes: ServeContent copies through it.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			m, werr := c.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
