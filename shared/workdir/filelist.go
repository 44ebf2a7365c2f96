package workdir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
)

// FileListName is the file of a job's working folder that keeps its file
// list when the list is too long for the job's manifest node
// (queue.MaxInlineFileListBytes): the node then names it (v1.Manifest.Kept).
const FileListName = "file-list.json"

// maxFileListBytes bounds a kept file list read back: a checkm manifest is
// at most 64 MiB by default (INGESTQ_MAX_MANIFEST_BYTES), and its list,
// every URL and name with a few keys around them, takes about as much.
const maxFileListBytes = 1 << 30

// KeepFileList writes m's files into FileListName in the job's working
// folder wd (created if need be; it must lie inside the work root, and no
// link on the way may lead out of it) and returns once the file is durable,
// with the manifest node that names it. The file is written beside and
// renamed into place, so a reader finds the whole list or an older one,
// which its digest in the node tells apart.
func (r Root) KeepFileList(wd string, m *v1.Manifest) (*v1.Manifest, error) {
	if m.GetKept() != nil {
		return nil, errors.New("keeping a file list: the list given is a reference to a kept one")
	}
	dir, err := r.openJob(wd, true)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	tmp := fmt.Sprintf(".%s-%016x", FileListName, rand.Uint64())
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, fmt.Errorf("keeping the file list in %s: %w", wd, err)
	}
	h := sha256.New()
	count := &countingWriter{w: io.MultiWriter(f, h)}
	err = queue.WriteFileList(count, m.GetFiles())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dir.Rename(tmp, FileListName)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		dir.Remove(tmp)
		return nil, fmt.Errorf("keeping the file list in %s: %w", wd, err)
	}
	return &v1.Manifest{Kept: &v1.KeptFileList{Name: FileListName, Sha256: hex.EncodeToString(h.Sum(nil)),
		Bytes: count.n, Files: int64(len(m.GetFiles()))}}, nil
}

// FileList is the job's file list: m itself, or, when m names a list kept
// in the job's working folder wd (KeepFileList), that list read back and
// checked against the size, digest and count m gives. A kept list that is
// gone or does not match is an error wrapping queue.ErrCorrupt: the job
// cannot go on from it.
func (r Root) FileList(wd string, m *v1.Manifest) (*v1.Manifest, error) {
	k := m.GetKept()
	if k == nil {
		return m, nil
	}
	path := filepath.Join(wd, k.GetName())
	corrupt := func(format string, args ...any) error {
		return &queue.CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	if k.GetName() != FileListName {
		return nil, corrupt("the job's manifest names %q as its kept file list, not %s", k.GetName(), FileListName)
	}
	dir, err := r.openJob(wd, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, corrupt("the job's file list is kept in its working folder, which is gone")
	}
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, err := dir.Open(FileListName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, corrupt("the job's kept file list is gone")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the file list kept in %s: %w", wd, err)
	}
	defer f.Close()
	// Read as it is decoded, the list is never in memory as one document;
	// what follows the list is read too, for the digest.
	h := sha256.New()
	count := &countingReader{r: io.TeeReader(io.LimitReader(f, min(k.GetBytes(), maxFileListBytes)+1), h)}
	out, derr := queue.ReadFileList(path, count)
	if _, err := io.Copy(io.Discard, count); err != nil {
		return nil, fmt.Errorf("reading the file list kept in %s: %w", wd, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); count.n != k.GetBytes() || sum != k.GetSha256() {
		return nil, corrupt("the kept file list is not the one the job's manifest names (%d bytes, sha256 %s; the manifest says %d bytes, %s)",
			count.n, sum, k.GetBytes(), k.GetSha256())
	}
	if derr != nil {
		return nil, derr
	}
	if int64(len(out.GetFiles())) != k.GetFiles() {
		return nil, corrupt("the kept file list lists %d files, the job's manifest says %d", len(out.GetFiles()), k.GetFiles())
	}
	return out, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// openJob opens the job's working folder wd through the work root, so no
// link on the way leads out of it; create makes it first.
func (r Root) openJob(wd string, create bool) (*os.Root, error) {
	rel, err := Within(r.dir, wd)
	if err != nil {
		return nil, fmt.Errorf("working folder %w", err)
	}
	if create {
		// The stages share the root; whichever writes first creates it.
		if err := os.MkdirAll(r.dir, 0o750); err != nil {
			return nil, fmt.Errorf("creating work root: %w", err)
		}
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return nil, fmt.Errorf("opening work root: %w", err)
	}
	defer root.Close()
	if create {
		if err := root.MkdirAll(rel, 0o750); err != nil {
			return nil, fmt.Errorf("creating working folder %s: %w", wd, err)
		}
	}
	dir, err := root.OpenRoot(rel)
	if err != nil {
		return nil, fmt.Errorf("opening working folder %s: %w", wd, err)
	}
	return dir, nil
}

// syncDir makes the entries of dir durable (a rename into it).
func syncDir(dir *os.Root) error {
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
