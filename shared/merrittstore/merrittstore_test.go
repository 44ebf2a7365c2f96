package merrittstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// deposit serves files and the add manifest listing them over HTTP, as a
// caller of the service must.
type deposit struct {
	srv   *httptest.Server
	files map[string]string // served path -> content
}

func newDeposit(t *testing.T) *deposit {
	d := &deposit{files: map[string]string{}}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := d.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(d.srv.Close)
	return d
}

// version serves a version's files under prefix and returns the request
// naming its manifest.
func (d *deposit) version(t *testing.T, prefix string, files map[string]string) merrittstore.Request {
	t.Helper()
	var rows []merrittstore.AddFile
	for _, name := range slices.Sorted(mapKeys(files)) {
		d.files["/"+prefix+"/"+name] = files[name]
		rows = append(rows, merrittstore.AddFile{URL: d.srv.URL + (&url.URL{Path: "/" + prefix + "/" + name}).EscapedPath(), HashAlgorithm: "sha256",
			HashValue: sha(files[name]), Size: int64(len(files[name])), Name: name, MimeType: "text/plain",
			Modified: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	}
	var m bytes.Buffer
	if err := merrittstore.WriteAddManifest(&m, rows); err != nil {
		t.Fatal(err)
	}
	d.files["/"+prefix+"/mrt-manifest.txt"] = m.String()
	return merrittstore.Request{ManifestURL: d.srv.URL + "/" + prefix + "/mrt-manifest.txt", ManifestSize: int64(m.Len()),
		ManifestDigest: sha(m.String())}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func client(t *testing.T, svc *merritttest.Service, node int) *merrittstore.Client {
	t.Helper()
	u, n, timeout := svc.URL, node, time.Minute
	c, err := merrittstore.Settings{URL: &u, Node: &n, Timeout: &timeout}.Client()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAnAddThenAnUpdateWithDeletionsMakeTheVersionsTheServiceSays(t *testing.T) {
	ctx := context.Background()
	svc := merritttest.Start(t, 7)
	c := client(t, svc, 7)
	d := newDeposit(t)
	const ark = "ark:/99999/fk4merritt~*"

	if _, found, err := c.State(ctx, ark); found || err != nil {
		t.Fatalf("State of an object never stored: found %v, %v", found, err)
	}
	v1 := d.version(t, "v1", map[string]string{"producer/a.txt": "alpha", "producer/b.txt": "beta", "system/mrt-erc.txt": "erc:\n"})
	v1.LocalID = "loc-1"
	vs, err := c.Add(ctx, ark, v1)
	if err != nil {
		t.Fatal(err)
	}
	if vs.Number != 1 || vs.NumFiles != 3 || vs.Object != ark || !vs.HasActualSize || vs.TotalActualSize != int64(len("alphabetaerc:\n")) {
		t.Errorf("add answered %+v", vs)
	}
	if !slices.Equal(vs.Files, []string{"producer/a.txt", "producer/b.txt", "system/mrt-erc.txt"}) {
		t.Errorf("add said it stored %v", vs.Files)
	}

	v2 := d.version(t, "v2", map[string]string{"producer/a.txt": "ALPHA", "producer/c.txt": "gamma"})
	v2.Delete = []string{"producer/b.txt"}
	vs, err = c.Update(ctx, ark, v2)
	if err != nil {
		t.Fatal(err)
	}
	if vs.Number != 2 || !slices.Equal(vs.Files, []string{"producer/a.txt", "producer/c.txt", "system/mrt-erc.txt"}) {
		t.Errorf("update answered version %d with %v", vs.Number, vs.Files)
	}
	st, found, err := c.State(ctx, ark)
	if err != nil || !found || st.Versions != 2 || st.Object != ark || st.Files != 3 {
		t.Errorf("State = %+v, %v, %v; want 2 versions of %s", st, found, err, ark)
	}
	o, found, err := c.Object(ctx, ark)
	if err != nil || !found || o.Current != 2 || len(o.Versions) != 2 || o.ID != ark {
		t.Fatalf("Object = %+v, %v, %v", o, found, err)
	}
	v, _ := o.Version(2)
	if f, ok := v.File("producer/a.txt"); !ok || f.HashValue != sha("ALPHA") || f.Size != 5 || f.HashAlgorithm != "sha256" {
		t.Errorf("version 2's a.txt: %+v", f)
	}
	if _, ok := v.File("producer/b.txt"); ok {
		t.Error("version 2 still holds the deleted b.txt")
	}
	data, err := c.Content(ctx, c.ManifestURL(ark), 1, "producer/b.txt", 1<<20)
	if err != nil || string(data) != "beta" {
		t.Errorf("content of version 1's b.txt: %q, %v", data, err)
	}
	calls := svc.Calls()
	if len(calls) != 2 || calls[0].Form.Get("localIdentifier") != "loc-1" || calls[1].Form.Get("delete") != "producer/b.txt\n" ||
		calls[0].Form.Get("responseForm") != "json" || calls[0].Form.Get("digestValue") != v1.ManifestDigest {
		t.Errorf("the calls' form fields: %+v", calls)
	}
}

func TestARefusalNamesTheServicesAnswer(t *testing.T) {
	ctx := context.Background()
	svc := merritttest.Start(t, 7)
	c := client(t, svc, 7)
	d := newDeposit(t)
	req := d.version(t, "v1", map[string]string{"producer/a.txt": "alpha"})

	// A file whose digest the manifest gets wrong: the service names no
	// file, and its failure may pass.
	d.files["/v1/producer/a.txt"] = "alpha!"
	_, err := c.Add(ctx, "ark:/99999/fk4bad", req)
	var ae *merrittstore.AnswerError
	if !errors.As(err, &ae) || ae.Code != 500 || ae.Status != "GENERAL_EXCEPTION" || !strings.HasPrefix(ae.Detail, "Object Fails") || !ae.MayPass() {
		t.Errorf("a file that is not what the manifest says: %v", err)
	}
	// A deletion of a file the object does not hold.
	d.files["/v1/producer/a.txt"] = "alpha"
	req.Delete = []string{"producer/none.txt"}
	if _, err := c.Add(ctx, "ark:/99999/fk4x", merrittstore.Request{ManifestURL: req.ManifestURL}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Update(ctx, "ark:/99999/fk4x", req)
	if !errors.As(err, &ae) || ae.Code != 400 || ae.MayPass() || !strings.Contains(err.Error(), "update/7/ark%3A%2F99999%2Ffk4x") ||
		!strings.HasSuffix(err.Error(), "HTTP 400 REQUEST_INVALID: VersionMap: Delete list component not found:producer/none.txt") {
		t.Errorf("a deletion of a file not held: %v", err)
	}
	// The service's exception carries its Java stack, several KiB before
	// its reason: the reason is read whole, the trace left out.
	if strings.Contains(err.Error(), "at org.") || strings.Contains(err.Error(), "exc:") {
		t.Errorf("the error holds the answer's trace or its markup: %v", err)
	}
	// A node the service does not have.
	if _, err := client(t, svc, 8).Add(ctx, "ark:/99999/fk4y", merrittstore.Request{ManifestURL: req.ManifestURL}); !errors.As(err, &ae) || ae.Code != 404 {
		t.Errorf("a node the service lacks: %v", err)
	}
	if n := svc.Versions(7, "ark:/99999/fk4bad"); n != 0 {
		t.Errorf("a refused add made %d versions", n)
	}
}

// TestARefusalInTheXMLFormNamesTheServicesReason: a read of stored
// content answers its exception as XML (the form mrt-store's content
// calls take), its trace in it: the reason is read from the elements.
func TestARefusalInTheXMLFormNamesTheServicesReason(t *testing.T) {
	ctx := context.Background()
	svc := merritttest.Start(t, 7)
	c := client(t, svc, 7)
	d := newDeposit(t)
	req := d.version(t, "v1", map[string]string{"producer/a.txt": "alpha"})
	if _, err := c.Add(ctx, "ark:/99999/fk4xml", req); err != nil {
		t.Fatal(err)
	}
	_, err := c.Content(ctx, c.ManifestURL("ark:/99999/fk4xml"), 1, "producer/none.txt", 1<<20)
	var ae *merrittstore.AnswerError
	if !errors.As(err, &ae) || ae.Code != 404 || ae.Status != "REQUESTED_ITEM_NOT_FOUND" || ae.Detail != "file not found: producer/none.txt" {
		t.Fatalf("a file the version does not hold: %v (%+v)", err, ae)
	}
	if strings.Contains(err.Error(), "at org.") || strings.Contains(err.Error(), "<") {
		t.Errorf("the error holds the answer's trace or its markup: %v", err)
	}
}

func TestModesAndManifestURLsReadAsMerrittsProgramsReadThem(t *testing.T) {
	const ark = "ark:/13030/m5 a~b*c"
	if got, want := merrittstore.Encode(ark), "ark%3A%2F13030%2Fm5+a%7Eb*c"; got != want {
		t.Errorf("Encode(%q) = %q, want %q (Java's URLEncoder)", ark, got, want)
	}
	mode := merrittstore.Mode("update", 7, ark)
	if action, node, got, err := merrittstore.ParseMode(mode); err != nil || action != "update" || node != 7 || got != ark {
		t.Errorf("ParseMode(%q) = %s %d %q %v", mode, action, node, got, err)
	}
	for _, bad := range []string{"add", "add/x/ark", "keep/7/ark%3A", "add/7/", "add/0/ark"} {
		if _, _, _, err := merrittstore.ParseMode(bad); err == nil {
			t.Errorf("ParseMode(%q) read it", bad)
		}
	}
	c := &merrittstore.Client{BaseURL: "http://store.example.org:35121/store", Node: 7}
	u := c.ManifestURL(ark)
	if got, err := merrittstore.ObjectFromManifestURL(u); err != nil || got != ark {
		t.Errorf("the inventory's object of %s: %q, %v", u, got, err)
	}
	base, node, got, err := merrittstore.ParseManifestURL(u)
	if err != nil || base != c.BaseURL || node != 7 || got != ark {
		t.Errorf("ParseManifestURL(%s) = %s %d %q %v", u, base, node, got, err)
	}
	if !c.Serves(u) || c.Serves("http://elsewhere.example.org/manifest/7/x") {
		t.Error("Serves does not tell the client's manifests from others")
	}
	if got := merrittstore.ParseDeleteList(merrittstore.DeleteList([]string{"producer/a", "producer/b c"})); !slices.Equal(got, []string{"producer/a", "producer/b c"}) {
		t.Errorf("a delete list reads back as %v", got)
	}
}

func TestSettingsGoTogetherAndMustBeAnHTTPBase(t *testing.T) {
	for _, c := range []struct {
		url  string
		node int
		ok   bool
	}{{"", 0, true}, {"http://s:1", 3, true}, {"http://s:1", 0, false}, {"", 3, false}, {"ftp://s", 3, false}, {"http://s:1?x=1", 3, false},
		{"http://s", 3, false}, {"https://s/store", 3, false}, {"https://s:443/store", 3, true}} {
		u, n, timeout := c.url, c.node, time.Minute
		_, err := merrittstore.Settings{URL: &u, Node: &n, Timeout: &timeout}.Client()
		if (err == nil) != c.ok {
			t.Errorf("URL %q node %d: %v", c.url, c.node, err)
		}
	}
}

// A storage URL without a port is refused, saying why: Merritt's inventory
// service (mrt-inventory's SaveObject) rebuilds the service's address from
// a manifest URL as protocol://host:port, -1 where the port is left out.
func TestAStorageURLWithoutAPortIsRefusedSayingWhy(t *testing.T) {
	u, n, timeout := "http://store.example.org/store", 0, time.Minute
	for _, make := range []func() (*merrittstore.Client, error){
		func() (*merrittstore.Client, error) {
			n = 3
			return merrittstore.Settings{URL: &u, Node: &n, Timeout: &timeout}.Client()
		},
		func() (*merrittstore.Client, error) {
			return merrittstore.Settings{URL: &u, Node: &n, Timeout: &timeout}.Reader()
		},
	} {
		if _, err := make(); err == nil || !strings.Contains(err.Error(), "names no port") || !strings.Contains(err.Error(), "http://store.example.org:80/store") ||
			!strings.Contains(err.Error(), ":-1") {
			t.Errorf("%v", err)
		}
	}
}

// Which answers may pass if the call is made again, and which never will.
func TestAnAnswerMayPassWhenTheServiceIsUnavailableOrFailedInItsOwnWork(t *testing.T) {
	for _, c := range []struct {
		code   int
		status string
		may    bool
	}{
		{502, "", true}, {503, "EXTERNAL_SERVICE_UNAVAILABLE", true}, {504, "", true}, {429, "", true}, {408, "", true},
		{500, "GENERAL_EXCEPTION", true}, {500, "", true},
		{500, "INVALID_DATA_FORMAT", false}, {500, "INVALID_OR_MISSING_PARM", false}, {500, "FIXITY_CHECK_FAILS", false},
		{400, "REQUEST_INVALID", false}, {404, "REQUESTED_ITEM_NOT_FOUND", false}, {403, "REQUEST_ITEM_EXISTS", false}, {501, "", false},
	} {
		if got := (&merrittstore.AnswerError{Code: c.code, Status: c.status}).MayPass(); got != c.may {
			t.Errorf("HTTP %d %s: MayPass %v, want %v", c.code, c.status, got, c.may)
		}
	}
}

// A file's name is written in the add manifest so that the service reads
// back exactly that name (mrt-core2's Checkm.dec); a name it cannot read
// back is refused before anything is sent.
func TestFileNamesAreStoredUnderExactlyTheirNames(t *testing.T) {
	ctx := context.Background()
	svc := merritttest.Start(t, 7)
	c := client(t, svc, 7)
	d := newDeposit(t)
	names := []string{"producer/a|b.txt", "producer/ lead.txt", "producer/trail .txt", "producer/two  spaces.txt",
		"producer/x%7Cy.txt", "producer/p%25q.txt", "producer/%2.txt", "producer/a||b"}
	files := map[string]string{}
	for i, n := range names {
		files[n] = strings.Repeat("x", i+1)
	}
	vs, err := c.Add(ctx, "ark:/99999/fk4names", d.version(t, "v1", files))
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Files(7, "ark:/99999/fk4names", 1); len(got) != len(names) {
		t.Errorf("stored %d files", len(got))
	}
	for _, n := range names {
		if got := svc.Files(7, "ark:/99999/fk4names", 1)[n]; string(got) != files[n] {
			t.Errorf("%q stored as %q", n, got)
		}
	}
	if !slices.Equal(vs.Files, slices.Sorted(slices.Values(names))) {
		t.Errorf("the answer names %q", vs.Files)
	}
	for _, bad := range []string{"producer/100%20off.txt", "producer/a%7cb.txt", "producer/tab\t", "producer/line\nbreak"} {
		var b bytes.Buffer
		err := merrittstore.WriteAddManifest(&b, []merrittstore.AddFile{{URL: "http://h:1/f", HashAlgorithm: "sha256", HashValue: sha("x"), Size: 1, Name: bad}})
		if err == nil || !strings.Contains(err.Error(), "cannot be stored in Merritt's storage service") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
