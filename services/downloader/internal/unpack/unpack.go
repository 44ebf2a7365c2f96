// Package unpack expands a depositor's container (zip, tar or tar.gz,
// recognised by its first bytes, never by its name) into a directory
// without letting it reach outside: entries whose path is absolute, holds a
// ".." segment, a backslash or a NUL are refused, and so are links of any
// kind (a preserved object is its files; a link could only point somewhere
// the object does not own) and device or pipe entries. The number of
// entries and the bytes actually written are bounded while streaming, so
// an archive whose headers lie about its sizes (a zip bomb) stops at the
// limit.
package unpack

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"
)

// Limits bound what one archive may expand to.
type Limits struct {
	MaxEntries int   // files and folders
	MaxBytes   int64 // bytes written, all files together
}

// Stats say what an archive expanded to.
type Stats struct {
	Format string // "zip", "tar" or "tar.gz"
	Files  int
	Dirs   int
	Bytes  int64
}

// ErrFormat: the archive is not a zip, tar or gzip-compressed tar.
var ErrFormat = errors.New("not a zip, tar or tar.gz archive")

// EntryError is an entry refused or failed; Error names it.
type EntryError struct {
	Entry string
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %q: %v", e.Entry, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// Refusals, wrapped in an EntryError.
var (
	ErrUnsafePath = errors.New("path would leave the directory")
	ErrLink       = errors.New("links are not unpacked")
	ErrNotFile    = errors.New("only files and folders are unpacked")
	ErrDuplicate  = errors.New("appears twice")
	ErrTooMany    = errors.New("too many entries")
	ErrTooLarge   = errors.New("expands to more than the limit")
)

// Extract expands archive into dst. dst should be empty: an entry that
// names an existing file is refused as a duplicate. On error dst may hold
// part of the archive; the caller removes it.
func Extract(ctx context.Context, archive *os.File, dst *os.Root, lim Limits) (Stats, error) {
	head := make([]byte, 512)
	n, err := archive.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Stats{}, fmt.Errorf("reading the archive: %w", err)
	}
	head = head[:n]
	x := &extractor{ctx: ctx, dst: dst, lim: lim}
	switch {
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		x.stats.Format = "zip"
		err = x.zip(archive)
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		x.stats.Format = "tar.gz"
		err = x.gzip(archive)
	case isTar(head):
		x.stats.Format = "tar"
		err = x.tar(io.NewSectionReader(archive, 0, 1<<62))
	default:
		err = ErrFormat
	}
	return x.stats, err
}

// isTar recognises a POSIX (ustar, pax) or GNU tar header by its magic.
func isTar(head []byte) bool {
	return len(head) >= 262 && string(head[257:262]) == "ustar"
}

type extractor struct {
	ctx   context.Context
	dst   *os.Root
	lim   Limits
	stats Stats
	seen  map[string]bool
}

func (x *extractor) zip(archive *os.File) error {
	st, err := archive.Stat()
	if err != nil {
		return fmt.Errorf("reading the archive: %w", err)
	}
	r, err := zip.NewReader(archive, st.Size())
	// ErrInsecurePath (GODEBUG zipinsecurepath=0) comes with a usable
	// reader: each name is judged below.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return fmt.Errorf("reading the zip directory: %w", err)
	}
	// The directory is read whole: the count is known before anything is written.
	if len(r.File) > x.lim.MaxEntries {
		return fmt.Errorf("%w: %d, at most %d", ErrTooMany, len(r.File), x.lim.MaxEntries)
	}
	for _, f := range r.File {
		mode := f.Mode()
		var kind entryKind
		switch {
		case mode&fs.ModeSymlink != 0:
			kind = kindLink
		case mode.IsDir() || strings.HasSuffix(f.Name, "/"):
			kind = kindDir
		case mode.IsRegular():
			kind = kindFile
		default:
			kind = kindOther
		}
		err := x.entry(f.Name, kind, f.Modified, func() (io.ReadCloser, error) { return f.Open() })
		if errors.Is(err, zip.ErrChecksum) || errors.Is(err, zip.ErrFormat) {
			err = &EntryError{Entry: f.Name, Err: fmt.Errorf("content does not match its header (declared %d bytes): %w", f.UncompressedSize64, err)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (x *extractor) gzip(archive *os.File) error {
	zr, err := gzip.NewReader(io.NewSectionReader(archive, 0, 1<<62))
	if err != nil {
		return fmt.Errorf("reading the gzip stream: %w", err)
	}
	defer zr.Close()
	// Only a tar is unpacked from a gzip stream; look before reading on.
	br := bufio.NewReaderSize(zr, 64<<10)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading the gzip stream: %w", err)
	}
	if !isTar(head) {
		return fmt.Errorf("%w: gzip-compressed, but not a tar inside", ErrFormat)
	}
	return x.tar(br)
}

func (x *extractor) tar(r io.Reader) error {
	tr := tar.NewReader(r)
	for count := 0; ; count++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) { // judged below, as zip names are
			return fmt.Errorf("reading the tar stream after %d entries: %w", count, err)
		}
		if count >= x.lim.MaxEntries {
			return fmt.Errorf("%w: more than %d", ErrTooMany, x.lim.MaxEntries)
		}
		var kind entryKind
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			kind = kindFile
		case tar.TypeDir:
			kind = kindDir
		case tar.TypeSymlink, tar.TypeLink:
			kind = kindLink
		default:
			kind = kindOther
		}
		err = x.entry(h.Name, kind, h.ModTime, func() (io.ReadCloser, error) { return io.NopCloser(tr), nil })
		if err != nil {
			return err
		}
	}
}

