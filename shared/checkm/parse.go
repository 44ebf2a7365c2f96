package checkm

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Parse reads a manifest. It streams: each line is checked as it arrives
// and the limits stop a manifest that is too large without reading the rest.
// Every error is a *ParseError naming the line.
func Parse(r io.Reader, lim Limits) (*Manifest, error) {
	lim = lim.withDefaults()
	p := &parser{lim: lim, m: &Manifest{}}
	sc := bufio.NewScanner(r)
	// Room for the longest allowed line plus "\r\n" and one byte more, so a
	// longer line is caught here or by the length check below.
	maxToken := lim.MaxLineBytes + 3
	sc.Buffer(make([]byte, 0, min(4096, maxToken)), maxToken)
	sc.Split(scanRawLines)
	for sc.Scan() {
		if err := p.line(sc.Bytes()); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, p.limitErr(p.lineNo+1, "line longer than %d bytes (MaxLineBytes)", lim.MaxLineBytes)
		}
		return nil, &ParseError{Line: p.lineNo + 1, Msg: "reading the manifest: " + err.Error(), err: err}
	}
	return p.finish()
}

// scanRawLines splits after each '\n' and keeps it, so the byte count of
// every line, end of line included, is known exactly.
func scanRawLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

type parser struct {
	lim    Limits
	m      *Manifest
	lineNo int
	bytes  int64

	profileLine int
	fieldsLine  int
	cols        []field // the known field of each column
	eofLine     int
	// Entries gather in chunks and are joined once at the end: growing one
	// slice of a million entries would copy them over and over.
	chunks  [][]Entry
	entries int
}

// Chunks start small and double up to chunkEntries: most manifests list
// an object's few files, and a first chunk of 4096 entries (~900 KB,
// zeroed) cost more than the rest of parsing them.
const (
	firstChunkEntries = 8
	chunkEntries      = 4096
)

func (p *parser) errf(line int, format string, args ...any) *ParseError {
	return &ParseError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) limitErr(line int, format string, args ...any) *ParseError {
	return &ParseError{Line: line, Msg: fmt.Sprintf(format, args...), err: ErrLimit}
}

func (p *parser) line(raw []byte) error {
	p.lineNo++
	n := p.lineNo
	if n > p.lim.MaxLines {
		return p.limitErr(n, "manifest has more than %d lines (MaxLines)", p.lim.MaxLines)
	}
	p.bytes += int64(len(raw))
	if p.bytes > p.lim.MaxBytes {
		return p.limitErr(n, "manifest is larger than %d bytes (MaxBytes)", p.lim.MaxBytes)
	}
	content := bytes.TrimSuffix(bytes.TrimSuffix(raw, []byte("\n")), []byte("\r"))
	if len(content) > p.lim.MaxLineBytes {
		return p.limitErr(n, "line longer than %d bytes (MaxLineBytes)", p.lim.MaxLineBytes)
	}
	text := strings.TrimSpace(string(content))
	if n == 1 {
		text = strings.TrimSpace(strings.TrimPrefix(text, "\uFEFF"))
		if !strings.EqualFold(text, Header) {
			return p.errf(n, "first line must be %s, got %s", Header, quoteShort(text))
		}
		return nil
	}
	if p.eofLine != 0 {
		if text != "" {
			return p.errf(n, "content after #%%eof (line %d)", p.eofLine)
		}
		return nil
	}
	switch {
	case text == "":
		return nil
	case strings.HasPrefix(text, "#%"):
		return p.directive(n, text)
	case strings.HasPrefix(text, "#"):
		return nil // comment
	}
	return p.row(n, text)
}

func (p *parser) directive(n int, text string) error {
	parts := strings.Split(text, "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	switch strings.ToLower(parts[0]) {
	case "#%profile":
		if p.profileLine != 0 {
			return p.errf(n, "#%%profile repeated (first on line %d)", p.profileLine)
		}
		if len(parts) != 2 || parts[1] == "" {
			return p.errf(n, "#%%profile needs exactly one value")
		}
		p.profileLine = n
		p.m.Profile = parts[1]
	case "#%fields":
		return p.fields(n, parts[1:])
	case "#%eof":
		p.eofLine = n
	}
	// #%prefix and other directives only document the names; Parse knows
	// its field names by their local part.
	return nil
}

