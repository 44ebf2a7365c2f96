package bench

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"io"
	"os"
	"strings"
)

// WriteBigZip writes a zip to path of one stored file of size bytes (name,
// its bytes those of BigFileByte) and a small file after it, so that the
// second file's offset and the directory's lie past 4 GiB for a size over
// it: Go's zip writer then writes zip64 records itself.
func WriteBigZip(path, name string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	zw := zip.NewWriter(bw)
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
	if err == nil {
		_, err = io.CopyN(w, bigFile{}, size)
	}
	if err == nil {
		w, err = zw.Create("after-" + name + ".txt")
	}
	if err == nil {
		_, err = io.WriteString(w, "a file past the big one\n")
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteBigTarGz writes a tar.gz to path of one file of size bytes (name,
// its bytes BigFileByte's): past 8 GiB Go's tar writer gives its size in a
// pax header. The bytes compress a thousandfold: the archive is small, its
// content large.
func WriteBigTarGz(path, name string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	gz, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	err = tw.WriteHeader(&tar.Header{Name: name, Size: size, Mode: 0o644, Typeflag: tar.TypeReg, Format: tar.FormatPAX})
	if err == nil {
		_, err = io.CopyN(tw, bigFile{}, size)
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteGzip writes data gzip-compressed to path.
func WriteGzip(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	gz := gzip.NewWriter(f)
	_, err = gz.Write(data)
	if err == nil {
		err = gz.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// BigFileByte is every byte of the big files WriteBigZip and WriteBigTarGz
// write.
const BigFileByte = 'x'

// bigFile reads as BigFileByte for ever.
type bigFile struct{}

var bigChunk = strings.Repeat(string(rune(BigFileByte)), 1<<16)

func (bigFile) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], bigChunk)
	}
	return n, nil
}