type entryKind int

const (
	kindFile entryKind = iota
	kindDir
	kindLink
	kindOther
)

// entry checks and writes one entry.
func (x *extractor) entry(name string, kind entryKind, modified time.Time, open func() (io.ReadCloser, error)) error {
	if err := x.ctx.Err(); err != nil {
		return err
	}
	fail := func(err error) error { return &EntryError{Entry: name, Err: err} }
	switch kind {
	case kindLink:
		return fail(ErrLink)
	case kindOther:
		return fail(ErrNotFile)
	}
	p, err := localPath(name)
	if err != nil {
		return fail(err)
	}
	if p == "" {
		return nil // the archive's own top folder ("./")
	}
	if kind == kindDir {
		if err := x.dst.MkdirAll(p, 0o755); err != nil {
			return fail(err)
		}
		x.stats.Dirs++
		return nil
	}
	if x.seen == nil {
		x.seen = map[string]bool{}
	}
	if x.seen[p] {
		return fail(ErrDuplicate)
	}
	x.seen[p] = true
	if dir := path.Dir(p); dir != "." {
		if err := x.dst.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
	}
	rc, err := open()
	if err != nil {
		return fail(err)
	}
	defer rc.Close()
	out, err := x.dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fail(ErrDuplicate)
	}
	if err != nil {
		return fail(err)
	}
	left := x.lim.MaxBytes - x.stats.Bytes
	r := ctxReader{x.ctx, rc}
	n, err := io.Copy(out, io.LimitReader(r, left))
	x.stats.Bytes += n
	if err == nil && n == left {
		// At the limit: one more byte means the entry goes over it.
		// Reading to the end also runs the zip's checksum.
		m, perr := io.ReadFull(r, make([]byte, 1))
		switch {
		case m > 0:
			err = fmt.Errorf("%w: more than %d bytes in all", ErrTooLarge, x.lim.MaxBytes)
		case !errors.Is(perr, io.EOF):
			err = perr
		}
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if !modified.IsZero() {
		// Keep the depositor's dates; a failure here loses nothing.
		x.dst.Chtimes(p, modified, modified)
	}
	x.stats.Files++
	return nil
}

// localPath turns an entry name into a path inside the destination, or
// refuses it. Leading "./" segments are dropped (tar writes them); the
// archive's root folder itself comes back as "".
func localPath(name string) (string, error) {
	switch {
	case strings.ContainsRune(name, 0):
		return "", fmt.Errorf("%w: contains a NUL", ErrUnsafePath)
	case strings.ContainsRune(name, '\\'):
		return "", fmt.Errorf("%w: contains a backslash", ErrUnsafePath)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("%w: absolute path", ErrUnsafePath)
	}
	trimmed := strings.TrimSuffix(name, "/")
	for seg := range strings.SplitSeq(trimmed, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: \"..\" segment", ErrUnsafePath)
		}
	}
	for strings.HasPrefix(trimmed, "./") {
		trimmed = strings.TrimLeft(strings.TrimPrefix(trimmed, "./"), "/")
	}
	if trimmed == "." || trimmed == "" {
		return "", nil
	}
	clean := path.Clean(trimmed)
	if clean != trimmed || !fs.ValidPath(clean) {
		return "", fmt.Errorf("%w: not a clean relative path", ErrUnsafePath)
	}
	return clean, nil
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
