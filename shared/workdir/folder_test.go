package workdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, to, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(to, link); err != nil {
		t.Fatal(err)
	}
}

// TestFolderResolvesOnlyTheRootsOwnLinks: a job's folder is found inside
// the work root on disk; a link in the root's own path is followed, a link
// between the root and the folder is refused, wherever it points.
func TestFolderResolvesOnlyTheRootsOwnLinks(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "disk")
	mkdir(t, real)
	root := filepath.Join(base, "work") // the work root is a link to disk/
	symlink(t, real, root)
	realBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(base, "outside")
	mkdir(t, outside)

	job := filepath.Join(root, "bid1", "jid1")
	mkdir(t, job)
	if got, err := Folder(root, job); err != nil || got != filepath.Join(realBase, "disk", "bid1", "jid1") {
		t.Errorf("Folder(job) = %q, %v; want its real path", got, err)
	}

	symlink(t, outside, filepath.Join(root, "bid2", "jid1"))
	symlink(t, job, filepath.Join(root, "bid3", "jid1"))
	symlink(t, outside, filepath.Join(root, "bid4"))
	mkdir(t, filepath.Join(outside, "jid1"))
	for name, path := range map[string]string{
		"a job folder linked outside":         filepath.Join(root, "bid2", "jid1"),
		"a job folder linked inside the root": filepath.Join(root, "bid3", "jid1"),
		"a batch folder linked outside":       filepath.Join(root, "bid4", "jid1"),
	} {
		if got, err := Folder(root, path); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("%s: Folder = %q, %v; want it refused for its link", name, got, err)
		}
	}

	file := filepath.Join(root, "bid5", "jid1")
	mkdir(t, filepath.Dir(file))
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Folder(root, file); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("Folder(a file) = %v; want it refused", err)
	}
	if _, err := Folder(root, filepath.Join(root, "..", "outside")); err == nil || !strings.Contains(err.Error(), "not inside the work root") {
		t.Errorf("Folder(root/../outside) = %v; want it refused by name", err)
	}
	if _, err := Folder(root, filepath.Join(root, "bid6", "jid1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Folder(a missing folder) = %v; want fs.ErrNotExist", err)
	}
}