func (p *parser) fields(n int, names []string) error {
	if p.fieldsLine != 0 {
		return p.errf(n, "#%%fields repeated (first on line %d)", p.fieldsLine)
	}
	cols, err := columns(names)
	if err != nil {
		return p.errf(n, "#%%fields: %s", err.Error())
	}
	p.fieldsLine = n
	p.cols = cols
	p.m.Fields = names
	return nil
}

// columns resolves field names to known fields: every name non-empty, no
// known field twice, a fileUrl column present.
func columns(names []string) ([]field, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("no field names")
	}
	cols := make([]field, len(names))
	seen := map[field]int{}
	for i, name := range names {
		if name == "" {
			return nil, fmt.Errorf("field %d has no name", i+1)
		}
		f := fieldOf(name)
		if f != fieldUnknown {
			if j, dup := seen[f]; dup {
				return nil, fmt.Errorf("field %q repeats field %q", name, names[j])
			}
			seen[f] = i
		}
		cols[i] = f
	}
	if _, ok := seen[fieldFileURL]; !ok {
		return nil, fmt.Errorf("no nfo:fileUrl field")
	}
	return cols, nil
}

func (p *parser) row(n int, text string) error {
	if p.fieldsLine == 0 {
		return p.errf(n, "row before #%%fields")
	}
	values := strings.Split(text, "|")
	if len(values) > len(p.cols) {
		return p.errf(n, "row has %d columns but #%%fields (line %d) declares %d", len(values), p.fieldsLine, len(p.cols))
	}
	e := Entry{Line: n, FileSize: -1}
	for i, v := range values {
		v = strings.TrimSpace(v)
		if p.cols[i] != fieldFileSize {
			e.set(p.cols[i], v)
			continue
		}
		if v == "" {
			continue
		}
		size, ok := parseSize(v)
		if !ok {
			return p.errf(n, "nfo:fileSize %s is not a non-negative integer", quoteShort(v))
		}
		e.FileSize = size
	}
	if err := normalize(&e); err != nil {
		return p.errf(n, "%s", err.Error())
	}
	if len(p.chunks) == 0 {
		p.chunks = append(p.chunks, make([]Entry, 0, firstChunkEntries))
	} else if last := p.chunks[len(p.chunks)-1]; len(last) == cap(last) {
		p.chunks = append(p.chunks, make([]Entry, 0, min(2*cap(last), chunkEntries)))
	}
	last := &p.chunks[len(p.chunks)-1]
	*last = append(*last, e)
	p.entries++
	return nil
}

func (p *parser) finish() (*Manifest, error) {
	if p.lineNo == 0 {
		return nil, p.errf(1, "empty input: first line must be %s", Header)
	}
	if p.entries == 0 {
		return nil, p.errf(p.lineNo, "manifest has no entries")
	}
	if len(p.chunks) == 1 {
		p.m.Entries = p.chunks[0]
		return p.m, nil
	}
	p.m.Entries = make([]Entry, 0, p.entries)
	for i, c := range p.chunks {
		p.m.Entries = append(p.m.Entries, c...)
		p.chunks[i] = nil // copied: the collector may take it back at once
	}
	return p.m, nil
}

// parseSize accepts decimal digits only (no sign, no spaces).
func parseSize(v string) (int64, bool) {
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	size, err := strconv.ParseInt(v, 10, 64)
	return size, err == nil
}

// digestLen is the hex length of each accepted hash algorithm's digest, 0
// for a name that is not one.
func digestLen(alg string) int {
	_, n := algorithm(alg)
	return n
}

// HashAlgorithm reads the name of a digest algorithm as writers spell it
// ("SHA-256", Merritt's ingest service's spelling; "sha_256"; "sha256")
// and returns the manifest's ("sha256"), or an error naming it when it is
// not one ingestq checks.
func HashAlgorithm(name string) (string, error) {
	alg := normalizeAlgorithm(name)
	if digestLen(alg) == 0 {
		return "", fmt.Errorf("unknown hash algorithm %s (want md5, sha1, sha256 or sha512)", quoteShort(name))
	}
	return alg, nil
}

// normalizeAlgorithm maps "SHA-256", "sha_256" and "sha256" to "sha256".
func normalizeAlgorithm(alg string) string {
	alg = strings.ToLower(alg)
	alg = strings.ReplaceAll(alg, "-", "")
	return strings.ReplaceAll(alg, "_", "")
}

