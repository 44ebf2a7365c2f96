package unpack

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"hash/crc32"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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

func TestSoundArchivesExpandWhateverTheirName(t *testing.T) {
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
			if err != nil || !fi.ModTime().Equal(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)) || fi.Mode().Perm() != 0o644 {
				t.Errorf("data/a.txt: %v, %v; want the archive's date and mode 0644", fi, err)
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
