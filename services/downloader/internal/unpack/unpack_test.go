package unpack

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/containertest"
	"github.com/ingestq/ingestq/shared/testenv"
)

// zipEntry is one entry of a zip a test builds.
type zipEntry struct {
	name string
	body string
	mode fs.FileMode // 0: regular file (or folder when name ends in /)
}

func zipOf(t *testing.T, entries ...zipEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)}
		if e.mode != 0 {
			h.SetMode(e.mode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(e.body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// lyingZip holds one entry of n zero bytes whose header declares only
// `declared` bytes (with the CRC of what it declares): a zip bomb.
func lyingZip(t *testing.T, n int, declared uint64) []byte {
	t.Helper()
	var raw bytes.Buffer
	fw, _ := flate.NewWriter(&raw, flate.BestCompression)
	fw.Write(make([]byte, n))
	fw.Close()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: "bomb.bin", Method: zip.Deflate,
		CRC32: crc32.ChecksumIEEE(make([]byte, declared)), CompressedSize64: uint64(raw.Len()), UncompressedSize64: declared})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw.Bytes())
	zw.Close()
	return b.Bytes()
}

// tarEntry is one entry of a tar a test builds.
type tarEntry struct {
	name, body, link string
	kind             byte // tar.TypeReg unless set
}

func tarOf(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		kind := e.kind
		if kind == 0 {
			kind = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: kind, Linkname: e.link, Mode: 0o644, ModTime: time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC), Format: tar.FormatPAX}
		if kind == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipOf(data []byte) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(data)
	zw.Close()
	return b.Bytes()
}

// extract writes data to a file (named to mislead: the format must come
// from the bytes) and extracts it into a fresh folder inside a parent
// folder, which must stay untouched.
func extract(t *testing.T, data []byte, lim Limits) (dst string, st Stats, err error) {
	t.Helper()
	parent := t.TempDir()
	archive := filepath.Join(parent, "payload.bin")
	if err := os.WriteFile(archive, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst = filepath.Join(parent, "producer")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	st, err = Extract(context.Background(), f, root, lim)
	names, _ := os.ReadDir(parent)
	for _, n := range names {
		if n.Name() != "payload.bin" && n.Name() != "producer" {
			t.Errorf("the archive wrote %s outside the destination", n.Name())
		}
	}
	return dst, st, err
}

// tree lists the files under dir with their contents, and the bytes they hold.
func tree(t *testing.T, dir string) (map[string]string, int64) {
	t.Helper()
	out := map[string]string{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("a link was created: %s", rel)
		}
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		data, err := os.ReadFile(p)
		total += int64(len(data))
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, total
}

var generous = Limits{MaxEntries: 100, MaxBytes: 1 << 20}

// umask is the process's file mode creation mask, which takes its bits off
// every file extracted: 022 on most machines, 027 or 077 on hardened ones.
// Read from /proc, as setting it to read it would race other tests.
func umask(t *testing.T) fs.FileMode {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatalf("/proc/self/status: %q: %v", line, err)
			}
			return fs.FileMode(m)
		}
	}
	t.Fatal("/proc/self/status has no Umask line")
	return 0
}

func TestSoundArchivesExpandWhateverTheirName(t *testing.T) {
	mask := umask(t)
	want := map[string]string{"data/": "", "data/a.txt": "alpha", "data/deep/b.txt": "beta", "data/deep/": "", "c.txt": ""}
	for _, tc := range []struct {
		name, format string
		data         []byte
	}{
		{"zip with folder entries", "zip", zipOf(t, zipEntry{name: "data/"}, zipEntry{name: "data/a.txt", body: "alpha"},
			zipEntry{name: "data/deep/b.txt", body: "beta"}, zipEntry{name: "c.txt"})},
		{"tar with ./ names", "tar", tarOf(t, tarEntry{name: "./", kind: tar.TypeDir}, tarEntry{name: "./data/", kind: tar.TypeDir},
			tarEntry{name: "./data/a.txt", body: "alpha"}, tarEntry{name: "./data/deep/b.txt", body: "beta"}, tarEntry{name: "./c.txt"})},
		{"tar.gz without folder entries", "tar.gz", gzipOf(tarOf(t, tarEntry{name: "data/a.txt", body: "alpha"},
			tarEntry{name: "data/deep/b.txt", body: "beta"}, tarEntry{name: "c.txt"}))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, st, err := extract(t, tc.data, generous)
			if err != nil {
				t.Fatal(err)
			}
			got, total := tree(t, dst)
			if !maps.Equal(got, want) {
				t.Errorf("expanded to %v, want %v", got, want)
			}
			if st.Format != tc.format || st.Files != 3 || st.Bytes != 9 || total != 9 {
				t.Errorf("stats %+v (bytes on disk %d), want %s, 3 files, 9 bytes", st, total, tc.format)
			}
			fi, err := os.Stat(filepath.Join(dst, "data/a.txt"))
			if want := 0o644 &^ mask; err != nil || !fi.ModTime().Equal(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)) || fi.Mode().Perm() != want {
				t.Errorf("data/a.txt: %v, %v; want the archive's date and mode 0644 less the umask, %v", fi, err, want)
			}
		})
	}
}

