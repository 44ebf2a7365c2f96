package merritttest_test

// Each test pins one behaviour of the stand-in to the source of Merritt's
// storage service (CDLUC3/mrt-store) or of its shared library
// (CDLUC3/mrt-core2) it follows, named in the test's comment.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/waittest"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// files serves a version's files and its add manifest, counting the GETs
// of each path; fail makes a path answer that status.
type files struct {
	srv *httptest.Server

	mu      sync.Mutex
	content map[string]string
	fail    map[string]int // path -> status to answer
	failN   map[string]int // path -> how many more GETs fail (with fail's status)
	gets    map[string]int
}

func serveFiles(t *testing.T) *files {
	f := &files{content: map[string]string{}, fail: map[string]int{}, failN: map[string]int{}, gets: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.gets[r.URL.Path]++
		body, ok := f.content[r.URL.Path]
		code := f.fail[r.URL.Path]
		if n, counted := f.failN[r.URL.Path]; counted {
			if n == 0 {
				code = 0
			} else {
				f.failN[r.URL.Path] = n - 1
			}
		}
		f.mu.Unlock()
		switch {
		case code != 0:
			w.WriteHeader(code)
		case !ok:
			http.NotFound(w, r)
		default:
			io.WriteString(w, body)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *files) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[path]
}

// manifest serves the files (name -> content) under prefix with an add
// manifest naming each by the name written (name -> the name as the
// manifest spells it; the name itself when absent), and returns its URL.
func (f *files) manifest(prefix string, contents map[string]string, spelled map[string]string) string {
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/store/manifest/mrt-add-manifest\n" +
		"#%prefix | nfo:<http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#>\n" +
		"#%prefix | nie:<http://www.semanticdesktop.org/ontologies/2007/01/19/nie/#>\n" +
		"#%prefix | mrt:<http://uc3.cdlib.org/ontology/mrt/mom#>\n" +
		"#%columns | nfo:fileURL | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | nie:mimeType\n")
	f.mu.Lock()
	defer f.mu.Unlock()
	i := 0
	for name, body := range contents {
		i++
		path := fmt.Sprintf("/%s/f%d", prefix, i)
		f.content[path] = body
		as := name
		if s, ok := spelled[name]; ok {
			as = s
		}
		fmt.Fprintf(&b, "%s%s | sha256 | %s | %d | | %s | text/plain\n", f.srv.URL, path, sha(body), len(body), as)
	}
	b.WriteString("#%eof\n")
	f.content["/"+prefix+"/manifest.txt"] = b.String()
	return f.srv.URL + "/" + prefix + "/manifest.txt"
}

