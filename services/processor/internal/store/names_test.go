package store

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/s3test"
)

// pipeNames are files whose names hold a '|', and "%7C" and "%20", which
// a manifest carries as written.
var pipeNames = map[string]string{"producer/a|b.txt": "pipe", "producer/d|e/f.txt": "folder", "producer/x%7Cy.txt": "upper",
	"producer/100%20off.txt": "sale", "system/mrt-erc.txt": "erc:\n"}

// storedNames checks a version manifest: marked as spelling '|' "%7c",
// its names exactly the files', and returns them.
func storedNames(t *testing.T, manifest []byte) []string {
	t.Helper()
	if !bytes.Contains(manifest, []byte("\n#%encoded | %7c\n")) || !bytes.Contains(manifest, []byte("| producer/a%7cb.txt\n")) {
		t.Errorf("the version manifest does not spell '|' as %%7c, marked:\n%s", manifest)
	}
	m, err := checkm.Parse(bytes.NewReader(manifest), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range m.Entries {
		names = append(names, e.FileName)
	}
	want := slices.Sorted(func(yield func(string) bool) {
		for n := range pipeNames {
			if !yield(n) {
				return
			}
		}
	})
	if !slices.Equal(names, want) {
		t.Errorf("the version manifest names %q, want %q", names, want)
	}
	return names
}

// TestANameWithAPipeIsStoredUnderItOnTheLocalStore: each file lands under
// its own name, and the version manifest names it so.
func TestANameWithAPipeIsStoredUnderItOnTheLocalStore(t *testing.T) {
	root := t.TempDir()
	v, err := Local{Root: root}.Store(context.Background(), Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000001", Mode: "add", ManifestURL: stage(t, pipeNames)})
	if err != nil {
		t.Fatal(err)
	}
	path, _ := checkm.FilePath(v.ManifestURL)
	manifest, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range storedNames(t, manifest) {
		data, err := os.ReadFile(filepath.Join(root, "ark_99999_fk4x", "v1", filepath.FromSlash(name)))
		if err != nil || string(data) != pipeNames[name] {
			t.Errorf("%s: stored %q, %v", name, data, err)
		}
	}
}

// TestANameWithAPipeIsStoredUnderItInABucket: each file's key is its name
// under the version, and the version manifest names it so.
func TestANameWithAPipeIsStoredUnderItInABucket(t *testing.T) {
	s := s3Store(t, s3test.Start(t), "")
	if _, err := s.Store(context.Background(), Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000001", Mode: "add", ManifestURL: stage(t, pipeNames)}); err != nil {
		t.Fatal(err)
	}
	for _, name := range storedNames(t, getObject(t, s, "ark_99999_fk4x/v1/manifest.checkm")) {
		if data := getObject(t, s, "ark_99999_fk4x/v1/"+name); string(data) != pipeNames[name] {
			t.Errorf("%s: stored %q", name, data)
		}
	}
	if got := keys(t, s, ""); !slices.ContainsFunc(got, func(k string) bool { return strings.HasSuffix(k, "/producer/a|b.txt") }) {
		t.Errorf("keys %q", got)
	}
}
