package merritttest

import (
	"context"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// route routes a request by its path's segments, each decoded.
func (s *Service) route(w http.ResponseWriter, r *http.Request) {
	raw := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	seg := make([]string, len(raw))
	for i, p := range raw {
		v, err := url.PathUnescape(p)
		if err != nil {
			s.answerError(w, "xml", fail("REQUEST_INVALID", "JerseyBase", "getObjectID", "path segment %q cannot be decoded", p))
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
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "JerseyStorage", "route", "no such resource: %s %s", r.Method, r.URL.Path))
	}
}

// node is the node a call names, REQUESTED_ITEM_NOT_FOUND when the
// service has no such node (as its node lookup says).
func (s *Service) node(nodeS string) (int, *exception) {
	n, err := strconv.Atoi(nodeS)
	if err != nil {
		return 0, fail("REQUEST_INVALID", "JerseyBase", "getNodeID", "nodeID not numeric:%s", nodeS)
	}
	if !slices.Contains(s.nodes, n) {
		return 0, fail("REQUESTED_ITEM_NOT_FOUND", "StorageServiceAbs", "getNodeLogger", "Node not found:%d", n)
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

// store is an add or an update. The call runs in the service's run, not
// the request's: a caller that hangs up does not stop it.
func (s *Service) store(w http.ResponseWriter, r *http.Request, action, nodeS, id string) {
	run, up := s.running()
	if !up {
		http.Error(w, "the service is stopping", http.StatusServiceUnavailable)
		return
	}
	defer s.calls.Done()
	fields, respForm, raw, err := form(r)
	call := Call{Action: action, Object: id, Form: raw}
	call.Node, _ = strconv.Atoi(nodeS)
	defer func() {
		call.CallerGone = r.Context().Err() != nil
		s.record(call)
	}()
	answerError := func(e *exception) {
		call.Code = e.httpCode()
		s.answerError(w, respForm, e)
	}
	if err != nil {
		answerError(fail("REQUEST_INVALID", "JerseyStorage", "callAddVersion", "%v", err))
		return
	}
	fault := s.takeFault()
	if !wait(run, fault.Hold) {
		panic(http.ErrAbortHandler) // the service went down: no answer goes out
	}
	if fault.HoldForNext {
		held := s.holdForNext(key{call.Node, id})
		defer close(held.done)
		select {
		case <-held.woken:
		case <-run.Done():
			panic(http.ErrAbortHandler)
		}
	}
	if fault.Refuse != 0 {
		e := &exception{status: fault.Status, code: fault.Refuse, detail: fault.Detail, class: "JerseyBase", method: "addVersion"}
		if e.status == "" {
			e.status = statusOfCode(fault.Refuse)
		}
		wait(r.Context(), fault.Delay)
		answerError(e)
		return
	}
	node, e := s.node(nodeS)
	if e != nil {
		answerError(e)
		return
	}
	vs, e := s.makeVersion(run, action, node, id, fields, fault.HoldCommit)
	if run.Err() != nil {
		panic(http.ErrAbortHandler) // the service went down: nothing was stored, no answer goes out
	}
	if e != nil {
		answerError(e)
		return
	}
	call.Version, call.Overwrote = vs.v.number, vs.overwrote
	if fault.LoseAnswer {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
		}
		return
	}
	wait(r.Context(), fault.Delay)
	call.Code = http.StatusOK
	s.write(w, respForm, http.StatusOK, vs.state(s.URL))
}

// wait waits d or until ctx ends; false when ctx ended.
func wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// makeVersion fetches and checks the manifest and the files the object
// does not hold, then makes the version.
func (s *Service) makeVersion(ctx context.Context, action string, node int, id string, fields url.Values, holdCommit time.Duration) (versionState, *exception) {
	if id == "" || !strings.Contains(id, ":") {
		return versionState{}, fail("REQUEST_INVALID", "JerseyBase", "getObjectID", "object identifier invalid: %q", id)
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
	} else if action == actionAdd {
		return versionState{}, fail("REQUEST_INVALID", "JerseyBase", "getManifest", "Neither manifest.txt nor url provided")
	}
	s.mu.Lock()
	o := s.objects[key{node, id}]
	if o == nil {
		o = &object{}
		s.objects[key{node, id}] = o
	}
	s.mu.Unlock()
	// The object's versions, read once as the call begins its work and
	// written back with the new one when it ends (see the package doc).
	o.mu.Lock()
	held := slices.Clone(o.versions)
	o.mu.Unlock()
	next := len(held) + 1
	files, e := s.fetchFiles(ctx, held, id, next, rows)
	if e != nil {
		return versionState{}, e
	}
	s.didFetch(ctx, key{node, id})
	if !wait(ctx, holdCommit) {
		return versionState{}, fail("GENERAL_EXCEPTION", "AddVersionContentAbs", "writeContent", "the service stopped")
	}
	deletes := parseDeletes(fields.Get("delete"))
	if action == actionAdd {
		deletes = nil // an add reads no delete list
	}
	var current []storedFile
	if len(held) > 0 {
		current = held[len(held)-1].files
	} else if len(deletes) > 0 {
		return versionState{}, fail("REQUEST_INVALID", "VersionMap", "getMergeComponents", "VersionMap: Delete list provided and no version exists")
	}
	made := files
	if action == actionUpdate {
		merged := map[string]storedFile{}
		for _, f := range current {
			merged[f.name] = f
		}
		for _, d := range deletes {
			if _, ok := merged[d]; !ok {
				return versionState{}, fail("REQUEST_INVALID", "VersionMap", "getMergeComponents", "VersionMap: Delete list component not found:%s", d)
			}
			delete(merged, d)
		}
		for _, f := range files {
			merged[f.name] = f
		}
		made = made[:0:0]
		for _, f := range merged {
			made = append(made, f)
		}
		slices.SortFunc(made, func(a, b storedFile) int { return strings.Compare(a.name, b.name) })
	}
	if len(made) == 0 {
		return versionState{}, fail("REQUEST_INVALID", "VersionMap", "addVersion", "a version needs at least one file")
	}
	v := version{number: next, created: time.Now().UTC(), files: made}
	o.mu.Lock()
	defer o.mu.Unlock()
	if lid := fields.Get("localIdentifier"); lid != "" {
		o.localID = lid
	}
	overwrote := len(o.versions) - len(held)
	o.versions = append(held, v)
	return versionState{node: node, id: id, v: v, overwrote: overwrote}, nil
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
			return nil, fail("REQUEST_INVALID", "JerseyBase", "getManifest", "Manifest URL is invalid:%s", fields.Get("url"))
		}
		var e *exception
		if data, e = s.get(ctx, u.String(), maxManifest); e != nil {
			return nil, e
		}
	default:
		return nil, nil
	}
	if sz := fields.Get("size"); sz != "" {
		n, err := strconv.ParseInt(sz, 10, 64)
		if err != nil {
			return nil, fail("REQUEST_INVALID", "JerseyBase", "validateManifest", "validateManifest - manifest size not numeric:%s", sz)
		}
		if n != int64(len(data)) {
			return nil, fail("INVALID_DATA_FORMAT", "JerseyBase", "validateManifest",
				"validateManifest - size argument does not match passed manifest - passed size=%d - manifest size=%d", n, len(data))
		}
	}
	if typ, val := fields.Get("digestType"), fields.Get("digestValue"); strings.TrimSpace(typ) != "" && strings.TrimSpace(val) != "" {
		h := newHash(typ)
		if h == nil {
			return nil, fail("INVALID_DATA_FORMAT", "JerseyBase", "validateManifest", "validateManifest - digest type not supported: %s", typ)
		}
		h.Write(data)
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, val) {
			return nil, fail("INVALID_DATA_FORMAT", "JerseyBase", "validateManifest",
				"JerseyBase: validateManifest - Fixity fails. - checksumType=%s - checksum=%s - manifest checksum=%s", typ, val, got)
		}
	}
	return data, nil
}