func TestHostileArchivesAreRefused(t *testing.T) {
	small := Limits{MaxEntries: 10, MaxBytes: 1 << 20}
	for _, tc := range []struct {
		name     string
		data     []byte
		want     error
		wantText string
	}{
		{"zip slip", zipOf(t, zipEntry{name: "ok.txt", body: "x"}, zipEntry{name: "../evil.txt", body: "owned"}), ErrUnsafePath, `entry "../evil.txt": path would leave the directory: ".." segment`},
		{"zip slip inside a folder", zipOf(t, zipEntry{name: "a/../../evil.txt", body: "owned"}), ErrUnsafePath, `".." segment`},
		{"zip absolute path", zipOf(t, zipEntry{name: "/tmp/evil.txt", body: "owned"}), ErrUnsafePath, "absolute path"},
		{"zip backslash", zipOf(t, zipEntry{name: `..\evil.txt`, body: "owned"}), ErrUnsafePath, "backslash"},
		{"zip symlink out", zipOf(t, zipEntry{name: "passwd", body: "../../../etc/passwd", mode: fs.ModeSymlink | 0o777}), ErrLink, `entry "passwd": links are not unpacked`},
		{"zip bomb whose header lies about its size", lyingZip(t, 50<<20, 1000), zip.ErrFormat, "content does not match its header (declared 1000 bytes)"},
		{"zip bomb with honest sizes", lyingZip(t, 4<<20, 4<<20), ErrTooLarge, "expands to more than the limit: more than 1048576 bytes in all"},
		{"zip with too many entries", zipOf(t, slices.Repeat([]zipEntry{{name: "f"}}, 11)...), ErrTooMany, "too many entries: 11, at most 10"},
		{"zip with one name twice", zipOf(t, zipEntry{name: "a.txt", body: "1"}, zipEntry{name: "a.txt", body: "2"}), ErrDuplicate, `entry "a.txt": appears twice`},
		{"tar ../ entry", tarOf(t, tarEntry{name: "../evil.txt", body: "owned"}), ErrUnsafePath, `entry "../evil.txt"`},
		{"tar absolute entry", tarOf(t, tarEntry{name: "/etc/evil", body: "owned"}), ErrUnsafePath, "absolute path"},
		{"tar symlink out", tarOf(t, tarEntry{name: "etc", kind: tar.TypeSymlink, link: "/etc"}, tarEntry{name: "etc/evil", body: "owned"}), ErrLink, `entry "etc": links are not unpacked`},
		{"tar hard link out", tarOf(t, tarEntry{name: "shadow", kind: tar.TypeLink, link: "../../etc/shadow"}), ErrLink, `entry "shadow": links are not unpacked`},
		{"tar device", tarOf(t, tarEntry{name: "null", kind: tar.TypeChar}), ErrNotFile, "only files and folders are unpacked"},
		{"tar with too many entries", tarOf(t, slices.Repeat([]tarEntry{{name: "d/", kind: tar.TypeDir}}, 11)...), ErrTooMany, "too many entries: more than 10"},
		{"tar.gz bomb", gzipOf(tarOf(t, tarEntry{name: "zeros", body: string(make([]byte, 2<<20))})), ErrTooLarge, "more than 1048576 bytes in all"},
		{"gzip of something else", gzipOf([]byte("just text, no tar")), ErrFormat, "gzip-compressed, but not a tar inside"},
		{"not an archive", []byte("hello"), ErrFormat, "not a zip, tar or tar.gz archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, _, err := extract(t, tc.data, small)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Extract: %v; want %v with %q", err, tc.want, tc.wantText)
			}
			if _, total := tree(t, dst); total > small.MaxBytes {
				t.Errorf("%d bytes written, over the %d limit", total, small.MaxBytes)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(dst), "evil.txt")); err == nil {
				t.Error("evil.txt was written beside the destination")
			}
		})
	}
}

func TestExtractStopsWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	archive := filepath.Join(dir, "a.tar")
	os.WriteFile(archive, tarOf(t, tarEntry{name: "a.txt", body: "x"}), 0o644)
	f, _ := os.Open(archive)
	defer f.Close()
	root, _ := os.OpenRoot(t.TempDir())
	defer root.Close()
	if _, err := Extract(ctx, f, root, generous); !errors.Is(err, context.Canceled) {
		t.Errorf("Extract after cancel: %v, want context.Canceled", err)
	}
}

