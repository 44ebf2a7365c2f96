// Package merritttest runs a stand-in for Merritt's storage service
// (CDLUC3/mrt-store) on loopback, for tests and the demo: it speaks the
// service's HTTP interface as its source shows it, and keeps what it is
// given.
//
//   - POST add/<node>/<object> and update/<node>/<object>, as a multipart
//     form (url, manifest, size, digestType, digestValue, localIdentifier,
//     localContext, delete, responseForm) or a URL-encoded one (url,
//     manifest, size, digest-type, digest-value, local-identifier,
//     local-context, delete, t). It fetches the manifest over HTTP (and
//     checks its size and digest when given), reads it as an add manifest
//     (checkm 0.7 with the mrt-add-manifest profile, #%prefix and #%columns),
//     fetches every file it lists over HTTP and checks its size and digest,
//     and only then makes the version: an add makes one of exactly those
//     files, an update one of the current version's files less those
//     deleted (a file id not in the current version is refused) with those
//     of the manifest added or replaced.
//   - GET state/<node>/<object>, state/<node>/<object>/<version>: the
//     object's and a version's state; an object it does not hold is 404.
//   - GET manifest/<node>/<object>: the object's manifest of every version
//     (objectInfo XML), what Merritt's inventory service reads.
//   - GET content/<node>/<object>/<version>/<file>: a stored file.
//
// Answers come in the form asked ("json", "xml", "anvl"; anything else
// XML), failures as the service formats its exceptions, with its HTTP
// status. A test can make the next calls fail (Refuse), answer late
// (Delay) or store and then lose the answer (LoseAnswer), and count the
// versions of an object.
package merritttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Service is a running stand-in.
type Service struct {
	// URL is its base URL: http://127.0.0.1:<port>.
	URL string

	srv   *http.Server
	ln    net.Listener
	nodes []int
	fetch *http.Client

	mu      sync.Mutex
	objects map[key]*object
	faults  []Fault
	calls   []Call
}

type key struct {
	node int
	id   string
}

type object struct {
	mu       sync.Mutex // held through a store, as the service's object lock
	versions []version
	localID  string
}

type version struct {
	number  int
	created time.Time
	files   []storedFile
}

type storedFile struct {
	name, mimeType string
	data           []byte
	sha256         string
}

// Call is one add or update call as the stand-in received it.
type Call struct {
	Action string // add, update
	Node   int
	Object string
	Form   url.Values // the form fields, under the names the form used
	Code   int        // the HTTP status it answered (0: the answer was lost)
}

// Fault is what the stand-in does to one add or update call.
type Fault struct {
	// Refuse answers with this HTTP status and exception, storing nothing.
	Refuse int
	Status string // the exception's name (default by Refuse's code)
	Detail string
	// Delay holds the answer (after storing, unless refused) this long,
	// or until the caller hangs up.
	Delay time.Duration
	// LoseAnswer stores the version, then closes the connection without
	// an answer: the caller cannot know the call succeeded.
	LoseAnswer bool
}