// get fetches u as the service fetches a manifest or a file: a 404 is
// REQUESTED_ITEM_NOT_FOUND, any other status but 2xx
// EXTERNAL_SERVICE_UNAVAILABLE, a failed connection or read
// GENERAL_EXCEPTION.
func (s *Service) get(ctx context.Context, u string, max int64) ([]byte, *exception) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fail("GENERAL_EXCEPTION", "HTTPUtil", "getObjectEntity", "HTTPUTIL: getObject- Exception:%v", err)
	}
	resp, err := s.fetch.Do(req)
	if err != nil {
		return nil, fail("GENERAL_EXCEPTION", "HTTPUtil", "getObjectEntity", "HTTPUTIL: getObject- Exception:%v", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fail("REQUESTED_ITEM_NOT_FOUND", "HTTPUtil", "getObjectEntity",
			"HTTPUTIL: getObject- Error during HttpClient processing - timeout:%d - URL:%s - responseCode:%d", 120000, u, resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return nil, fail("EXTERNAL_SERVICE_UNAVAILABLE", "HTTPUtil", "getObjectEntity",
			"HTTPUTIL: getObject- Error during HttpClient processing - timeout:%d - URL:%s - responseCode:%d", 120000, u, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max))
	if err != nil {
		return nil, fail("GENERAL_EXCEPTION", "HttpGet", "build", "HttpGet: url2File - Exception:%v", err)
	}
	return data, nil
}

// fetchFiles fetches and checks the manifest's files for version next of
// o, but for those o holds already under the same name, size and digest,
// which are kept as they are. A file that fails is tried once more; one
// that fails again fails the call as the service does, naming no file.
func (s *Service) fetchFiles(ctx context.Context, held []version, id string, next int, rows []addRow) ([]storedFile, *exception) {
	files := make([]storedFile, len(rows))
	var todo []int
	for i, row := range rows {
		if f, ok := holds(held, row); ok {
			files[i] = f
			continue
		}
		todo = append(todo, i)
	}
	for try := 0; try < 2 && len(todo) > 0; try++ {
		var failed []int
		for _, i := range todo {
			f, ok := s.fetchFile(ctx, rows[i], next)
			if !ok {
				failed = append(failed, i)
				continue
			}
			files[i] = f
		}
		todo = failed
	}
	if len(todo) > 0 {
		return nil, fail("GENERAL_EXCEPTION", "AddVersionContentAbs", "finalStatus", "Object Fails: - objectID=%s - version=%d", id, next)
	}
	return files, nil
}

// holds is the file of the versions held with the name, size and digest
// of row.
func holds(held []version, row addRow) (storedFile, bool) {
	if row.size < 0 || row.digest == "" {
		return storedFile{}, false
	}
	for _, v := range held {
		for _, f := range v.files {
			if f.name != row.name || int64(len(f.data)) != row.size {
				continue
			}
			h := newHash(row.alg)
			if h == nil {
				continue
			}
			h.Write(f.data)
			if hex.EncodeToString(h.Sum(nil)) == row.digest {
				return f, true
			}
		}
	}
	return storedFile{}, false
}

// fetchFile fetches one file of a manifest and checks its size and digest.
func (s *Service) fetchFile(ctx context.Context, row addRow, next int) (storedFile, bool) {
	data, e := s.get(ctx, row.url, 1<<40)
	if e != nil {
		return storedFile{}, false
	}
	if row.size >= 0 && int64(len(data)) != row.size {
		return storedFile{}, false
	}
	if row.alg != "" || row.digest != "" {
		h := newHash(row.alg)
		if h == nil {
			return storedFile{}, false
		}
		h.Write(data)
		if hex.EncodeToString(h.Sum(nil)) != row.digest {
			return storedFile{}, false
		}
	}
	sum := sha256.Sum256(data)
	return storedFile{name: row.name, mimeType: row.mimeType, data: data, sha256: hex.EncodeToString(sum[:]), stored: next}, true
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

const (
	actionAdd    = "add"
	actionUpdate = "update"
)
