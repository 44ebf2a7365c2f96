package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
)

// stage writes files into a fresh folder and a storage manifest listing
// them; it returns the manifest's URL.
func stage(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var entries []checkm.Entry
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(content))
		entries = append(entries, checkm.Entry{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256",
			HashValue: hex.EncodeToString(sum[:]), FileSize: int64(len(content)), FileName: name})
	}
	slices.SortFunc(entries, func(a, b checkm.Entry) int { return strings.Compare(a.FileName, b.FileName) })
	m := filepath.Join(dir, "storage-manifest.checkm")
	if err := WriteManifest(m, entries); err != nil {
		t.Fatal(err)
	}
	return checkm.FileURL(m)
}

func readVersion(t *testing.T, v Version) *checkm.Manifest {
	t.Helper()
	path, err := checkm.FilePath(v.ManifestURL)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func versions(t *testing.T, root, ark string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(root, queue.LockName(ark)))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// storeTwiceAndRetry stores version 1 of ark (producer/a.txt "first" and
// an ERC), then an update of the files second, then the same update again
// as a retried job would, checks the versions are 1, 2 and 2 again, and
// returns version 2.
func storeTwiceAndRetry(ctx context.Context, t *testing.T, s Storage, ark string, second map[string]string) Version {
	t.Helper()
	v1, err := s.Store(ctx, Request{ARK: ark, JobID: "jid0000000001", Mode: "add",
		ManifestURL: stage(t, map[string]string{"producer/a.txt": "first", "system/mrt-erc.txt": "erc:\n"})})
	if err != nil {
		t.Fatal(err)
	}
	update := Request{ARK: ark, JobID: "jid0000000002", Mode: "update", ManifestURL: stage(t, second)}
	v2, err := s.Store(ctx, update)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Store(ctx, update)
	if err != nil {
		t.Fatal(err)
	}
	if v1.Number != 1 || v2.Number != 2 || again != v2 {
		t.Fatalf("versions %+v, %+v, re-run %+v; want 1, 2 and 2 again", v1, v2, again)
	}
	return v2
}

func TestLocalStoresVersionsAndARetriedJobGetsItsOwnBack(t *testing.T) {
	root := t.TempDir()
	s := Local{Root: root}
	ctx := context.Background()
	const ark = "ark:/99999/fk4x"
	v2 := storeTwiceAndRetry(ctx, t, s, ark, map[string]string{"producer/a.txt": "second", "producer/sub/b.txt": "new"})
	if got := versions(t, root, ark); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("object folder holds %v, want [v1 v2]", got)
	}
	if want := checkm.FileURL(filepath.Join(root, "ark_99999_fk4x", "v2", VersionManifest)); v2.ManifestURL != want {
		t.Errorf("manifest URL %s, want %s", v2.ManifestURL, want)
	}
	m := readVersion(t, v2)
	if len(m.Entries) != 2 {
		t.Fatalf("version 2 lists %d files, want 2", len(m.Entries))
	}
	for _, e := range m.Entries {
		p, err := checkm.FilePath(e.FileURL)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p, filepath.Join(root, "ark_99999_fk4x", "v2")+"/") || !strings.HasSuffix(p, e.FileName) {
			t.Errorf("%s is stored at %s, outside version 2", e.FileName, p)
		}
		data, err := os.ReadFile(p)
		sum := sha256.Sum256(data)
		if err != nil || int64(len(data)) != e.FileSize || hex.EncodeToString(sum[:]) != e.HashValue || e.HashAlgorithm != "sha256" {
			t.Errorf("%s: stored %q (%v), manifest says %d bytes sha256 %s", e.FileName, data, err, e.FileSize, e.HashValue)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(root, "ark_99999_fk4x", "v1", "producer", "a.txt")); string(data) != "first" {
		t.Errorf("version 1 changed: a.txt holds %q", data)
	}
}

func TestLocalRemovesAVersionACrashLeftIncomplete(t *testing.T) {
	root := t.TempDir()
	s := Local{Root: root}
	ctx := context.Background()
	const ark = "ark:/99999/fk4x"
	if _, err := s.Store(ctx, Request{ARK: ark, JobID: "jid0000000001", Mode: "add", ManifestURL: stage(t, map[string]string{"producer/a": "1"})}); err != nil {
		t.Fatal(err)
	}
	// A crash after some files of version 2, before its manifest.
	crashed := filepath.Join(root, "ark_99999_fk4x", "v2", "producer")
	if err := os.MkdirAll(crashed, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(crashed, "half"), []byte("hal"), 0o644)
	v, err := s.Store(ctx, Request{ARK: ark, JobID: "jid0000000007", Mode: "update", ManifestURL: stage(t, map[string]string{"producer/b": "2"})})
	if err != nil {
		t.Fatal(err)
	}
	if v.Number != 2 {
		t.Errorf("stored as version %d, want 2 (the incomplete one replaced)", v.Number)
	}
	if _, err := os.Stat(filepath.Join(crashed, "half")); !os.IsNotExist(err) {
		t.Errorf("the crashed attempt's file is still there: %v", err)
	}
	if got := readVersion(t, v).Entries; len(got) != 1 || got[0].FileName != "producer/b" {
		t.Errorf("version 2 lists %v", got)
	}
}