// Start starts a stand-in serving the given nodes (default: node 1),
// stopped when the test ends.
func Start(t testing.TB, nodes ...int) *Service {
	t.Helper()
	s, err := Run(nodes...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Run starts a stand-in serving the given nodes (default: node 1); Close
// stops it.
func Run(nodes ...int) (*Service, error) {
	if len(nodes) == 0 {
		nodes = []int{1}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Service{URL: "http://" + ln.Addr().String(), ln: ln, nodes: nodes, objects: map[key]*object{},
		fetch: &http.Client{Timeout: 5 * time.Minute}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Close stops the stand-in, cutting calls in flight.
func (s *Service) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
}

// Next queues faults for the next add or update calls, one a call.
func (s *Service) Next(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// Calls returns the add and update calls received so far.
func (s *Service) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Versions is the number of versions of an object on a node.
func (s *Service) Versions(node int, id string) int {
	o := s.lookup(node, id)
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.versions)
}

// Objects lists the object ids a node holds.
func (s *Service) Objects(node int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.objects {
		if k.node == node {
			out = append(out, k.id)
		}
	}
	slices.Sort(out)
	return out
}

// Files returns the names and contents of a version's files (nil when
// there is no such version).
func (s *Service) Files(node int, id string, number int) map[string][]byte {
	o := s.lookup(node, id)
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if number < 1 || number > len(o.versions) {
		return nil
	}
	out := map[string][]byte{}
	for _, f := range o.versions[number-1].files {
		out[f.name] = f.data
	}
	return out
}

func (s *Service) lookup(node int, id string) *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[key{node, id}]
}

// exception is a failure as the service formats one: its name, HTTP
// status and detail.
type exception struct {
	status string
	code   int
	detail string
}

func (e *exception) Error() string { return e.status + ": " + e.detail }

// The service's exception names and their HTTP statuses.
var statusCodes = map[string]int{
	"REQUEST_INVALID": 400, "REQUEST_ITEM_EXISTS": 403, "REQUESTED_ITEM_NOT_FOUND": 404,
	"INVALID_OR_MISSING_PARM": 500, "GENERAL_EXCEPTION": 500, "INVALID_DATA_FORMAT": 500,
	"REQUEST_ELEMENT_UNSUPPORTED": 501, "EXTERNAL_SERVICE_UNAVAILABLE": 503,
}

func fail(status, format string, args ...any) *exception {
	return &exception{status: status, code: statusCodes[status], detail: fmt.Sprintf(format, args...)}
}

// serve routes a request by its path's segments, each decoded.
func (s *Service) serve(w http.ResponseWriter, r *http.Request) {
	raw := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	seg := make([]string, len(raw))
	for i, p := range raw {
		v, err := url.PathUnescape(p)
		if err != nil {
			s.answerError(w, "xml", fail("REQUEST_INVALID", "path segment %q cannot be decoded", p))
			return
		}
		seg[i] = v
	}
	switch {
	case r.Method == http.MethodPost && len(seg) == 3 && (seg[0] == "add" || seg[0] == "update"):
		s.store(w, r, seg[0], seg[1], seg[2])
	case r.Method == http.MethodGet && seg[0] == "state" && (len(seg) == 3 || len(seg) == 4):
		s.state(w, r, seg[1:])
	case r.Method == http.MethodGet && seg[0] == "manifest" && len(seg) == 3:
		s.manifest(w, seg[1], seg[2])
	case r.Method == http.MethodGet && seg[0] == "content" && len(seg) == 5:
		s.content(w, seg[1:])
	default:
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "no such resource: %s %s", r.Method, r.URL.Path))
	}
}

func (s *Service) node(nodeS string) (int, *exception) {
	n, err := strconv.Atoi(nodeS)
	if err != nil {
		return 0, fail("REQUEST_INVALID", "node %q is not a number", nodeS)
	}
	if !slices.Contains(s.nodes, n) {
		return 0, fail("REQUESTED_ITEM_NOT_FOUND", "node not found: %d", n)
	}
	return n, nil
}

// form reads the call's fields, multipart or URL-encoded, under one set
// of names.
func form(r *http.Request) (fields url.Values, form string, raw url.Values, err error) {
	ct := r.Header.Get("Content-Type")
	var names map[string]string
	switch {
	case strings.HasPrefix(ct, "multipart/form-data"):
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			return nil, "", nil, err
		}
		raw = url.Values(r.MultipartForm.Value)
		names = map[string]string{"url": "url", "manifest": "manifest", "size": "size", "digestType": "digestType",
			"digestValue": "digestValue", "localIdentifier": "localIdentifier", "localContext": "localContext",
			"delete": "delete", "responseForm": "responseForm"}
	case strings.HasPrefix(ct, "application/x-www-form-urlencoded"):
		if err := r.ParseForm(); err != nil {
			return nil, "", nil, err
		}
		raw = r.PostForm
		names = map[string]string{"url": "url", "manifest": "manifest", "size": "size", "digest-type": "digestType",
			"digest-value": "digestValue", "local-identifier": "localIdentifier", "local-context": "localContext",
			"delete": "delete", "t": "responseForm"}
	default:
		return nil, "", nil, fmt.Errorf("content type %q is neither a multipart nor a URL-encoded form", ct)
	}
	fields = url.Values{}
	for from, to := range names {
		if v := raw.Get(from); v != "" {
			fields.Set(to, v)
		}
	}
	return fields, fields.Get("responseForm"), raw, nil
}

