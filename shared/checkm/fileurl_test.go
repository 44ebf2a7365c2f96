package checkm

import (
	"path/filepath"
	"testing"
)

// A folder's name may hold what a URL escapes: the URL of a path names it
// exactly.
func TestFileURLsNameFoldersWhoseNamesAURLEscapes(t *testing.T) {
	for _, name := range []string{"plain", "a b", "a#b", "a%20b", "a?b", "été"} {
		path := filepath.Join(t.TempDir(), name, "manifest.checkm")
		raw := FileURL(path)
		if got, err := FilePath(raw); err != nil || got != path {
			t.Errorf("FilePath(%q) = %q, %v; want %q", raw, got, err, path)
		}
	}
	for _, raw := range []string{"file://elsewhere/x", "s3://b/k", "/no/scheme"} {
		if got, err := FilePath(raw); err == nil {
			t.Errorf("FilePath(%q) = %q, want an error", raw, got)
		}
	}
	if got, err := FilePath("file://localhost/x/y"); err != nil || got != "/x/y" {
		t.Errorf("FilePath(file://localhost/x/y) = %q, %v", got, err)
	}
}
