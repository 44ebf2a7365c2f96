// Package unpack expands a depositor's container (zip, tar or tar.gz,
// recognised by its first bytes, never by its name) into a directory
// without letting it reach outside: entries whose path is absolute, holds a
// ".." segment, a backslash or a NUL are refused, and so are links of any
// kind (a preserved object is its files; a link could only point somewhere
// the object does not own), device or pipe entries, and names a manifest
// cannot carry (checkm.CheckFileName: a '|', a control character, a
// trailing space). Tar's pax headers are metadata, not entries, and are
// skipped.
//
// Every entry is judged from its header before anything is written: the
// number of entries, their names and kinds, and the sizes they declare, so
// that a hostile archive is refused at no more cost than reading its
// headers (the zip's central directory; one pass over a tar stream). The
// bytes actually written are bounded again while writing, so an archive
// whose headers lie about its sizes (a zip bomb) stops at the limit.
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

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/ctxio"
	"github.com/ingestq/ingestq/shared/stage"
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

// Refusals, wrapped in an EntryError (ErrTooMany alone).
var (
	ErrUnsafePath = errors.New("path would leave the directory")
	ErrLink       = errors.New("links are not unpacked")
	ErrNotFile    = errors.New("only files and folders are unpacked")
	ErrDuplicate  = errors.New("appears twice")
	ErrTooMany    = errors.New("too many entries")
	ErrTooLarge   = errors.New("expands to more than the limit")
	// ErrName: the name cannot be listed in the object's manifest.
	ErrName = errors.New("name cannot be listed in a manifest")
)

// Archive is a container Open has read the headers of: its format and
// entries, every entry judged, nothing written yet.
type Archive struct {
	format   string
	entries  entryList
	lim      Limits
	declared Stats
}

// Open recognises archive's format and judges every entry from its header
// (see survey), writing nothing: a refused archive is refused here. What
// the headers declare (Declared) is known before anything is written, so
// that the space it takes can be booked first.
func Open(ctx context.Context, archive *os.File, lim Limits) (*Archive, error) {
	head := make([]byte, 512)
	n, err := archive.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the archive: %w", err)
	}
	head = head[:n]
	a := &Archive{lim: lim}
	switch {
	case bytes.HasPrefix(head, []byte("PK\x03\x04")), bytes.HasPrefix(head, []byte("PK\x05\x06")):
		a.format = "zip"
		a.entries, err = zipEntries(archive, lim)
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		a.format = "tar.gz"
		a.entries, err = gzipEntries(archive)
	case isTar(head):
		a.format = "tar"
		a.entries = tarEntries(func() (io.Reader, func(), error) {
			return io.NewSectionReader(archive, 0, 1<<62), func() {}, nil
		})
	default:
		err = ErrFormat
	}
	if err != nil {
		return a, err
	}
	a.declared = Stats{Format: a.format}
	return a, (&extractor{ctx: ctx, lim: lim}).survey(a.entries, &a.declared)
}

// Format is "zip", "tar" or "tar.gz"; "" when Open did not recognise it.
func (a *Archive) Format() string {
	if a == nil {
		return ""
	}
	return a.format
}

// Declared is what the entries' headers declare: files, folders and bytes
// (an entry's declared size is not trusted while writing).
func (a *Archive) Declared() Stats { return a.declared }

// Extract expands the archive into dst, which should be empty: an entry
// that names an existing file is refused as a duplicate. On an error dst
// may hold part of the archive (an archive whose headers lied about its
// sizes, or a failure while writing); the caller removes it. The files are
// written, not synced: the caller makes them durable together.
func (a *Archive) Extract(ctx context.Context, dst *os.Root) (Stats, error) {
	x := &extractor{ctx: ctx, dst: dst, lim: a.lim, stats: Stats{Format: a.format}}
	// The unpacking is the job step's progress now (its bytes written).
	x.meter = stage.MeterOf(ctx)
	x.meter.Phase("unpacking", a.declared.Bytes)
	err := a.entries(x.entry)
	return x.stats, err
}