func (s *Service) takeFault() (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults) == 0 {
		return Fault{}, false
	}
	f := s.faults[0]
	s.faults = s.faults[1:]
	return f, true
}

func (s *Service) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// store is an add or an update.
func (s *Service) store(w http.ResponseWriter, r *http.Request, action, nodeS, id string) {
	fields, respForm, raw, err := form(r)
	call := Call{Action: action, Object: id, Form: raw}
	call.Node, _ = strconv.Atoi(nodeS)
	answer := func(code int, write func()) {
		call.Code = code
		s.record(call)
		write()
	}
	if err != nil {
		e := fail("REQUEST_INVALID", "%v", err)
		answer(e.code, func() { s.answerError(w, "xml", e) })
		return
	}
	fault, faulty := s.takeFault()
	if faulty && fault.Refuse != 0 {
		st := fault.Status
		if st == "" {
			st = "REQUEST_INVALID"
			for name, code := range statusCodes {
				if code == fault.Refuse {
					st = name
				}
			}
		}
		wait(r.Context(), fault.Delay)
		answer(fault.Refuse, func() { s.answerError(w, respForm, &exception{status: st, code: fault.Refuse, detail: fault.Detail}) })
		return
	}
	node, e := s.node(nodeS)
	if e == nil {
		var vs versionState
		vs, e = s.makeVersion(r.Context(), action, node, id, fields)
		if e == nil {
			if faulty && fault.LoseAnswer {
				call.Code = 0
				s.record(call)
				if hj, ok := w.(http.Hijacker); ok {
					if c, _, err := hj.Hijack(); err == nil {
						c.Close()
					}
				}
				return
			}
			if faulty {
				wait(r.Context(), fault.Delay)
			}
			answer(http.StatusOK, func() { s.answerState(w, respForm, vs.state(s.URL)) })
			return
		}
	}
	answer(e.code, func() { s.answerError(w, respForm, e) })
}

func wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// addRow is one row of an add manifest.
type addRow struct {
	url, alg, digest, name, mimeType string
	size                             int64
}

// makeVersion fetches and checks the manifest and its files, then makes
// the version under the object's lock.
func (s *Service) makeVersion(ctx context.Context, action string, node int, id string, fields url.Values) (versionState, *exception) {
	if id == "" || !strings.Contains(id, ":") {
		return versionState{}, fail("REQUEST_INVALID", "object identifier invalid: %q", id)
	}
	manifest, e := s.manifestOf(ctx, fields)
	if e != nil {
		return versionState{}, e
	}
	var rows []addRow
	if manifest != nil {
		if rows, e = parseAddManifest(manifest); e != nil {
			return versionState{}, e
		}
	} else if action == ActionAdd {
		return versionState{}, fail("REQUEST_INVALID", "Neither manifest.txt nor url provided")
	}
	files := make([]storedFile, 0, len(rows))
	for _, row := range rows {
		f, e := s.fetchFile(ctx, row)
		if e != nil {
			return versionState{}, e
		}
		files = append(files, f)
	}
	s.mu.Lock()
	o := s.objects[key{node, id}]
	if o == nil {
		o = &object{}
		s.objects[key{node, id}] = o
	}
	s.mu.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	if lid := fields.Get("localIdentifier"); lid != "" {
		o.localID = lid
	}
	deletes := parseDeletes(fields.Get("delete"))
	if action == ActionAdd && len(deletes) > 0 {
		deletes = nil // an add reads no delete list
	}
	var current []storedFile
	if len(o.versions) > 0 {
		current = o.versions[len(o.versions)-1].files
	} else if len(deletes) > 0 {
		return versionState{}, fail("REQUEST_INVALID", "Delete list provided and no version exists")
	}
	next := files
	if action == ActionUpdate {
		merged := map[string]storedFile{}
		for _, f := range current {
			merged[f.name] = f
		}
		for _, d := range deletes {
			if _, ok := merged[d]; !ok {
				return versionState{}, fail("REQUEST_INVALID", "Delete list component not found:%s", d)
			}
			delete(merged, d)
		}
		for _, f := range files {
			merged[f.name] = f
		}
		next = next[:0:0]
		for _, f := range merged {
			next = append(next, f)
		}
		slices.SortFunc(next, func(a, b storedFile) int { return strings.Compare(a.name, b.name) })
	}
	if len(next) == 0 {
		return versionState{}, fail("REQUEST_INVALID", "a version needs at least one file")
	}
	v := version{number: len(o.versions) + 1, created: time.Now().UTC(), files: next}
	o.versions = append(o.versions, v)
	return versionState{node: node, id: id, v: v}, nil
}

