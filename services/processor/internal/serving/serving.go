// Package serving hands prepared versions to Merritt's storage service,
// which fetches what it stores over HTTP: the add manifest of a version
// and every file it lists.
//
// Storing handed over to Merritt's storage consumer, which may call at any
// time, every prepared version is served at <base URL>/<bid>/<jid>/<file>
// while its add manifest (AddManifest, in the job's working folder beside
// producer/ and system/) exists.
//
// Storing here, each storing attempt is served under URLs of its own,
// <base URL>/<attempt>/<bid>/<jid>/<file>, from Open until the attempt is
// closed, and only the files its manifest lists: the service goes on with
// a call whose caller gave up, and such a call, fetching after its attempt
// ended, is refused and stores nothing.
//
// Nothing outside the work root is served, and no symbolic link.
package serving

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/workdir"
)

// AddManifest is the add manifest's name in a working folder.
const AddManifest = "mrt-manifest.txt"

// Server serves the prepared versions of one work root.
type Server struct {
	root     string // the work root, absolute
	base     string // the public base URL, without a trailing slash
	whenever bool   // every prepared version, not only those open

	mu       sync.Mutex
	attempts map[string]*Attempt // by id, while open
}

// New serves the versions prepared under workRoot at baseURL. With
// everyPrepared, a version is served whenever its add manifest exists.
func New(workRoot, baseURL string, everyPrepared bool) (*Server, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q is not an http(s) base URL", baseURL)
	}
	if !filepath.IsAbs(workRoot) {
		return nil, fmt.Errorf("work root %q is not absolute", workRoot)
	}
	return &Server{root: filepath.Clean(workRoot), base: strings.TrimSuffix(baseURL, "/"), whenever: everyPrepared, attempts: map[string]*Attempt{}}, nil
}

// BaseURL is the base URL the versions are served at.
func (s *Server) BaseURL() string { return s.base }

// relative is a working folder's path under the root, slash-separated:
// <bid>/<jid>.
func (s *Server) relative(wd string) (string, error) {
	rel, err := workdir.Within(s.root, filepath.Clean(wd))
	if err != nil {
		return "", err
	}
	rel = filepath.ToSlash(rel)
	if strings.Count(rel, "/") != 1 {
		return "", fmt.Errorf("%s is not a job's working folder <work root>/<bid>/<jid>", wd)
	}
	return rel, nil
}

// URL is where the storage service fetches the file name (slash-separated)
// of the working folder wd.
func (s *Server) URL(wd, name string) (string, error) {
	rel, err := s.relative(wd)
	if err != nil {
		return "", err
	}
	return s.base + (&url.URL{Path: "/" + rel + "/" + name}).EscapedPath(), nil
}

// Names reports whether raw is the URL of the file name of the working
// folder wd on a server of this work root (this one or a replica's: the
// path after the base URL is what tells).
func (s *Server) Names(wd, name, raw string) bool {
	rel, err := s.relative(wd)
	if err != nil {
		return false
	}
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.RawQuery == "" &&
		strings.HasSuffix(u.Path, "/"+rel+"/"+name)
}

// Attempt is one storing attempt's version, served under URLs of its own
// until Close.
type Attempt struct {
	s        *Server
	id       string
	rel      string // <bid>/<jid>
	manifest []byte
	files    map[string]bool // the names the manifest lists
	// Manifest is the attempt's add manifest: its URL, size and digest.
	Manifest Written
}

// Open serves the version whose files are entries (the storage manifest's,
// names relative to wd) for one storing attempt: an add manifest listing
// each file at a URL of the attempt's, served with them until Close.
func (s *Server) Open(wd string, entries []checkm.Entry) (*Attempt, error) {
	if s.whenever {
		return nil, errors.New("serving: every prepared version is served: storing is handed over, and makes no attempt of its own")
	}
	rel, err := s.relative(wd)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	rand.Read(id[:])
	a := &Attempt{s: s, id: hex.EncodeToString(id[:]), rel: rel, files: map[string]bool{}}
	data, err := manifestOf(entries, func(name string) string { return s.base + escaped("/"+a.id+"/"+rel+"/"+name) })
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		a.files[e.FileName] = true
	}
	sum := sha256.Sum256(data)
	a.manifest = data
	a.Manifest = Written{URL: s.base + escaped("/"+a.id+"/"+rel+"/"+AddManifest), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	s.mu.Lock()
	s.attempts[a.id] = a
	s.mu.Unlock()
	return a, nil
}

// Close stops serving the attempt: every fetch of its URLs from now on
// is refused (404).
func (a *Attempt) Close() {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	delete(a.s.attempts, a.id)
}

// ID is the attempt's id, the first segment of its URLs' paths.
func (a *Attempt) ID() string { return a.id }

