package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeTree(t *testing.T, dir string) {
	t.Helper()
	for name, content := range map[string]string{"a/b/one.txt": "one", "a/two.txt": "two two", "three": ""} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "a/two.txt"), old, old); err != nil {
		t.Fatal(err)
	}
}

func TestATreeIsLinkedOnOneFileSystemAndOtherwiseCopiedAsItWas(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src)
	for _, link := range []bool{true, false} {
		dest := filepath.Join(t.TempDir(), "copy")
		st, err := copyTree(src, dest, link)
		if err != nil {
			t.Fatal(err)
		}
		if st.files != 3 || st.bytes != 10 {
			t.Errorf("link=%v: %d files, %d bytes; want 3 and 10", link, st.files, st.bytes)
		}
		for _, name := range []string{"a/b/one.txt", "a/two.txt", "three"} {
			a, _ := os.Stat(filepath.Join(src, name))
			b, err := os.Stat(filepath.Join(dest, name))
			if err != nil {
				t.Fatal(err)
			}
			if os.SameFile(a, b) != link {
				t.Errorf("link=%v: %s is the same file: %v", link, name, os.SameFile(a, b))
			}
			if a.Mode() != b.Mode() || !a.ModTime().Equal(b.ModTime()) || a.Size() != b.Size() {
				t.Errorf("link=%v: %s: mode %v, time %v, size %d; want %v, %v, %d", link, name, b.Mode(), b.ModTime(), b.Size(), a.Mode(), a.ModTime(), a.Size())
			}
		}
	}
}

func TestATargetThatHoldsAnythingIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := emptyOrMissing(dir); err != nil {
		t.Errorf("an empty folder: %v", err)
	}
	if err := emptyOrMissing(filepath.Join(dir, "new")); err != nil {
		t.Errorf("a missing folder: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	if err := emptyOrMissing(dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a folder holding a file: %v, want not empty", err)
	}
}