const maxManifest = 64 << 20

// manifestOf is the call's manifest: given inline, or fetched from its
// URL; checked against the size and digest given. nil: neither given.
func (s *Service) manifestOf(ctx context.Context, fields url.Values) ([]byte, *exception) {
	var data []byte
	switch {
	case fields.Get("manifest") != "" && fields.Get("manifest") != "none":
		data = []byte(fields.Get("manifest"))
	case fields.Get("url") != "" && fields.Get("url") != "none":
		u, err := url.Parse(fields.Get("url"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fail("REQUEST_INVALID", "Manifest URL is invalid:%s", fields.Get("url"))
		}
		resp, err := s.get(ctx, u.String())
		if err != nil {
			return nil, fail("REQUEST_INVALID", "Unable to obtain manifest: %v", err)
		}
		defer resp.Body.Close()
		if data, err = io.ReadAll(io.LimitReader(resp.Body, maxManifest)); err != nil {
			return nil, fail("REQUEST_INVALID", "Unable to obtain manifest: %v", err)
		}
	default:
		return nil, nil
	}
	if sz := fields.Get("size"); sz != "" {
		n, err := strconv.ParseInt(sz, 10, 64)
		if err != nil {
			return nil, fail("REQUEST_INVALID", "validateManifest - manifest size not numeric:%s", sz)
		}
		if n != int64(len(data)) {
			return nil, fail("INVALID_DATA_FORMAT", "validateManifest - size argument does not match passed manifest - passed size=%d - manifest size=%d", n, len(data))
		}
	}
	if typ, val := fields.Get("digestType"), fields.Get("digestValue"); strings.TrimSpace(typ) != "" && strings.TrimSpace(val) != "" {
		h := newHash(typ)
		if h == nil {
			return nil, fail("INVALID_DATA_FORMAT", "validateManifest - digest type not supported: %s", typ)
		}
		h.Write(data)
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, val) {
			return nil, fail("INVALID_DATA_FORMAT", "validateManifest - Fixity fails: %s is %s, the call says %s", typ, got, val)
		}
	}
	return data, nil
}

func (s *Service) get(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.fetch.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	return resp, nil
}

// newHash is the digest an algorithm names, read as the service reads the
// name: lower-cased, without '-'.
func newHash(alg string) hash.Hash {
	switch strings.ReplaceAll(strings.ToLower(strings.TrimSpace(alg)), "-", "") {
	case "md5":
		return md5.New()
	case "sha1":
		return sha1.New()
	case "sha256":
		return sha256.New()
	case "sha512":
		return sha512.New()
	}
	return nil
}

// The add manifest's profiles and the namespaces of its prefixes.
var (
	addProfiles = []string{"http://uc3.cdlib.org/registry/store/manifest/mrt-add-manifest",
		"http://uc3.cdlib.org/registry/mrt/mrt-add-manifest"}
	namespaces = map[string]string{
		"http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#":  "nfo",
		"http://www.semanticdesktop.org/ontologies/2007/01/19/nie/#": "nie",
		"http://uc3.cdlib.org/ontology/mrt/mom#":                     "mrt",
	}
	// columns a name may take, by namespace.
	columnNames = map[string][]string{
		"nfo": {"fileurl", "hashalgorithm", "hashvalue", "filesize", "filelastmodified", "filename"},
		"nie": {"mimetype"},
		"mrt": {"primaryidentifier", "localidentifier", "creator", "title", "date"},
	}
)