// call posts an add or update as a multipart form, asking for the json
// form, and returns the status and body.
func call(t *testing.T, ctx context.Context, svc *merritttest.Service, action string, node int, object string, fields map[string]string) (int, []byte, error) {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	w.WriteField("responseForm", "json")
	for k, v := range fields {
		w.WriteField(k, v)
	}
	w.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/%s/%d/%s", svc.URL, action, node, encode(object)), &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func encode(s string) string { return strings.NewReplacer(":", "%3A", "/", "%2F").Replace(s) }

func get(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// exc reads a TException answered in the json form: its one root key and
// its fields.
func exc(t *testing.T, body []byte) (string, map[string]any) {
	t.Helper()
	var doc map[string]map[string]any
	if err := json.Unmarshal(body, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("the answer is not one JSON object: %v: %.300s", err, body)
	}
	for root, fields := range doc {
		return root, fields
	}
	return "", nil
}

const ark = "ark:/99999/fk4double"

// TestAnExceptionIsFormattedWithEveryGetterOfTExceptionItsTraceIncluded
// follows mrt-store's JerseyBase (a failure answers with the exception
// formatted in the form asked, with the exception's HTTP status) and
// mrt-core2's FormatterAbs.formatClass (every public getter of the class
// and its mrt superclasses is an element), TException (getStatus,
// getStatusName, getDescription, getStatusDescription, getHTTPResponse,
// getError = toString, getDetail, getTrace = the whole Java stack,
// getLocation, getClassName, getMethodName, getLineNumber, getAccessExcp),
// JSONFormatter (the XML converted to JSON) and XMLFormatNS.properties
// (prefix exc, namespace core/exc).
func TestAnExceptionIsFormattedWithEveryGetterOfTExceptionItsTraceIncluded(t *testing.T) {
	svc := merritttest.Start(t, 7)
	svc.Next(merritttest.Fault{Refuse: 400, Detail: "VersionMap: Delete list component not found:producer/nope.txt"})
	code, body, err := call(t, context.Background(), svc, "update", 7, ark, map[string]string{"delete": "producer/nope.txt"})
	if err != nil || code != http.StatusBadRequest {
		t.Fatalf("answer %d, %v", code, err)
	}
	root, f := exc(t, body)
	if root != "exc:tException.REQUEST_INVALID" || f["xmlns:exc"] != "http://uc3.cdlib.org/ontology/mrt/core/exc" {
		t.Errorf("root %q, namespace %v", root, f["xmlns:exc"])
	}
	for _, name := range []string{"methodName", "lineNumber", "className", "trace", "location", "status", "statusName",
		"description", "statusDescription", "hTTPResponse", "accessExcp", "error", "detail"} {
		if _, ok := f["exc:"+name]; !ok {
			t.Errorf("no exc:%s in %v", name, f)
		}
	}
	if f["exc:statusName"] != "REQUEST_INVALID" || f["exc:detail"] != "VersionMap: Delete list component not found:producer/nope.txt" ||
		f["exc:hTTPResponse"] != float64(400) || !strings.Contains(f["exc:error"].(string), "REQUEST_INVALID[User/request supplied required parm is missing or invalid]") {
		t.Errorf("exception %v", f)
	}
	trace, _ := f["exc:trace"].(string)
	if len(trace) < 6<<10 || !strings.HasPrefix(trace, "org.cdlib.mrt.utility.TException$REQUEST_INVALID") || !strings.Contains(trace, "\tat org.apache.catalina") {
		t.Errorf("trace of %d bytes: %.200q", len(trace), trace)
	}
	// The trace comes before the service's words: a reader that keeps the
	// start of the answer only loses them.
	if i, j := bytes.Index(body, []byte(`"exc:trace"`)), bytes.Index(body, []byte(`"exc:detail"`)); i < 0 || j < i || j < 4<<10 {
		t.Errorf("the trace at %d, the detail at %d", i, j)
	}

	// The XML form, the default.
	svc.Next(merritttest.Fault{Refuse: 503, Detail: "cloud down"})
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	w.WriteField("url", "http://127.0.0.1:1/m")
	w.Close()
	resp, err := http.Post(svc.URL+"/add/7/"+encode(ark), w.FormDataContentType(), &b)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		XMLName    xml.Name
		StatusName string `xml:"statusName"`
		Detail     string `xml:"detail"`
		Trace      string `xml:"trace"`
	}
	if err := xml.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 503 || doc.XMLName.Local != "tException.EXTERNAL_SERVICE_UNAVAILABLE" ||
		doc.StatusName != "EXTERNAL_SERVICE_UNAVAILABLE" || doc.Detail != "cloud down" || len(doc.Trace) < 6<<10 {
		t.Errorf("XML answer %d %v: %+v", resp.StatusCode, err, doc.XMLName)
	}
}

// TestAManifestThatCannotBeFetchedIsAnsweredAsHTTPUtilFailsIt follows
// mrt-store's JerseyBase.getManifest and FileFromUrl.getFile, which pass
// on the exception of mrt-core2's HTTPUtil.getObjectEntity: a 404 is
// REQUESTED_ITEM_NOT_FOUND (404), any other status but 2xx
// EXTERNAL_SERVICE_UNAVAILABLE (503), a connection or read that fails
// GENERAL_EXCEPTION (500).
func TestAManifestThatCannotBeFetchedIsAnsweredAsHTTPUtilFailsIt(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	fs.fail["/broken/manifest.txt"] = http.StatusInternalServerError
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/manifest.txt"
	ln.Close()
	for _, c := range []struct {
		url    string
		code   int
		status string
	}{
		{fs.srv.URL + "/gone/manifest.txt", 404, "REQUESTED_ITEM_NOT_FOUND"},
		{fs.srv.URL + "/broken/manifest.txt", 503, "EXTERNAL_SERVICE_UNAVAILABLE"},
		{closed, 500, "GENERAL_EXCEPTION"},
	} {
		code, body, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": c.url})
		if err != nil {
			t.Fatal(err)
		}
		if _, f := exc(t, body); code != c.code || f["exc:statusName"] != c.status {
			t.Errorf("%s: %d %v, want %d %s", c.url, code, f["exc:statusName"], c.code, c.status)
		}
	}
	if n := svc.Versions(7, ark); n != 0 {
		t.Errorf("%d versions", n)
	}
}

// TestAFileThatFailsIsTriedOnceMoreThenTheCallFailsNamingNoFile follows
// mrt-store's AddVersionContentAbs: a file that fails (writeComponent,
// setThreadFail) goes to the fail list, writeFails tries the list once
// more, and finalStatus fails the call with GENERAL_EXCEPTION "Object
// Fails" naming the object and version, no file; nothing is kept.
func TestAFileThatFailsIsTriedOnceMoreThenTheCallFailsNamingNoFile(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	// Failing once: the second try stores it.
	u := fs.manifest("once", map[string]string{"producer/a.txt": "alpha"}, nil)
	fs.fail["/once/f1"], fs.failN["/once/f1"] = http.StatusBadGateway, 1
	if code, body, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": u}); err != nil || code != 200 {
		t.Fatalf("a file failing once: %d %v %.300s", code, err, body)
	}
	if n := fs.count("/once/f1"); n != 2 {
		t.Errorf("the file failing once was fetched %d times, want 2", n)
	}
	// Failing always: fetched twice, then the call fails.
	u = fs.manifest("always", map[string]string{"producer/b.txt": "beta"}, nil)
	fs.fail["/always/f1"] = http.StatusInternalServerError
	code, body, err := call(t, context.Background(), svc, "update", 7, ark, map[string]string{"url": u})
	if err != nil {
		t.Fatal(err)
	}
	_, f := exc(t, body)
	detail, _ := f["exc:detail"].(string)
	if code != 500 || f["exc:statusName"] != "GENERAL_EXCEPTION" || !strings.HasPrefix(detail, "Object Fails") ||
		!strings.Contains(detail, ark) || strings.Contains(detail, "b.txt") || strings.Contains(detail, "/always/f1") {
		t.Errorf("a file failing always: %d %v %q", code, f["exc:statusName"], detail)
	}
	if n := fs.count("/always/f1"); n != 2 {
		t.Errorf("the failing file was fetched %d times, want 2", n)
	}
	if n := svc.Versions(7, ark); n != 1 {
		t.Errorf("%d versions, want the first only", n)
	}
}

