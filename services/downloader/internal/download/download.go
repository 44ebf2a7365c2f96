// Package download fetches one file of a job into the job's working
// directory: streamed to a temporary file (memory stays flat whatever the
// size), hashed with the declared algorithm on the way, checked against
// the declared size and digest, synced, then renamed into place, so a file
// found at its final name is always a complete one. Failures that may pass
// (the network, a server in trouble) are retried a bounded number of times
// with an exponential, jittered backoff.
package download

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/ctxio"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
)

// Getter starts a GET; *fetch.Client is one.
type Getter interface {
	Get(ctx context.Context, url string) (*http.Response, error)
}

// File is one file to fetch, as the job's file list declares it.
type File struct {
	URL           string
	HashAlgorithm string // md5, sha1, sha256, sha512 or "" for none
	HashValue     string // lower-case hex
	Size          int64  // -1: not declared
}

// Fetcher fetches files.
type Fetcher struct {
	Client Getter
	// Retry says how many attempts a file gets when its failures may pass,
	// and how long they wait between them.
	Retry retry.Policy
	// MaxBytes bounds a file whose size is not declared (a declared size
	// bounds the others).
	MaxBytes int64
	// TempDir is where partial files are written, relative to the root
	// given to Fetch; it must be on the same filesystem as their final
	// place (inside the same root, it is).
	TempDir string
}

// Result says how a file was got.
type Result struct {
	Size     int64
	Reused   bool // complete from an earlier attempt at the job: not fetched
	Attempts int
}

// Errors that say what is wrong with the file itself; they are not retried.
var (
	ErrTooLarge = errors.New("larger than allowed")
)

// SizeError: the file does not have the declared size.
type SizeError struct {
	Expected, Got int64
	More          bool // Got is a lower bound: reading stopped past Expected
}

func (e *SizeError) Error() string {
	if e.More {
		return fmt.Sprintf("size expected %d bytes, got more", e.Expected)
	}
	return fmt.Sprintf("size expected %d bytes, got %d", e.Expected, e.Got)
}

// DigestError: the file's digest is not the declared one.
type DigestError struct {
	Algorithm, Expected, Got string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s expected %s, got %s", e.Algorithm, e.Expected, e.Got)
}

// localError is a failure of the local disk: retrying the network does not help.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// copyBuffer is the size of one read from the network and one write to disk.
const copyBuffer = 256 << 10

// bufferFor returns a copy buffer for a file of at most n bytes (n < 0:
// unknown): no larger than it needs, as most files of a deposit are small
// and a zeroed 256 KiB buffer per file cost more than fetching them.
func bufferFor(n int64) []byte {
	if n < 0 || n >= copyBuffer {
		return make([]byte, copyBuffer)
	}
	return make([]byte, max(n+1, 512))
}

// Fetch puts f at dst (a path inside root). A regular file already at dst
// with the declared size and digest is kept: it was completed by an earlier
// attempt (only complete, checked files are ever renamed into place, so
// without a declared size or digest a file found there is kept too).
func (fe *Fetcher) Fetch(ctx context.Context, root *os.Root, dst string, f File) (Result, error) {
	if _, err := checkm.NewHash(f.HashAlgorithm); err != nil {
		return Result{}, err
	}
	if n, ok, err := fe.complete(ctx, root, dst, f); err != nil {
		return Result{}, err
	} else if ok {
		return Result{Size: n, Reused: true}, nil
	}
	var n int64
	attempts, err := fe.Retry.Do(ctx, mayPass, func(int) error {
		var err error
		n, err = fe.once(ctx, root, dst, f)
		return err
	})
	switch {
	case err == nil:
		return Result{Size: n, Attempts: attempts}, nil
	case ctx.Err() != nil:
		return Result{Attempts: attempts}, context.Cause(ctx)
	case !mayPass(err):
		return Result{Attempts: attempts}, err
	}
	return Result{Attempts: attempts}, fmt.Errorf("%w (after %d attempts)", err, attempts)
}