const (
	// ActionAdd and ActionUpdate are the calls that make a version.
	ActionAdd    = "add"
	ActionUpdate = "update"
)

// parseAddManifest reads an add manifest as the service does: headers
// lower-cased, a profile it knows, every column's namespace declared by a
// #%prefix, columns it knows; a row per file.
func parseAddManifest(data []byte) ([]addRow, *exception) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	prefixes := map[string]string{}
	var profile string
	var cols []string
	var rows []addRow
	eof := false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if strings.HasPrefix(line, "#%") {
			low := strings.ToLower(line)
			parts := splitRow(low)
			switch parts[0] {
			case "#%checkm_0.7":
			case "#%profile":
				if len(parts) > 1 {
					profile = strings.Join(parts[1:], "|")
				}
			case "#%prefix":
				if len(parts) != 2 {
					return nil, fail("REQUEST_INVALID", "#%%prefix line invalid: %s", line)
				}
				name, uri, ok := strings.Cut(parts[1], ":<")
				if !ok || !strings.HasSuffix(uri, ">") {
					return nil, fail("REQUEST_INVALID", "#%%prefix line invalid: %s", line)
				}
				if ns, known := namespaces[strings.TrimSuffix(uri, ">")]; known {
					prefixes[name] = ns
				}
			case "#%columns":
				if cols != nil {
					return nil, fail("REQUEST_INVALID", "multiple #@COLUMN supplied")
				}
				for _, c := range parts[1:] {
					p, n, ok := strings.Cut(c, ":")
					if !ok {
						return nil, fail("REQUEST_INVALID", "namespace not supported - item=%s", c)
					}
					ns, declared := prefixes[p]
					if !declared {
						return nil, fail("REQUEST_INVALID", "namespace not supported - item=%s", c)
					}
					if !slices.Contains(columnNames[ns], n) {
						return nil, fail("REQUEST_INVALID", "name not supported:%s", c)
					}
					cols = append(cols, n)
				}
			case "#%eof":
				eof = true
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if profile == "" {
			return nil, fail("INVALID_OR_MISSING_PARM", "setHeaders - manifestProfile is missing")
		}
		if !slices.Contains(addProfiles, profile) {
			return nil, fail("REQUEST_INVALID", "handleHeaders - manifestProfile does not match expected form - input:%s", profile)
		}
		if cols == nil {
			return nil, fail("REQUEST_INVALID", "#@columns not supplied")
		}
		values := splitRow(line)
		if len(values) > len(cols) {
			return nil, fail("REQUEST_INVALID", "row has %d values, the manifest %d columns: %s", len(values), len(cols), line)
		}
		var row addRow
		row.size = -1
		for i, v := range values {
			switch cols[i] {
			case "fileurl":
				row.url = v
			case "hashalgorithm":
				row.alg = v
			case "hashvalue":
				row.digest = strings.ToLower(v)
			case "filesize":
				if v != "" {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return nil, fail("REQUEST_INVALID", "file size not numeric: %s", v)
					}
					row.size = n
				}
			case "filename":
				row.name = v
			case "mimetype":
				row.mimeType = v
			}
		}
		if row.url == "" || row.name == "" {
			return nil, fail("REQUEST_INVALID", "row without a file URL or file name: %s", line)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fail("REQUEST_INVALID", "the manifest cannot be read: %v", err)
	}
	if !eof {
		return nil, fail("REQUEST_INVALID", "EOF without #%%EOF terminator header")
	}
	if len(rows) == 0 {
		return nil, fail("REQUEST_INVALID", "the manifest lists no file")
	}
	return rows, nil
}

