package badinput

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"hash/crc32"
	"io"
	"io/fs"
	"strconv"
	"time"
)

// Archives a hostile depositor might send, built in memory.

// zipFile is one entry of zipArchive.
type zipFile struct {
	name string
	body []byte
	mode fs.FileMode // 0: a regular file
}

func zipArchive(files ...zipFile) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		if f.mode != 0 {
			h.SetMode(f.mode)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			panic(err) // only reachable with a name zip cannot hold, which the tables never use
		}
		w.Write(f.body)
	}
	zw.Close()
	return buf.Bytes()
}

// zipOfZeros is an honest zip bomb: one entry of size zero bytes, which
// deflate squeezes a thousandfold.
func zipOfZeros(name string, size int) []byte {
	return zipArchive(zipFile{name: name, body: make([]byte, size)})
}

// zipLyingAboutSize is a zip bomb whose header declares declared bytes
// (and their CRC) for an entry that expands to size bytes.
func zipLyingAboutSize(name string, declared uint64, size int) []byte {
	var compressed bytes.Buffer
	fw, _ := flate.NewWriter(&compressed, flate.BestCompression)
	fw.Write(make([]byte, size))
	fw.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateRaw(&zip.FileHeader{
		Name: name, Method: zip.Deflate,
		CRC32:              crc32.ChecksumIEEE(make([]byte, declared)),
		CompressedSize64:   uint64(compressed.Len()),
		UncompressedSize64: declared,
	})
	if err != nil {
		panic(err) // CreateRaw refuses no header of this shape
	}
	w.Write(compressed.Bytes())
	zw.Close()
	return buf.Bytes()
}

// zipOfManyFiles holds n empty files.
func zipOfManyFiles(n int) []byte {
	files := make([]zipFile, n)
	for i := range files {
		files[i] = zipFile{name: "f" + strconv.Itoa(i) + ".txt"}
	}
	return zipArchive(files...)
}

// tarEntry is one entry of tarArchive: a file when link is empty,
// otherwise a link of type kind (tar.TypeSymlink or tar.TypeLink) to link.
type tarEntry struct {
	name, body string
	kind       byte
	link       string
}

func tarArchive(entries ...tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, ModTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if e.kind != 0 {
			h.Typeflag, h.Linkname, h.Size = e.kind, e.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(err) // only reachable with a header tar cannot hold, which the tables never use
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return buf.Bytes()
}

func gzipped(data []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	zw.Close()
	return buf.Bytes()
}
