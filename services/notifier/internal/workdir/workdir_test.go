package workdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mkfile(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestRemoveDeletesTheJobFolderOnly(t *testing.T) {
	root := t.TempDir()
	job := filepath.Join(root, "bid0000000001", "jid0000000001")
	sibling := filepath.Join(root, "bid0000000001", "jid0000000002", "producer", "a")
	mkfile(t, filepath.Join(job, "producer", "deep", "a.txt"))
	mkfile(t, sibling)
	if err := Remove(root, job); err != nil {
		t.Fatal(err)
	}
	if exists(job) || !exists(sibling) {
		t.Errorf("after Remove: job folder exists=%v, sibling exists=%v", exists(job), exists(sibling))
	}
	if err := Remove(root, job); err != nil {
		t.Errorf("removing a folder already gone: %v", err)
	}
}

func TestRemoveNeverLeavesTheWorkRoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, root, outside string) string // returns the dir to remove
		want    string                                          // "" when Remove succeeds (removing only a link)
	}{
		{"a folder outside the root", func(t *testing.T, root, outside string) string { return outside }, "is not inside the work root"},
		{"the root itself", func(t *testing.T, root, outside string) string { return root }, "is not inside the work root"},
		{"dot-dot out of the root", func(t *testing.T, root, outside string) string {
			return root + "/bid/../../" + filepath.Base(outside)
		}, "is not inside the work root"},
		{"a link to outside as the job folder", func(t *testing.T, root, outside string) string {
			link := filepath.Join(root, "bid", "jid")
			os.MkdirAll(filepath.Dir(link), 0o755)
			if err := os.Symlink(outside, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, ""},
		{"a link to outside on the way", func(t *testing.T, root, outside string) string {
			if err := os.Symlink(filepath.Dir(outside), filepath.Join(root, "bid")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(root, "bid", filepath.Base(outside))
		}, "removing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "work")
			os.MkdirAll(root, 0o755)
			outside := filepath.Join(t.TempDir(), "precious")
			mkfile(t, filepath.Join(outside, "keep.txt"))
			dir := tc.prepare(t, root, outside)
			err := Remove(root, dir)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Remove(%s) = %v, want %q", dir, err, tc.want)
			}
			if !exists(filepath.Join(outside, "keep.txt")) {
				t.Fatal("a file outside the work root was deleted")
			}
		})
	}
}
