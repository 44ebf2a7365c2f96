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

func TestAVersionIsServedWhileItsCallIsOpenAndNothingElseIs(t *testing.T) {
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
		t.Errorf("served before its call opened it: %d", code)
	}
	release, err := s.Open(wd)
	if err != nil {
		t.Fatal(err)
	}
	code, manifest := fetch(t, am.URL)
	if code != http.StatusOK || int64(len(manifest)) != am.Size || !strings.Contains(manifest, base+"/bid1/jid1/producer/a%20b.txt | sha256 | ") {
		t.Fatalf("the add manifest while open: %d %q", code, manifest)
	}
	if code, body := fetch(t, base+"/bid1/jid1/producer/a%20b.txt"); code != http.StatusOK || body != "alpha" {
		t.Errorf("a listed file: %d %q", code, body)
	}
	for _, p := range []string{"/bid1/jid1/storage-manifest.checkm", "/bid1/jid1/producer/link.txt", "/bid1/jid1/producer/../../../x",
		"/bid1/jid2/producer/a%20b.txt", "/bid1/jid1/producer"} {
		if code, body := fetch(t, base+p); code == http.StatusOK {
			t.Errorf("%s served: %q", p, body)
		}
	}
	release()
	if code, _ := fetch(t, base+"/bid1/jid1/producer/a%20b.txt"); code != http.StatusNotFound {
		t.Errorf("served after its call ended: %d", code)
	}
	if !s.Names(wd, AddManifest, "http://replica.example.org:9/bid1/jid1/"+AddManifest) || s.Names(wd, AddManifest, "http://h/bid1/jid2/"+AddManifest) {
		t.Error("Names does not tell the job's add manifest by its path")
	}
	if _, err := s.Open(filepath.Join(root, "bid1")); err == nil {
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