func TestLocalFailuresNameTheCauseAndLeaveNoCompleteVersion(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, root, manifestURL string) // breaks something
		want    string
	}{
		{"a file in the way of the object folder", func(t *testing.T, root, _ string) {
			os.WriteFile(filepath.Join(root, "ark_99999_fk4x"), []byte("x"), 0o644)
		}, "creating the object folder"},
		{"a source changed after the manifest was made", func(t *testing.T, _, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			os.WriteFile(filepath.Join(filepath.Dir(p), "producer", "a.txt"), []byte("TAMPERED"), 0o644)
		}, "producer/a.txt: stored 8 bytes, the storage manifest says 5"},
		{"a source with the same size but other bytes", func(t *testing.T, _, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			os.WriteFile(filepath.Join(filepath.Dir(p), "producer", "a.txt"), []byte("FIRST"), 0o644)
		}, "producer/a.txt: sha256 of the stored file is"},
		{"a source gone", func(t *testing.T, _, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			os.Remove(filepath.Join(filepath.Dir(p), "producer", "a.txt"))
		}, "producer/a.txt: open"},
		{"a file listed outside the manifest's folder", func(t *testing.T, _, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			elsewhere := filepath.Join(t.TempDir(), "a.txt")
			os.WriteFile(elsewhere, []byte("first"), 0o644)
			sum := sha256.Sum256([]byte("first"))
			if err := WriteManifest(p, []checkm.Entry{{FileURL: checkm.FileURL(elsewhere), HashAlgorithm: "sha256",
				HashValue: hex.EncodeToString(sum[:]), FileSize: 5, FileName: "producer/a.txt"}}); err != nil {
				t.Fatal(err)
			}
		}, "lies outside the manifest's folder"},
		{"a source replaced by a symbolic link to the same bytes elsewhere", func(t *testing.T, _, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			elsewhere := filepath.Join(t.TempDir(), "a.txt")
			os.WriteFile(elsewhere, []byte("first"), 0o644)
			src := filepath.Join(filepath.Dir(p), "producer", "a.txt")
			os.Remove(src)
			if err := os.Symlink(elsewhere, src); err != nil {
				t.Fatal(err)
			}
		}, "producer/a.txt is a symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			u := stage(t, map[string]string{"producer/a.txt": "first"})
			tc.prepare(t, root, u)
			_, err := Local{Root: root}.Store(ctx, Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000001", Mode: "add", ManifestURL: u})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "storing ark:/99999/fk4x in "+root) {
				t.Fatalf("Store error %v; want one naming the ARK, the root and %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(root, "ark_99999_fk4x", "v1", VersionManifest)); err == nil {
				t.Error("a failed Store left a version manifest")
			}
		})
	}
}

func TestLocalRefusesARKsThatCannotNameAFolder(t *testing.T) {
	for _, ark := range []string{"", "..", "."} {
		_, err := Local{Root: t.TempDir()}.Store(context.Background(), Request{ARK: ark, JobID: "jid0000000001", ManifestURL: stage(t, map[string]string{"producer/a": "1"})})
		if err == nil || !strings.Contains(err.Error(), "cannot name a folder") {
			t.Errorf("ARK %q: %v", ark, err)
		}
	}
}