// normalize checks one entry and puts it in canonical form: digest
// algorithm and value lower-cased, the file name taken from the URL when
// missing. Parse and Write share it, so whatever Write emits Parse accepts.
func normalize(e *Entry) error {
	if e.FileURL == "" {
		return fmt.Errorf("nfo:fileUrl is empty")
	}
	u, err := url.Parse(e.FileURL)
	if err != nil {
		return fmt.Errorf("nfo:fileUrl %s is not a URL: %v", quoteShort(e.FileURL), errReason(err))
	}
	if u.Scheme == "" {
		return fmt.Errorf("nfo:fileUrl %s is not an absolute URL", quoteShort(e.FileURL))
	}
	if err := normalizeDigest(e); err != nil {
		return err
	}
	if e.FileSize < -1 {
		return fmt.Errorf("nfo:fileSize %d is negative", e.FileSize)
	}
	if e.FileName == "" {
		name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
		if name == "" {
			return fmt.Errorf("no nfo:fileName and the URL %s has no file name", quoteShort(e.FileURL))
		}
		if err := CheckFileName(name); err != nil {
			return fmt.Errorf("no nfo:fileName and the URL's %w", err)
		}
		e.FileName = name
		return nil
	}
	return CheckFileName(e.FileName)
}

func normalizeDigest(e *Entry) error {
	if e.HashAlgorithm == "" {
		if e.HashValue != "" {
			return fmt.Errorf("nfo:hashValue %s given without nfo:hashAlgorithm", quoteShort(e.HashValue))
		}
		return nil
	}
	alg := normalizeAlgorithm(e.HashAlgorithm)
	want := digestLen(alg)
	if want == 0 {
		return fmt.Errorf("unknown hash algorithm %s (want md5, sha1, sha256 or sha512)", quoteShort(e.HashAlgorithm))
	}
	if e.HashValue == "" {
		return fmt.Errorf("nfo:hashAlgorithm %s given without nfo:hashValue", alg)
	}
	value := strings.ToLower(e.HashValue)
	if strings.IndexFunc(value, func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) }) >= 0 {
		return fmt.Errorf("%s digest %s is not hexadecimal", alg, quoteShort(e.HashValue))
	}
	if len(value) != want {
		return fmt.Errorf("%s digest %s has %d hex digits, want %d", alg, quoteShort(e.HashValue), len(value), want)
	}
	e.HashAlgorithm, e.HashValue = alg, value
	return nil
}

// FileNameError is a file name CheckFileName refuses: the name, and why
// without repeating it, so that a caller that names the file already (an
// archive's entry) can say why alone.
type FileNameError struct {
	Name   string
	Reason string // "contains '|'"
}

func (e *FileNameError) Error() string {
	if e.Name == "" {
		return "file name " + e.Reason
	}
	return "file name " + quoteShort(e.Name) + " " + e.Reason
}

// CheckFileName accepts a clean relative path that a manifest can carry:
// valid UTF-8, no control characters, no '|' (the column separator), no
// backslash, not absolute, no empty, "." or ".." segment, no leading or
// trailing spaces (a manifest column cannot carry them). A file name is
// where a file lands under the job's producer/ folder, so anything that
// could step outside it or mean something else is refused. Every error is
// a *FileNameError.
func CheckFileName(name string) error {
	if reason := fileNameProblem(name); reason != "" {
		return &FileNameError{Name: name, Reason: reason}
	}
	return nil
}

func fileNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case !utf8.ValidString(name):
		return "is not valid UTF-8"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "contains a control character"
	case strings.ContainsRune(name, '|'):
		return "contains '|', the manifest's column separator"
	case strings.ContainsRune(name, '\\'):
		return "contains a backslash"
	case strings.HasPrefix(name, "/"):
		return "is an absolute path"
	case name != strings.TrimSpace(name):
		return "has leading or trailing spaces"
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch seg {
		case "":
			return "has an empty path segment"
		case ".", "..":
			return fmt.Sprintf("has a %q segment", seg)
		}
	}
	return ""
}

// errReason drops url.Error's repetition of the URL, which the message
// already quotes.
func errReason(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// quoteShort quotes s for an error message, cut to 80 bytes so a hostile
// line cannot blow up logs and job messages.
func quoteShort(s string) string {
	const max = 80
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