// Extract opens archive (Open) and expands it into dst (Archive.Extract).
// A refused archive has written nothing.
func Extract(ctx context.Context, archive *os.File, dst *os.Root, lim Limits) (Stats, error) {
	a, err := Open(ctx, archive, lim)
	if err != nil {
		return Stats{Format: a.Format()}, err
	}
	return a.Extract(ctx, dst)
}

// isTar recognises a POSIX (ustar, pax) or GNU tar header by its magic.
func isTar(head []byte) bool {
	return len(head) >= 262 && string(head[257:262]) == "ustar"
}

// archiveEntry is one entry as its header describes it. open reads its
// content, while the entry is being visited.
type archiveEntry struct {
	name     string
	kind     entryKind
	size     int64 // declared; -1 unknown
	modified time.Time
	open     func() (io.ReadCloser, error)
}

// entryList visits an archive's entries in order, from the start each time
// it is called; it stops at visit's first error.
type entryList func(visit func(archiveEntry) error) error

type extractor struct {
	ctx   context.Context
	dst   *os.Root
	lim   Limits
	stats Stats
	meter *stage.Meter // the job step's progress
}

// meteredReader tells the meter of the bytes read through it.
type meteredReader struct {
	r     io.Reader
	meter *stage.Meter
}

func (m meteredReader) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.meter.Advance(int64(n))
	return n, err
}

// survey judges every entry from its header, writing nothing: too many,
// a refused name or kind, a name twice, or more bytes declared than the
// limit refuse the archive before its first file is written.
func (x *extractor) survey(entries entryList, declared *Stats) error {
	count := 0
	files := map[string]bool{}
	return entries(func(e archiveEntry) error {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		if count++; count > x.lim.MaxEntries {
			return fmt.Errorf("%w: more than %d", ErrTooMany, x.lim.MaxEntries)
		}
		p, err := judge(e.name, e.kind)
		if err != nil || p == "" {
			return err
		}
		if e.kind == kindDir {
			declared.Dirs++
			return nil
		}
		if files[p] {
			return &EntryError{Entry: e.name, Err: ErrDuplicate}
		}
		files[p] = true
		declared.Files++
		if declared.Bytes += max(e.size, 0); declared.Bytes > x.lim.MaxBytes {
			return &EntryError{Entry: e.name, Err: fmt.Errorf("%w: more than %d bytes in all", ErrTooLarge, x.lim.MaxBytes)}
		}
		return nil
	})
}

func zipEntries(archive *os.File, lim Limits) (entryList, error) {
	st, err := archive.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the archive: %w", err)
	}
	r, err := zip.NewReader(archive, st.Size())
	// ErrInsecurePath (GODEBUG zipinsecurepath=0) comes with a usable
	// reader: each name is judged below.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, fmt.Errorf("reading the zip directory: %w", err)
	}
	// The directory is read whole: the count is known at once.
	if len(r.File) > lim.MaxEntries {
		return nil, fmt.Errorf("%w: %d, at most %d", ErrTooMany, len(r.File), lim.MaxEntries)
	}
	return func(visit func(archiveEntry) error) error {
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
			size := int64(f.UncompressedSize64)
			if f.UncompressedSize64 > 1<<62 {
				size = 1 << 62
			}
			err := visit(archiveEntry{name: f.Name, kind: kind, size: size, modified: f.Modified,
				open: func() (io.ReadCloser, error) { return f.Open() }})
			if errors.Is(err, zip.ErrChecksum) || errors.Is(err, zip.ErrFormat) {
				err = &EntryError{Entry: f.Name, Err: fmt.Errorf("content does not match its header (declared %d bytes): %w", f.UncompressedSize64, err)}
			}
			if err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// gzipEntries reads a gzip-compressed tar; each visit decompresses anew.
func gzipEntries(archive *os.File) (entryList, error) {
	open := func() (*bufio.Reader, func(), error) {
		zr, err := gzip.NewReader(io.NewSectionReader(archive, 0, 1<<62))
		if err != nil {
			return nil, nil, fmt.Errorf("reading the gzip stream: %w", err)
		}
		return bufio.NewReaderSize(zr, 64<<10), func() { zr.Close() }, nil
	}
	// Only a tar is unpacked from a gzip stream; look before reading on.
	r, done, err := open()
	if err != nil {
		return nil, err
	}
	defer done()
	head, err := r.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the gzip stream: %w", err)
	}
	if !isTar(head) {
		return nil, fmt.Errorf("%w: gzip-compressed, but not a tar inside", ErrFormat)
	}
	return tarEntries(func() (io.Reader, func(), error) {
		r, done, err := open()
		return r, done, err
	}), nil
}