func TestLocalLinksFilesOfItsFileSystemReadOnlyAndCopiesOthers(t *testing.T) {
	tests := []struct {
		name   string
		stage  func(t *testing.T) string // a folder to stage the files in
		linked bool
	}{
		{name: "working storage on the store's file system: linked", stage: func(t *testing.T) string { return t.TempDir() }, linked: true},
		{name: "working storage on another file system: copied", stage: func(t *testing.T) string {
			dir, err := os.MkdirTemp("/dev/shm", "store-test-")
			if err != nil {
				t.Skipf("no second file system to stage on: %v", err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			src := filepath.Join(tt.stage(t), "a.txt")
			if err := os.WriteFile(src, []byte("content"), 0o644); err != nil {
				t.Fatal(err)
			}
			if !tt.linked && sameDevice(t, src, root) {
				t.Skip("the second file system is the store's")
			}
			sum := sha256.Sum256([]byte("content"))
			m := filepath.Join(filepath.Dir(src), "m.checkm")
			if err := WriteManifest(m, []checkm.Entry{{FileURL: checkm.FileURL(src), HashAlgorithm: "sha256",
				HashValue: hex.EncodeToString(sum[:]), FileSize: 7, FileName: "producer/a.txt"}}); err != nil {
				t.Fatal(err)
			}
			v, err := Local{Root: root}.Store(context.Background(), Request{ARK: "ark:/99999/fk4l", JobID: "jid0000000001", Mode: "add", ManifestURL: checkm.FileURL(m)})
			if err != nil {
				t.Fatal(err)
			}
			stored := filepath.Join(root, "ark_99999_fk4l", "v1", "producer", "a.txt")
			si, err := os.Stat(stored)
			if err != nil {
				t.Fatal(err)
			}
			wi, err := os.Stat(src)
			if err != nil {
				t.Fatal(err)
			}
			if got := os.SameFile(si, wi); got != tt.linked {
				t.Errorf("stored file is the working file: %v, want %v", got, tt.linked)
			}
			// Readable by its owner and writable by no one; the umask
			// decides whether group and others may read a copy.
			if perm := si.Mode().Perm(); perm&0o222 != 0 || perm&0o400 == 0 {
				t.Errorf("stored file mode %v, want read-only", perm)
			}
			if data, _ := os.ReadFile(stored); string(data) != "content" {
				t.Errorf("stored %q", data)
			}
			if got := readVersion(t, v).Entries; len(got) != 1 || got[0].FileURL != checkm.FileURL(stored) {
				t.Errorf("version manifest lists %v", got)
			}
		})
	}
}

func sameDevice(t *testing.T, a, b string) bool {
	t.Helper()
	ai, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	bi, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return ai.Sys().(*syscall.Stat_t).Dev == bi.Sys().(*syscall.Stat_t).Dev
}

// TestAFileDigestedJustBeforeInThisProcessIsLinkedWithoutBeingReadAgain: a
// file the processing step of this process digested (Request.Digested),
// found the same file with the same size and modification time, is linked
// and not read again; one written since is read, and its bytes checked
// against the storage manifest.
func TestAFileDigestedJustBeforeInThisProcessIsLinkedWithoutBeingReadAgain(t *testing.T) {
	u := stage(t, map[string]string{"producer/a.txt": "alpha", "producer/b.txt": "beta!"})
	path, err := checkm.FilePath(u)
	if err != nil {
		t.Fatal(err)
	}
	wd := filepath.Dir(path)
	seenOf := func(name string) Seen {
		fi, err := os.Stat(filepath.Join(wd, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		s, ok := SeenOf(fi)
		if !ok {
			t.Fatal("no inode numbers here")
		}
		return s
	}
	digested := map[string]Seen{"producer/a.txt": seenOf("producer/a.txt"), "producer/b.txt": seenOf("producer/b.txt")}
	// Bytes that are not the manifest's, put where a.txt was seen without
	// changing what was seen of it (its size, its time): only a read
	// would tell, and none is made.
	a := filepath.Join(wd, "producer", "a.txt")
	if err := os.WriteFile(a, []byte("ALPHA"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(a, time.Time{}, digested["producer/a.txt"].ModTime); err != nil {
		t.Fatal(err)
	}
	s := Local{Root: t.TempDir()}
	if _, err := s.Store(context.Background(), Request{ARK: "ark:/99999/fk4a", JobID: "jid0000000001", Mode: "add", ManifestURL: u, Digested: digested}); err != nil {
		t.Fatalf("Store: %v; want the files digested just before linked unread", err)
	}

	// b.txt written since it was seen: read, and refused.
	u = stage(t, map[string]string{"producer/b.txt": "beta!"})
	path, _ = checkm.FilePath(u)
	wd = filepath.Dir(path)
	digested = map[string]Seen{"producer/b.txt": seenOf("producer/b.txt")}
	b := filepath.Join(wd, "producer", "b.txt")
	if err := os.WriteFile(b, []byte("BETA!"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Written after it was seen, as its time says.
	if err := os.Chtimes(b, time.Time{}, digested["producer/b.txt"].ModTime.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = s.Store(context.Background(), Request{ARK: "ark:/99999/fk4b", JobID: "jid0000000002", Mode: "add", ManifestURL: u, Digested: digested})
	if err == nil || !strings.Contains(err.Error(), "producer/b.txt: sha256 of the stored file is") {
		t.Errorf("Store of a file written since it was digested: %v; want its bytes read and refused", err)
	}
}