func splitRow(line string) []string {
	parts := strings.Split(line, "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// fetchFile fetches one file of a manifest and checks it.
func (s *Service) fetchFile(ctx context.Context, row addRow) (storedFile, *exception) {
	resp, err := s.get(ctx, row.url)
	if err != nil {
		return storedFile{}, fail("REQUEST_INVALID", "%s: file cannot be fetched: %v", row.name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return storedFile{}, fail("REQUEST_INVALID", "%s: file cannot be fetched: %v", row.name, err)
	}
	if row.size >= 0 && int64(len(data)) != row.size {
		return storedFile{}, fail("INVALID_DATA_FORMAT", "%s: size %d, the manifest says %d", row.name, len(data), row.size)
	}
	if row.alg != "" || row.digest != "" {
		h := newHash(row.alg)
		if h == nil {
			return storedFile{}, fail("INVALID_DATA_FORMAT", "%s: digest type not supported: %s", row.name, row.alg)
		}
		h.Write(data)
		if got := hex.EncodeToString(h.Sum(nil)); got != row.digest {
			return storedFile{}, fail("INVALID_DATA_FORMAT", "%s: fixity fails: %s is %s, the manifest says %s", row.name, row.alg, got, row.digest)
		}
	}
	sum := sha256.Sum256(data)
	return storedFile{name: row.name, mimeType: row.mimeType, data: data, sha256: hex.EncodeToString(sum[:])}, nil
}

func parseDeletes(s string) []string {
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		if line = strings.TrimRight(line, "\r"); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// versionState is a version to answer with.
type versionState struct {
	node int
	id   string
	v    version
}

// stateDoc is a state answer before it is formatted: its root element,
// namespace, and elements in order (a value is a string, an int64, a bool,
// or []string for an element given once per value).
type stateDoc struct {
	root, prefix, ns string
	elems            []elem
}

type elem struct {
	name  string
	value any
	// list is the element that wraps a []string, the value element's name
	// being name.
	list string
}

// enc spells an id in a URL as the service does (Java's URLEncoder):
// letters, digits and ".-*_" stay, a space is "+", all else %XX.
func enc(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (vs versionState) state(base string) stateDoc {
	var size int64
	var fileStates []string
	for _, f := range vs.v.files {
		size += int64(len(f.data))
		fileStates = append(fileStates, fmt.Sprintf("%s/state/%d/%s/%d/%s", base, vs.node, enc(vs.id), vs.v.number, enc(f.name)))
	}
	return stateDoc{root: "versionState", prefix: "ver", ns: "http://uc3.cdlib.org/ontology/mrt/store/version", elems: []elem{
		{name: "objectState", value: fmt.Sprintf("%s/state/%d/%s", base, vs.node, enc(vs.id))},
		{name: "version", value: fmt.Sprintf("%s/content/%d/%s/%d", base, vs.node, enc(vs.id), vs.v.number)},
		{name: "fileState", list: "fileStates", value: fileStates},
		{name: "objectID", value: vs.id},
		{name: "identifier", value: int64(vs.v.number)},
		{name: "created", value: vs.v.created.Format(time.RFC3339)},
		{name: "current", value: true},
		{name: "numFiles", value: int64(len(vs.v.files))},
		{name: "totalSize", value: size},
		{name: "numActualFiles", value: int64(len(vs.v.files))},
		{name: "totalActualSize", value: size},
	}}
}

// state answers about an object or one of its versions.
func (s *Service) state(w http.ResponseWriter, r *http.Request, seg []string) {
	respForm := r.URL.Query().Get("t")
	node, e := s.node(seg[0])
	if e != nil {
		s.answerError(w, respForm, e)
		return
	}
	o := s.lookup(node, seg[1])
	if o != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	if o == nil || len(o.versions) == 0 {
		s.answerError(w, respForm, fail("REQUESTED_ITEM_NOT_FOUND", "object not found: %s", seg[1]))
		return
	}
	if len(seg) == 3 {
		n, err := strconv.Atoi(seg[2])
		if err != nil || n < 0 || n > len(o.versions) {
			s.answerError(w, respForm, fail("REQUESTED_ITEM_NOT_FOUND", "version not found: %s", seg[2]))
			return
		}
		if n == 0 {
			n = len(o.versions)
		}
		s.answerState(w, respForm, versionState{node: node, id: seg[1], v: o.versions[n-1]}.state(s.URL))
		return
	}
	cur := o.versions[len(o.versions)-1]
	var size int64
	for _, f := range cur.files {
		size += int64(len(f.data))
	}
	var versions []string
	for _, v := range o.versions {
		versions = append(versions, fmt.Sprintf("%s/state/%d/%s/%d", s.URL, node, enc(seg[1]), v.number))
	}
	s.answerState(w, respForm, stateDoc{root: "objectState", prefix: "obj", ns: "http://uc3.cdlib.org/ontology/mrt/store/object", elems: []elem{
		{name: "identifier", value: seg[1]},
		{name: "numFiles", value: int64(len(cur.files))},
		{name: "size", value: size},
		{name: "numVersions", value: int64(len(o.versions))},
		{name: "totalActualSize", value: size},
		{name: "numActualFiles", value: int64(len(cur.files))},
		{name: "object", value: fmt.Sprintf("%s/content/%d/%s", s.URL, node, enc(seg[1]))},
		{name: "versionState", list: "versionStates", value: versions},
		{name: "currentVersionState", value: versions[len(versions)-1]},
		{name: "nodeID", value: int64(node)},
		{name: "lastAddVersion", value: cur.created.Format(time.RFC3339)},
		{name: "localID", value: o.localID},
	}})
}

// manifest answers with the object's manifest of every version.
func (s *Service) manifest(w http.ResponseWriter, nodeS, id string) {
	node, e := s.node(nodeS)
	if e != nil {
		s.answerError(w, "xml", e)
		return
	}
	o := s.lookup(node, id)
	if o != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
	}
	if o == nil || len(o.versions) == 0 {
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "object not found: %s", id))
		return
	}
	var b strings.Builder
	x := xmlEscape
	cur := o.versions[len(o.versions)-1]
	var total int64
	for _, f := range cur.files {
		total += int64(len(f.data))
	}
	b.WriteString("<?xml version=\"1.1\"?>\n<objectInfo xmlns=\"http://uc3.cdlib.org/ontology/mrt/manifest\">\n")
	fmt.Fprintf(&b, "  <object id=\"%s\">\n", x(id))
	fmt.Fprintf(&b, "    <current>%d</current>\n    <fileCount>%d</fileCount>\n    <totalSize>%d</totalSize>\n", len(o.versions), len(cur.files), total)
	fmt.Fprintf(&b, "    <actualCount>%d</actualCount>\n    <actualSize>%d</actualSize>\n    <versionCount>%d</versionCount>\n", len(cur.files), total, len(o.versions))
	fmt.Fprintf(&b, "    <lastAddVersion>%s</lastAddVersion>\n  </object>\n  <versions>\n", cur.created.Format(time.RFC3339))
	for _, v := range o.versions {
		var size int64
		for _, f := range v.files {
			size += int64(len(f.data))
		}
		fmt.Fprintf(&b, "    <version id=\"%d\">\n      <manifest count=\"%d\" size=\"%d\" created=\"%s\">\n", v.number, len(v.files), size, v.created.Format(time.RFC3339))
		for _, f := range v.files {
			fmt.Fprintf(&b, "        <file id=\"%s\">\n", x(f.name))
			fmt.Fprintf(&b, "          <digestType>SHA-256</digestType>\n          <digest>%s</digest>\n          <size>%d</size>\n", f.sha256, len(f.data))
			fmt.Fprintf(&b, "          <creationDate>%s</creationDate>\n", v.created.Format(time.RFC3339))
			if f.mimeType != "" {
				fmt.Fprintf(&b, "          <mimeType>%s</mimeType>\n", x(f.mimeType))
			}
			fmt.Fprintf(&b, "          <key>%s</key>\n        </file>\n", x(fmt.Sprintf("%s|%d|%s", id, v.number, f.name)))
		}
		b.WriteString("      </manifest>\n    </version>\n")
	}
	b.WriteString("  </versions>\n</objectInfo>\n")
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("Content-Disposition", "attachment; filename="+enc(id)+"--manifest.xml")
	io.WriteString(w, b.String())
}

// content answers with one stored file.
func (s *Service) content(w http.ResponseWriter, seg []string) {
	node, e := s.node(seg[0])
	if e != nil {
		s.answerError(w, "xml", e)
		return
	}
	o := s.lookup(node, seg[1])
	n, err := strconv.Atoi(seg[2])
	if o == nil || err != nil {
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "not found: %s version %s", seg[1], seg[2]))
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if n < 1 || n > len(o.versions) {
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "version not found: %d", n))
		return
	}
	for _, f := range o.versions[n-1].files {
		if f.name == seg[3] {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(f.data)
			return
		}
	}
	s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "file not found: %s", seg[3]))
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// answerState writes a state in the form asked, status 200.
func (s *Service) answerState(w http.ResponseWriter, respForm string, d stateDoc) {
	s.write(w, respForm, http.StatusOK, d)
}