// TestAFileTheObjectHoldsIsNotFetchedAgainNorCountedAsStored follows
// mrt-core2's VersionMap.setCloudComponent and isMatch (a file of the
// manifest whose name the object holds with the same size and digest
// takes the stored file's key) and mrt-store's
// AddVersionContentAbs.writeComponents (a file with a key is not fetched)
// and StoreMapStates.getVersionState (numActualFiles and totalActualSize
// count what the version stored anew).
func TestAFileTheObjectHoldsIsNotFetchedAgainNorCountedAsStored(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	u := fs.manifest("v1", map[string]string{"producer/a.txt": "alpha"}, nil)
	if code, _, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": u}); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	u = fs.manifest("v2", map[string]string{"producer/a.txt": "alpha"}, nil)
	code, body, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": u})
	if err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if n := fs.count("/v2/f1"); n != 0 {
		t.Errorf("a file the object holds was fetched %d times", n)
	}
	var doc struct {
		V map[string]any `json:"ver:versionState"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.V["ver:identifier"] != float64(2) || doc.V["ver:numFiles"] != float64(1) || doc.V["ver:numActualFiles"] != float64(0) ||
		doc.V["ver:totalActualSize"] != float64(0) || doc.V["ver:totalSize"] != float64(5) {
		t.Errorf("version 2: %v", doc.V)
	}
	if got := svc.Files(7, ark, 2); string(got["producer/a.txt"]) != "alpha" {
		t.Errorf("version 2 holds %v", got)
	}
}

// TestTheStateOfAnObjectOnANodeTheServiceDoesNotHaveIs500 follows
// mrt-store's JerseyBase.getObjectState for a list of nodes (the route of
// state/{nodeids}/{objectid}): a node it cannot find is
// INVALID_OR_MISSING_PARM "Required node not found", HTTP 500; an object
// the node does not hold is 404 (store-it's ServiceDriverIT).
func TestTheStateOfAnObjectOnANodeTheServiceDoesNotHaveIs500(t *testing.T) {
	svc := merritttest.Start(t, 7)
	code, body := get(t, svc.URL+"/state/8/"+encode(ark)+"?t=json")
	if _, f := exc(t, body); code != 500 || f["exc:statusName"] != "INVALID_OR_MISSING_PARM" || !strings.Contains(f["exc:detail"].(string), "Required node not found") {
		t.Errorf("unknown node: %d %v", code, f)
	}
	if code, _ := get(t, svc.URL+"/state/7/"+encode(ark)+"?t=json"); code != 404 {
		t.Errorf("unknown object: %d", code)
	}
}

// TestACallWhoseCallerHungUpStillCommits: mrt-store's JerseyStorage runs
// an add in the request's servlet thread to its end (JerseyBase.addVersion
// calls the storage service and formats the answer), with nothing that
// stops it when the client goes away: the version is made all the same.
func TestACallWhoseCallerHungUpStillCommits(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	u := fs.manifest("v1", map[string]string{"producer/a.txt": "alpha"}, nil)
	svc.Next(merritttest.Fault{Hold: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := call(t, ctx, svc, "add", 7, ark, map[string]string{"url": u}); err == nil {
		t.Fatal("the call answered before its caller gave up")
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	calls, err := svc.WaitCalls(wctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := calls[0]; !c.CallerGone || c.Version != 1 || svc.Versions(7, ark) != 1 {
		t.Errorf("call %+v; %d versions", c, svc.Versions(7, ark))
	}
}

// TestNamesInTheManifestAreDecodedAsCheckmDecDoes follows mrt-core2's
// Checkm.setRow and getVal: every value of a row but the file URL is read
// through Checkm.dec, which makes "%20" a space and then "%7c" a '|', and
// decodes nothing else (not "%7C", not "%25").
func TestNamesInTheManifestAreDecodedAsCheckmDecDoes(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	contents := map[string]string{"producer/a.txt": "1", "producer/b.txt": "2", "producer/c.txt": "3", "producer/d.txt": "4"}
	spelled := map[string]string{"producer/a.txt": "producer/100%20off.txt", "producer/b.txt": "producer/a%7cb.txt",
		"producer/c.txt": "producer/x%7Cy.txt", "producer/d.txt": "producer/p%25q.txt"}
	u := fs.manifest("v1", contents, spelled)
	if code, body, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": u}); err != nil || code != 200 {
		t.Fatalf("%d %v %.300s", code, err, body)
	}
	got := svc.Files(7, ark, 1)
	for stored, body := range map[string]string{"producer/100 off.txt": "1", "producer/a|b.txt": "2", "producer/x%7Cy.txt": "3", "producer/p%25q.txt": "4"} {
		if string(got[stored]) != body {
			t.Errorf("%q holds %q, want %q (stored: %v)", stored, got[stored], body, got)
		}
	}
}

// TestARestartEndsTheCallsInFlightWithNothingStored: a call in flight
// when the service restarts ends with its JVM, before it writes the
// version map (mrt-store's AddVersionContentAbs writes it last,
// writeVersionMap); the objects stored before stay, and the service
// refuses connections while it is down.
func TestARestartEndsTheCallsInFlightWithNothingStored(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	u := fs.manifest("v1", map[string]string{"producer/a.txt": "alpha"}, nil)
	if code, _, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": u}); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	svc.Next(merritttest.Fault{HoldCommit: time.Minute})
	done := make(chan error, 1)
	go func() {
		_, _, err := call(t, context.Background(), svc, "update", 7, ark, map[string]string{"url": u})
		done <- err
	}()
	waittest.True(t, time.Minute, "the update read its manifest", func() bool { return fs.count("/v1/manifest.txt") >= 2 })
	svc.Down()
	if err := <-done; err == nil {
		t.Error("the call in flight answered across the restart")
	}
	if _, err := http.Get(svc.URL + "/state/7/" + encode(ark)); err == nil {
		t.Error("the service answered while down")
	}
	if err := svc.Up(); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, svc.URL+"/state/7/"+encode(ark)+"?t=json"); code != 200 || svc.Versions(7, ark) != 1 {
		t.Errorf("after the restart: state %d, %d versions, want 200 and 1", code, svc.Versions(7, ark))
	}
}

// TestOfTwoOverlappingCallsTheLaterDropsTheVersionOfTheOther follows
// mrt-store's AddVersionContentAbs: a call reads the object's version map
// when it begins its work (the constructor's getVersionMapAdd, once
// JerseyBase has the manifest) and writes the whole map back when it is
// done (writeVersionMap), so a version another call made in between is
// lost from it.
func TestOfTwoOverlappingCallsTheLaterDropsTheVersionOfTheOther(t *testing.T) {
	svc := merritttest.Start(t, 7)
	fs := serveFiles(t)
	first := fs.manifest("first", map[string]string{"producer/a.txt": "first"}, nil)
	second := fs.manifest("second", map[string]string{"producer/a.txt": "second"}, nil)
	svc.Next(merritttest.Fault{HoldCommit: 500 * time.Millisecond})
	done := make(chan int, 1)
	go func() {
		code, _, _ := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": first})
		done <- code
	}()
	waittest.True(t, time.Minute, "the first call fetched its file", func() bool { return fs.count("/first/f1") > 0 })
	if code, _, err := call(t, context.Background(), svc, "add", 7, ark, map[string]string{"url": second}); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if code := <-done; code != 200 {
		t.Fatalf("the first call: %d", code)
	}
	calls := svc.Calls()
	if svc.Versions(7, ark) != 1 || string(svc.Files(7, ark, 1)["producer/a.txt"]) != "first" ||
		calls[0].Version != 1 || calls[0].Overwrote != 0 || calls[1].Version != 1 || calls[1].Overwrote != 1 {
		t.Errorf("%d versions, version 1 holds %q; calls %+v", svc.Versions(7, ark), svc.Files(7, ark, 1)["producer/a.txt"], calls)
	}
}