func escaped(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// manifestOf is the add manifest of entries, each file at url(name).
func manifestOf(entries []checkm.Entry, url func(name string) string) ([]byte, error) {
	rows := make([]merrittstore.AddFile, 0, len(entries))
	for _, e := range entries {
		if e.HashAlgorithm == "" || e.FileSize < 0 {
			return nil, fmt.Errorf("%s has no digest or size", e.FileName)
		}
		rows = append(rows, merrittstore.AddFile{URL: url(e.FileName), HashAlgorithm: e.HashAlgorithm, HashValue: e.HashValue,
			Size: e.FileSize, Name: e.FileName, MimeType: e.MimeType})
	}
	var b bytes.Buffer
	if err := merrittstore.WriteAddManifest(&b, rows); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Written is an add manifest written: its URL, size and SHA-256.
type Written struct {
	URL    string
	Size   int64
	SHA256 string
}

// WriteAddManifest writes the add manifest of the version whose files are
// entries (the storage manifest's, names relative to wd) into wd, each
// file at its URL on this server, and returns where it is served.
func (s *Server) WriteAddManifest(wd string, entries []checkm.Entry) (Written, error) {
	rel, err := s.relative(wd)
	if err != nil {
		return Written{}, err
	}
	data, err := manifestOf(entries, func(name string) string { return s.base + escaped("/"+rel+"/"+name) })
	if err != nil {
		return Written{}, err
	}
	b := bytes.NewBuffer(data)
	manifest := filepath.Join(wd, AddManifest)
	tmp, err := os.CreateTemp(wd, "."+AddManifest+".tmp-*")
	if err != nil {
		return Written{}, fmt.Errorf("writing %s: %w", manifest, err)
	}
	_, err = tmp.Write(b.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), manifest)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return Written{}, fmt.Errorf("writing %s: %w", manifest, err)
	}
	u, err := s.URL(wd, AddManifest)
	if err != nil {
		return Written{}, err
	}
	sum := sha256.Sum256(b.Bytes())
	return Written{URL: u, Size: int64(b.Len()), SHA256: hex.EncodeToString(sum[:])}, nil
}

// ServeHTTP serves GET and HEAD of <bid>/<jid>/<file> (every prepared
// version) or of <attempt>/<bid>/<jid>/<file> (an open attempt's).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	rel := strings.TrimPrefix(r.URL.Path, "/")
	if path.Clean(rel) != rel || !filepath.IsLocal(filepath.FromSlash(rel)) {
		http.NotFound(w, r)
		return
	}
	if !s.whenever {
		id, rest, _ := strings.Cut(rel, "/")
		s.mu.Lock()
		a := s.attempts[id]
		s.mu.Unlock()
		if a == nil {
			http.NotFound(w, r)
			return
		}
		file, ok := strings.CutPrefix(rest, a.rel+"/")
		switch {
		case !ok:
			http.NotFound(w, r)
		case file == AddManifest:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.manifest))
		case a.files[file]:
			s.serveFile(w, r, a.rel, file)
		default:
			http.NotFound(w, r)
		}
		return
	}
	parts := strings.SplitN(rel, "/", 3)
	if len(parts) < 3 {
		http.NotFound(w, r)
		return
	}
	folder, file := parts[0]+"/"+parts[1], parts[2]
	if file != AddManifest && !strings.HasPrefix(file, "producer/") && !strings.HasPrefix(file, "system/") {
		http.NotFound(w, r)
		return
	}
	s.serveFile(w, r, folder, file)
}

// serveFile serves the file (slash-separated) of the working folder
// <root>/<folder> while the folder's add manifest exists, through no link.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, folder, file string) {
	rel := folder + "/" + file
	root, err := os.OpenRoot(s.root)
	if err != nil {
		http.Error(w, "the work root cannot be read", http.StatusInternalServerError)
		return
	}
	defer root.Close()
	if fi, err := root.Lstat(folder + "/" + AddManifest); err != nil || !fi.Mode().IsRegular() {
		http.NotFound(w, r)
		return
	}
	// Every element of the path must be a folder or the file itself, no
	// link: a link in the working folder would hand out what it points at.
	for p := folder; ; {
		fi, err := root.Lstat(p)
		if err != nil || !fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		rest, ok := strings.CutPrefix(rel, p+"/")
		if !ok || !strings.Contains(rest, "/") {
			break
		}
		p += "/" + rest[:strings.IndexByte(rest, '/')]
	}
	fi, err := root.Lstat(rel)
	if err != nil || !fi.Mode().IsRegular() {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			http.Error(w, "the file cannot be read", http.StatusInternalServerError)
			return
		}
		http.NotFound(w, r)
		return
	}
	f, err := root.Open(rel)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", fi.ModTime(), f)
}