// complete reports whether dst already holds f.
func (fe *Fetcher) complete(ctx context.Context, root *os.Root, dst string, f File) (int64, bool, error) {
	fi, err := root.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, false, nil
	case err != nil:
		return 0, false, &localError{err}
	case !fi.Mode().IsRegular():
		return 0, false, &localError{fmt.Errorf("%s exists and is not a regular file", dst)}
	case f.Size >= 0 && fi.Size() != f.Size:
		return 0, false, nil
	case f.HashAlgorithm == "":
		return fi.Size(), true, nil
	}
	in, err := root.Open(dst)
	if err != nil {
		return 0, false, &localError{err}
	}
	defer in.Close()
	h, _ := checkm.NewHash(f.HashAlgorithm)
	if _, err := io.CopyBuffer(h, ctxio.Reader(ctx, in), bufferFor(fi.Size())); err != nil {
		return 0, false, &localError{fmt.Errorf("reading %s: %w", dst, err)}
	}
	return fi.Size(), hex.EncodeToString(h.Sum(nil)) == f.HashValue, nil
}

// once makes one attempt: GET, stream to a temporary file, check, rename.
func (fe *Fetcher) once(ctx context.Context, root *os.Root, dst string, f File) (int64, error) {
	resp, err := fe.Client.Get(ctx, f.URL)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	limit := fe.MaxBytes
	if f.Size >= 0 {
		limit = f.Size
		if resp.ContentLength >= 0 && resp.ContentLength != f.Size {
			return 0, &SizeError{Expected: f.Size, Got: resp.ContentLength}
		}
	}
	tmp, err := fe.tempFile(root)
	if err != nil {
		return 0, err
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			root.Remove(path.Join(fe.TempDir, path.Base(tmp.Name())))
		}
	}()
	h, _ := checkm.NewHash(f.HashAlgorithm)
	var w io.Writer = tmp
	if h != nil {
		w = io.MultiWriter(tmp, h)
	}
	n, err := io.CopyBuffer(diskWriter{w}, io.LimitReader(resp.Body, limit+1), bufferFor(limit))
	if err != nil {
		return 0, err
	}
	switch {
	case n > limit && f.Size >= 0:
		return 0, &SizeError{Expected: f.Size, More: true}
	case n > limit:
		return 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	case f.Size >= 0 && n != f.Size:
		return 0, &SizeError{Expected: f.Size, Got: n}
	}
	if h != nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != f.HashValue {
			return 0, &DigestError{Algorithm: f.HashAlgorithm, Expected: f.HashValue, Got: got}
		}
	}
	// A file with a digest is not synced here: the caller makes a job's
	// files durable at once, and after a crash a later attempt checks the
	// file against its digest before keeping it. Without a digest nothing
	// could tell a file the crash cut short: it is synced before it is
	// renamed into place.
	if f.HashAlgorithm == "" {
		if err := tmp.Sync(); err != nil {
			return 0, &localError{err}
		}
	}
	if err := tmp.Close(); err != nil {
		return 0, &localError{err}
	}
	if dir := path.Dir(dst); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return 0, &localError{err}
		}
	}
	tmpName := path.Join(fe.TempDir, path.Base(tmp.Name()))
	if err := root.Rename(tmpName, dst); err != nil {
		return 0, &localError{err}
	}
	keep = true
	return n, nil
}

// TempSuffix ends the names of partial files.
const TempSuffix = ".part"

// tempFile creates a partial file with a name no other attempt uses (a
// replica that lost the job may still be writing its own).
func (fe *Fetcher) tempFile(root *os.Root) (*os.File, error) {
	if err := root.MkdirAll(fe.TempDir, 0o755); err != nil {
		return nil, &localError{err}
	}
	name := path.Join(fe.TempDir, cryptorand.Text()+TempSuffix)
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, &localError{err}
	}
	return f, nil
}

// RemovePartial deletes partial files left in root's TempDir by attempts
// that died.
func (fe *Fetcher) RemovePartial(root *os.Root) error {
	entries, err := fs.ReadDir(root.FS(), fe.TempDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), TempSuffix) {
			if err := root.Remove(path.Join(fe.TempDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// mayPass tells failures worth another attempt from those that will not
// change: beside fetch's rule, a file that is not what was declared or a
// local disk that fails.
func mayPass(err error) bool {
	var size *SizeError
	var digest *DigestError
	var local *localError
	if errors.Is(err, ErrTooLarge) || errors.As(err, &size) || errors.As(err, &digest) || errors.As(err, &local) {
		return false
	}
	return fetch.Retryable(err)
}

// diskWriter marks write errors as the local disk's. (It also hides the
// file's ReaderFrom, so the copy goes through the buffer.)
type diskWriter struct{ w io.Writer }

func (d diskWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	// gofail: var downloaderMidFile struct{}
	if err != nil {
		err = &localError{err}
	}
	return n, err
}