// tarEntries reads the tar stream that open starts.
func tarEntries(open func() (io.Reader, func(), error)) entryList {
	return func(visit func(archiveEntry) error) error {
		r, done, err := open()
		if err != nil {
			return err
		}
		defer done()
		tr := tar.NewReader(r)
		for count := 0; ; count++ {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil && !errors.Is(err, tar.ErrInsecurePath) { // judged below, as zip names are
				return fmt.Errorf("reading the tar stream after %d entries: %w", count, err)
			}
			var kind entryKind
			switch h.Typeflag {
			case tar.TypeReg: // the reader reports the old TypeRegA as TypeReg
				kind = kindFile
			case tar.TypeDir:
				kind = kindDir
			case tar.TypeSymlink, tar.TypeLink:
				kind = kindLink
			case tar.TypeXGlobalHeader, tar.TypeXHeader:
				// Metadata of the archive (git archive's commit id) or of
				// the next entry (archive/tar merges the latter itself).
				count--
				continue
			default:
				kind = kindOther
			}
			err = visit(archiveEntry{name: h.Name, kind: kind, size: h.Size, modified: h.ModTime,
				open: func() (io.ReadCloser, error) { return io.NopCloser(tr), nil }})
			if err != nil {
				return err
			}
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

// judge refuses an entry for its kind or name, or returns where it lands:
// a clean relative path, "" for the archive's own top folder.
func judge(name string, kind entryKind) (string, error) {
	fail := func(err error) error { return &EntryError{Entry: name, Err: err} }
	switch kind {
	case kindLink:
		return "", fail(ErrLink)
	case kindOther:
		return "", fail(ErrNotFile)
	}
	p, err := localPath(name)
	if err != nil {
		return "", fail(err)
	}
	if p == "" {
		return "", nil
	}
	// The processor lists every file in the object's manifest: a name it
	// cannot carry fails here, where the entry is known, not there.
	var fe *checkm.FileNameError
	if err := checkm.CheckFileName(p); errors.As(err, &fe) {
		return "", fail(fmt.Errorf("%w: %s", ErrName, fe.Reason))
	} else if err != nil {
		return "", fail(err)
	}
	return p, nil
}

// entry checks and writes one entry.
func (x *extractor) entry(e archiveEntry) error {
	if err := x.ctx.Err(); err != nil {
		return err
	}
	fail := func(err error) error { return &EntryError{Entry: e.name, Err: err} }
	p, err := judge(e.name, e.kind)
	if err != nil || p == "" {
		return err
	}
	if e.kind == kindDir {
		if err := x.dst.MkdirAll(p, 0o755); err != nil {
			return fail(err)
		}
		x.stats.Dirs++
		return nil
	}
	if dir := path.Dir(p); dir != "." {
		if err := x.dst.MkdirAll(dir, 0o755); err != nil {
			return fail(err)
		}
	}
	rc, err := e.open()
	if err != nil {
		return fail(err)
	}
	defer rc.Close()
	// survey refused a name twice: an existing file is one dst held before.
	out, err := x.dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fail(ErrDuplicate)
	}
	if err != nil {
		return fail(err)
	}
	left := x.lim.MaxBytes - x.stats.Bytes
	r := meteredReader{ctxio.Reader(x.ctx, rc), x.meter}
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
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	if !e.modified.IsZero() {
		// Keep the depositor's dates; a failure here loses nothing.
		x.dst.Chtimes(p, e.modified, e.modified)
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