// gitArchive commits a small tree in a new repository and returns what
// `git archive` makes of it in format ("tar" or "tar.gz"): a tar that
// starts with a pax global header holding the commit id.
func gitArchive(t *testing.T, format string) []byte {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (make deps installs it)")
	}
	repo := t.TempDir()
	for name, body := range map[string]string{"README.md": "readme\n", "src/main.go": "package main\n", "docs/a note.txt": "note\n"} {
		p := filepath.Join(repo, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) []byte {
		cmd := exec.Command("git", append([]string{"-c", "user.name=Depositor", "-c", "user.email=depositor@example.org",
			"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = repo
		cmd.Env = testenv.GitEnv(repo)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, stderr.String())
		}
		return out
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "deposit")
	return git("archive", "--format="+format, "--prefix=project/", "HEAD")
}

// TestAGitArchiveTarballUnpacks: git archive writes a pax global header
// (the commit id) as the first entry; it is metadata, not a file, and the
// tree unpacks without it.
func TestAGitArchiveTarballUnpacks(t *testing.T) {
	want := map[string]string{"project/": "", "project/README.md": "readme\n", "project/src/": "", "project/src/main.go": "package main\n",
		"project/docs/": "", "project/docs/a note.txt": "note\n"}
	for _, format := range []string{"tar", "tar.gz"} {
		t.Run(format, func(t *testing.T) {
			data := gitArchive(t, format)
			if format == "tar" && !bytes.Contains(data[:512], []byte("pax_global_header")) {
				t.Fatal("git archive wrote no pax global header: this test would prove nothing")
			}
			dst, st, err := extract(t, data, generous)
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if got, _ := tree(t, dst); !maps.Equal(got, want) {
				t.Errorf("expanded to %v, want %v", got, want)
			}
			if st.Format != format || st.Files != 3 {
				t.Errorf("stats %+v, want %s with 3 files", st, format)
			}
		})
	}
}

// TestEntryNamesAManifestCannotCarryAreRefusedNamingTheEntryOnce: an entry
// whose name the object's manifest cannot carry is refused when unpacking,
// the message naming the entry once, and nothing of the archive is written
// even though good entries come first.
func TestEntryNamesAManifestCannotCarryAreRefusedNamingTheEntryOnce(t *testing.T) {
	for _, tc := range []struct{ name, reason string }{
		{"data/a%7cb.txt", `contains "%7c", which a manifest reads as '|'`},
		{"data/tab\there.txt", "contains a control character"},
		{"data/line\nbreak.txt", "contains a control character"},
		{"data/\x1b[31mred.txt", "contains a control character"},
		{"data/trailing.txt ", "has leading or trailing spaces"},
		{"folder /", "has leading or trailing spaces"},
	} {
		for _, format := range []string{"zip", "tar", "tar.gz"} {
			t.Run(format+" "+tc.name, func(t *testing.T) {
				var data []byte
				switch format {
				case "zip":
					data = zipOf(t, zipEntry{name: "good.txt", body: "fine"}, zipEntry{name: tc.name, body: "x"})
				default:
					kind := byte(tar.TypeReg)
					if strings.HasSuffix(tc.name, "/") {
						kind = tar.TypeDir
					}
					data = tarOf(t, tarEntry{name: "good.txt", body: "fine"}, tarEntry{name: tc.name, body: "x", kind: kind})
					if format == "tar.gz" {
						data = gzipOf(data)
					}
				}
				dst, _, err := extract(t, data, generous)
				want := `entry ` + strconv.Quote(tc.name) + `: name cannot be listed in a manifest: ` + tc.reason
				if !errors.Is(err, ErrName) || err.Error() != want {
					t.Fatalf("Extract: %v\nwant %s", err, want)
				}
				if got, _ := tree(t, dst); len(got) != 0 {
					t.Errorf("a refused archive wrote %v", got)
				}
			})
		}
	}
}

// TestAnEntryNamedWithAPipeIsUnpackedUnderThatName: a '|' is as much a
// name's as any other character a manifest can spell, in every format.
func TestAnEntryNamedWithAPipeIsUnpackedUnderThatName(t *testing.T) {
	for _, format := range []string{"zip", "tar", "tar.gz"} {
		t.Run(format, func(t *testing.T) {
			var data []byte
			switch format {
			case "zip":
				data = zipOf(t, zipEntry{name: "scans/a|b.txt", body: "pipe"}, zipEntry{name: "x%7Cy.txt", body: "escaped"})
			default:
				data = tarOf(t, tarEntry{name: "scans/a|b.txt", body: "pipe"}, tarEntry{name: "x%7Cy.txt", body: "escaped"})
				if format == "tar.gz" {
					data = gzipOf(data)
				}
			}
			dst, _, err := extract(t, data, generous)
			if err != nil {
				t.Fatalf("Extract: %v", err)
			}
			if got, _ := tree(t, dst); !maps.Equal(got, map[string]string{"scans/": "", "scans/a|b.txt": "pipe", "x%7Cy.txt": "escaped"}) {
				t.Errorf("expanded to %v", got)
			}
		})
	}
}

// TestARefusedArchiveWritesNothing: every refusal that the headers show
// (too many entries, a link, a device, a name twice, more bytes declared
// than the limit) comes before the first file is written, wherever the
// offending entry sits in the archive.
func TestARefusedArchiveWritesNothing(t *testing.T) {
	small := Limits{MaxEntries: 10, MaxBytes: 1 << 20}
	files := func(n int) []tarEntry {
		out := make([]tarEntry, n)
		for i := range out {
			out[i] = tarEntry{name: fmt.Sprintf("f%02d.txt", i), body: "x"}
		}
		return out
	}
	zipFiles := func(n int) []zipEntry {
		out := make([]zipEntry, n)
		for i := range out {
			out[i] = zipEntry{name: fmt.Sprintf("f%02d.txt", i), body: "x"}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"tar with one entry too many", tarOf(t, files(11)...), ErrTooMany},
		{"tar.gz with one entry too many", gzipOf(tarOf(t, files(11)...)), ErrTooMany},
		{"zip with one entry too many", zipOf(t, zipFiles(11)...), ErrTooMany},
		{"tar with a link last", tarOf(t, append(files(5), tarEntry{name: "l", kind: tar.TypeSymlink, link: "/etc"})...), ErrLink},
		{"zip with a link last", zipOf(t, append(zipFiles(5), zipEntry{name: "l", body: "/etc", mode: fs.ModeSymlink | 0o777})...), ErrLink},
		{"tar.gz with a device last", gzipOf(tarOf(t, append(files(5), tarEntry{name: "null", kind: tar.TypeChar})...)), ErrNotFile},
		{"tar with a name twice", tarOf(t, append(files(5), tarEntry{name: "./f00.txt", body: "y"})...), ErrDuplicate},
		{"tar whose last file goes over the byte limit", tarOf(t, append(files(5), tarEntry{name: "big", body: string(make([]byte, 2<<20))})...), ErrTooLarge},
		{"zip whose last file declares more than the byte limit", zipOf(t, append(zipFiles(5), zipEntry{name: "big", body: string(make([]byte, 2<<20))})...), ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, st, err := extract(t, tc.data, small)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Extract: %v, want %v", err, tc.want)
			}
			if got, _ := tree(t, dst); len(got) != 0 || st.Files != 0 {
				t.Errorf("a refused archive wrote %d files: %v", st.Files, got)
			}
		})
	}
}