// answerError writes an exception as the service formats one, with its
// HTTP status.
func (s *Service) answerError(w http.ResponseWriter, respForm string, e *exception) {
	if e.code == 0 {
		e.code = http.StatusInternalServerError
	}
	d := stateDoc{root: "tException." + e.status, prefix: "exc", ns: "http://uc3.cdlib.org/ontology/mrt/core/exc", elems: []elem{
		{name: "status", value: e.status},
		{name: "statusName", value: e.status},
		{name: "hTTPResponse", value: int64(e.code)},
		{name: "detail", value: e.detail},
		{name: "error", value: "StandIn-" + e.status + "[" + e.status + "] " + e.detail},
	}}
	s.write(w, respForm, e.code, d)
}

// write formats a state document: XML as the service writes it; JSON as
// its JSON formatter turns that XML into JSON; ANVL as name: value lines.
func (s *Service) write(w http.ResponseWriter, respForm string, code int, d stateDoc) {
	var body []byte
	ctype := "text/xml"
	switch strings.ToLower(respForm) {
	case "json":
		ctype = "application/json"
		inner := map[string]any{"xmlns:" + d.prefix: d.ns}
		for _, e := range d.elems {
			name := d.prefix + ":" + e.name
			if e.list != "" {
				vals := e.value.([]string)
				if len(vals) == 0 {
					continue
				}
				var v any = vals[0]
				if len(vals) > 1 {
					v = vals
				}
				inner[d.prefix+":"+e.list] = map[string]any{name: v}
				continue
			}
			inner[name] = jsonValue(e.value)
		}
		body, _ = json.Marshal(map[string]any{d.prefix + ":" + d.root: inner})
	case "anvl":
		ctype = "text/x-anvl"
		var b strings.Builder
		for _, e := range d.elems {
			if e.list != "" {
				for _, v := range e.value.([]string) {
					fmt.Fprintf(&b, "%s: %s\n", e.name, v)
				}
				continue
			}
			fmt.Fprintf(&b, "%s: %v\n", e.name, e.value)
		}
		body = []byte(b.String())
	default:
		var b strings.Builder
		b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
		fmt.Fprintf(&b, "<%s:%s xmlns:%s='%s'>", d.prefix, d.root, d.prefix, d.ns)
		for _, e := range d.elems {
			if e.list != "" {
				vals := e.value.([]string)
				if len(vals) == 0 {
					continue
				}
				fmt.Fprintf(&b, "\n  <%s:%s>", d.prefix, e.list)
				for _, v := range vals {
					fmt.Fprintf(&b, "\n    <%s:%s>%s</%s:%s>", d.prefix, e.name, xmlEscape(v), d.prefix, e.name)
				}
				fmt.Fprintf(&b, "\n  </%s:%s>", d.prefix, e.list)
				continue
			}
			fmt.Fprintf(&b, "\n  <%s:%s>%s</%s:%s>", d.prefix, e.name, xmlEscape(fmt.Sprint(e.value)), d.prefix, e.name)
		}
		fmt.Fprintf(&b, "\n</%s:%s>\n", d.prefix, d.root)
		body = []byte(b.String())
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(code)
	w.Write(body)
}

// jsonValue is a value as the service's XML-to-JSON conversion gives it:
// text that reads as a number or a boolean becomes one.
func jsonValue(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && strconv.FormatInt(n, 10) == s {
		return n
	}
	if s == "true" || s == "false" {
		return s == "true"
	}
	return s
}
