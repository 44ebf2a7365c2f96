package serving

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
)

// prepared makes a working folder <root>/bid1/jid1 with a producer file, a
// system file, a file beside them and a link out of the work root.
func prepared(t *testing.T) (root, wd string, entries []checkm.Entry) {
	t.Helper()
	root = t.TempDir()
	wd = filepath.Join(root, "bid1", "jid1")
	for name, body := range map[string]string{"producer/a b.txt": "alpha", "system/mrt-erc.txt": "erc:\n", "storage-manifest.checkm": "x"} {
		p := filepath.Join(wd, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(wd, "producer", "link.txt")); err != nil {
		t.Fatal(err)
	}
	entries = []checkm.Entry{
		{FileURL: "file:///x", HashAlgorithm: "sha256", HashValue: strings.Repeat("a", 64), FileSize: 5, FileName: "producer/a b.txt"},
		{FileURL: "file:///y", HashAlgorithm: "sha256", HashValue: strings.Repeat("b", 64), FileSize: 5, FileName: "system/mrt-erc.txt"},
	}
	return root, wd, entries
}

func fetch(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Each storing attempt is served under URLs of its own while it is open,
// and only what its manifest lists: a call of an attempt that ended,
// which the storage service may still be running, fetches nothing.
func TestAnAttemptIsServedUnderURLsOfItsOwnUntilItIsClosed(t *testing.T) {
	root, wd, entries := prepared(t)
	hs := httptest.NewUnstartedServer(nil)
	base := "http://" + hs.Listener.Addr().String()
	s, err := New(root, base, false)
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = s
	hs.Start()
	defer hs.Close()
	am, err := s.WriteAddManifest(wd, entries)
	if err != nil {
		t.Fatal(err)
	}
	if am.URL != base+"/bid1/jid1/"+AddManifest {
		t.Errorf("add manifest at %s", am.URL)
	}
	if code, _ := fetch(t, am.URL); code != http.StatusNotFound {
		t.Errorf("the prepared version is served outside any attempt: %d", code)
	}
	first, err := s.Open(wd, entries)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Open(wd, entries)
	if err != nil {
		t.Fatal(err)
	}
	prefix := base + "/" + first.ID() + "/bid1/jid1/"
	if first.ID() == second.ID() || first.Manifest.URL != prefix+AddManifest {
		t.Fatalf("attempts %s and %s; the first's manifest at %s", first.ID(), second.ID(), first.Manifest.URL)
	}
	code, manifest := fetch(t, first.Manifest.URL)
	if code != http.StatusOK || int64(len(manifest)) != first.Manifest.Size || !strings.Contains(manifest, prefix+"producer/a%20b.txt | sha256 | ") ||
		!strings.Contains(manifest, " | producer/a%20b.txt | ") {
		t.Fatalf("the attempt's add manifest: %d %q", code, manifest)
	}
	if code, body := fetch(t, prefix+"producer/a%20b.txt"); code != http.StatusOK || body != "alpha" {
		t.Errorf("a listed file: %d %q", code, body)
	}
	for _, p := range []string{"storage-manifest.checkm", "producer/link.txt", "producer/../../../x", "producer", "system/other.txt"} {
		if code, body := fetch(t, prefix+p); code == http.StatusOK {
			t.Errorf("%s served: %q", p, body)
		}
	}
	if code, _ := fetch(t, base+"/"+first.ID()+"/bid1/jid2/producer/a%20b.txt"); code == http.StatusOK {
		t.Error("an attempt serves another job's folder")
	}
	first.Close()
	if code, _ := fetch(t, prefix+"producer/a%20b.txt"); code != http.StatusNotFound {
		t.Errorf("served after its attempt ended: %d", code)
	}
	if code, _ := fetch(t, first.Manifest.URL); code != http.StatusNotFound {
		t.Errorf("the manifest served after its attempt ended: %d", code)
	}
	if code, _ := fetch(t, second.Manifest.URL); code != http.StatusOK {
		t.Errorf("the other attempt is no longer served: %d", code)
	}
	second.Close()
	if !s.Names(wd, AddManifest, "http://replica.example.org:9/bid1/jid1/"+AddManifest) || s.Names(wd, AddManifest, "http://h/bid1/jid2/"+AddManifest) {
		t.Error("Names does not tell the job's add manifest by its path")
	}
	if _, err := s.Open(filepath.Join(root, "bid1"), entries); err == nil {
		t.Error("a folder that is not a job's was opened")
	}
}

func TestWithStoringHandedOverEveryPreparedVersionIsServed(t *testing.T) {
	root, wd, entries := prepared(t)
	hs := httptest.NewUnstartedServer(nil)
	s, err := New(root, "http://"+hs.Listener.Addr().String(), true)
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = s
	hs.Start()
	defer hs.Close()
	u, _ := s.URL(wd, "system/mrt-erc.txt")
	if code, _ := fetch(t, u); code != http.StatusNotFound {
		t.Errorf("served before its add manifest was written: %d", code)
	}
	if _, err := s.WriteAddManifest(wd, entries); err != nil {
		t.Fatal(err)
	}
	if code, body := fetch(t, u); code != http.StatusOK || body != "erc:\n" {
		t.Errorf("a prepared version's file: %d %q", code, body)
	}
}