// TestAZipOfMoreEntriesThanItsEndRecordCountsUnpacks: past 65,535 entries a
// zip's count (and past 4 GiB its sizes and offsets) are only in its zip64
// records, which Go's writer adds; every entry is unpacked.
func TestAZipOfMoreEntriesThanItsEndRecordCountsUnpacks(t *testing.T) {
	if testing.Short() {
		t.Skip("70,000 files: a test of sheer volume")
	}
	const n = 70_000
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for i := range n {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: fmt.Sprintf("d%02d/f%05d", i/1000, i), Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(w, i)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte("PK\x06\x06")) {
		t.Fatal("the zip has no zip64 end record")
	}
	dst, st, err := extract(t, b.Bytes(), Limits{MaxEntries: 100_000, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != n {
		t.Errorf("%d files unpacked, want %d", st.Files, n)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "d69", "f69999")); err != nil || string(data) != "69999" {
		t.Errorf("the last entry: %q, %v", data, err)
	}
}

// TestATarWhoseSizesArePaxRecordsUnpacks: a file over 8 GiB has its size in
// a pax extended header (its ustar size field cannot hold it); here every
// size is only there, its ustar field 0, in a tar and in a tar.gz.
func TestATarWhoseSizesArePaxRecordsUnpacks(t *testing.T) {
	files := map[string]string{"a.txt": "sized by a pax record", "d/b.txt": "and so is this"}
	raw := containertest.PaxSizedTar(files, []string{"a.txt", "d/b.txt"})
	for name, data := range map[string][]byte{"tar": raw, "tar.gz": gzipOf(raw)} {
		t.Run(name, func(t *testing.T) {
			dst, st, err := extract(t, data, generous)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := tree(t, dst)
			if got["a.txt"] != files["a.txt"] || got["d/b.txt"] != files["d/b.txt"] || st.Format != name || st.Files != 2 {
				t.Errorf("unpacked %v (%+v)", got, st)
			}
		})
	}
}
