package filelist

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
func md(s string) string  { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }

func TestListDigestsEveryFileAndChecksTheDeclaredOnes(t *testing.T) {
	wd := t.TempDir()
	write(t, wd, map[string]string{"producer/a.txt": "alpha", "producer/d/b.bin": "beta", "system/mrt-erc.txt": "erc:\n"})
	declared := &v1.Manifest{Files: []*v1.ManifestFile{
		{Name: "a.txt", HashAlgorithm: "md5", HashValue: md("alpha"), Size: 5},
		{Name: "d/b.bin", Size: -1}, // no digest, no size: nothing to check
	}}
	entries, _, err := List(context.Background(), wd, declared)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, content string }{{"producer/a.txt", "alpha"}, {"producer/d/b.bin", "beta"}, {"system/mrt-erc.txt", "erc:\n"}}
	if len(entries) != len(want) {
		t.Fatalf("listed %d files, want %d: %v", len(entries), len(want), entries)
	}
	for i, w := range want {
		e := entries[i]
		if e.FileName != w.name || e.HashAlgorithm != "sha256" || e.HashValue != sha(w.content) || e.FileSize != int64(len(w.content)) ||
			e.FileURL != checkm.FileURL(filepath.Join(wd, filepath.FromSlash(w.name))) {
			t.Errorf("entry %d = %+v, want %s with sha256 %s", i, e, w.name, sha(w.content))
		}
	}
}

func TestListRefusesWhatTheManifestDidNotDeclare(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		decl  []*v1.ManifestFile
		want  string
	}{
		{"digest differs", map[string]string{"producer/a.txt": "alpha"},
			[]*v1.ManifestFile{{Name: "a.txt", HashAlgorithm: "sha256", HashValue: sha("ALPHA"), Size: -1}},
			"producer/a.txt: sha256 is " + sha("alpha") + ", the manifest says " + sha("ALPHA")},
		{"size differs", map[string]string{"producer/a.txt": "alpha"},
			[]*v1.ManifestFile{{Name: "a.txt", Size: 6}},
			"producer/a.txt: size is 5 bytes, the manifest says 6"},
		{"declared file missing", map[string]string{"producer/a.txt": "alpha"},
			[]*v1.ManifestFile{{Name: "a.txt", Size: -1}, {Name: "b.txt", Size: -1}},
			"producer/b.txt: is in the job's manifest but was not downloaded"},
		{"undeclared file", map[string]string{"producer/a.txt": "alpha", "producer/x": "?"},
			[]*v1.ManifestFile{{Name: "a.txt", Size: -1}},
			"producer/x: is not in the job's manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd := t.TempDir()
			write(t, wd, tc.files)
			_, _, err := List(context.Background(), wd, &v1.Manifest{Files: tc.decl})
			var mm *MismatchError
			if !errors.As(err, &mm) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("List error %v; want a mismatch %q", err, tc.want)
			}
		})
	}
}

func TestListWithoutADeclarationTakesEveryFile(t *testing.T) {
	// A container's manifest names the archive, not what it unpacked to.
	wd := t.TempDir()
	write(t, wd, map[string]string{"producer/x/1": "1", "producer/x/2": "2"})
	entries, _, err := List(context.Background(), wd, nil)
	if err != nil || len(entries) != 2 {
		t.Fatalf("List = %v, %v", entries, err)
	}
}

func TestListRefusesLinksAndEmptyObjects(t *testing.T) {
	wd := t.TempDir()
	write(t, wd, map[string]string{"producer/a": "a"})
	if err := os.Symlink("/etc/passwd", filepath.Join(wd, "producer", "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := List(context.Background(), wd, nil); err == nil || !strings.Contains(err.Error(), "producer/link is not a regular file") {
		t.Errorf("List with a symlink: %v", err)
	}
	empty := t.TempDir()
	os.MkdirAll(filepath.Join(empty, "producer"), 0o755)
	if _, _, err := List(context.Background(), empty, nil); err == nil || !strings.Contains(err.Error(), "holds no file") {
		t.Errorf("List of an empty producer folder: %v", err)
	}
}

// TestListRefusesANameTheStorageManifestCannotCarry: a file whose name the
// storage manifest cannot carry is refused by the same check the unpacker
// and the manifest parser use, the name said once.
func TestListRefusesANameTheStorageManifestCannotCarry(t *testing.T) {
	for _, name := range []string{"a|b.txt", "tab\there.txt", "esc\x1b.txt", "trailing.txt "} {
		wd := t.TempDir()
		write(t, wd, map[string]string{"producer/ok.txt": "ok", "producer/" + name: "x"})
		_, _, err := List(context.Background(), wd, nil)
		var fe *checkm.FileNameError
		if !errors.As(err, &fe) || fe.Name != "producer/"+name {
			t.Errorf("List with producer/%q: %v; want a FileNameError", name, err)
			continue
		}
		if n := strings.Count(err.Error(), strconv.Quote("producer/"+name)); n != 1 {
			t.Errorf("List with producer/%q: %q names the file %d times", name, err, n)
		}
	}
}
