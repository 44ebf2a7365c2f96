// Package checkm reads and writes Merritt's checkm 0.7 manifests: the object
// manifests that list one object's files and the batch manifests that list
// object manifests or containers, one per row.
//
// A manifest is a text file:
//
//	#%checkm_0.7
//	#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest
//	#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#
//	#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:mimeType
//	http://127.0.0.1:8080/a.txt | md5 | 0cc175b9c0f1b6a831c399e269772661 | 1 | | a.txt | text/plain
//	#%eof
//
// The #%fields line decides the column order. Parse checks every row as it
// streams through, under Limits, so a hostile manifest is refused before it
// is read whole.
//
// A value cannot hold the column separator '|': a manifest spells it "%7c",
// as Merritt's do (mrt-core2's Checkm.enc and Checkm.dec), in every value but
// the file URL. Write spells a manifest so only when one of its values holds
// a '|', and marks it with the line "#%encoded | %7c" before #%fields; Parse
// decodes the marked manifests alone, so a manifest written without the mark
// (every one whose names hold no '|') reads back as written, "%7c" and all.
// ParseDeposited reads "%7c" as '|' in every manifest, as Merritt's ingest
// service reads its depositors'. A name holding "%7c" itself cannot be
// carried in a marked manifest: CheckFileName refuses it.
package checkm

import (
	"errors"
	"fmt"
	"strings"
)

// Header is the first line of every checkm 0.7 manifest.
const Header = "#%checkm_0.7"

// pipeEscape is how a value spells '|'; encodedDirective the header line's
// name that marks a manifest whose values Parse decodes.
const (
	pipeEscape       = "%7c"
	encodedDirective = "#%encoded"
)

// Profiles of Merritt's manifests (the #%profile line).
const (
	// ProfileObject lists the files of one object.
	ProfileObject = "http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest"
	// ProfileBatch lists object manifests, one object each.
	ProfileBatch = "http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest"
	// ProfileContainerBatch lists containers (archives), one object each.
	ProfileContainerBatch = "http://uc3.cdlib.org/registry/ingest/manifest/mrt-container-batch-manifest"
)

// Prefixes Write declares; Parse accepts field names with either prefix or
// none.
const (
	PrefixNFO = "http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#"
	PrefixMRT = "http://merritt.cdlib.org/terms#"
)

// Entry is one row of a manifest. Parse fills FileName from the URL when the
// manifest has none, lower-cases HashAlgorithm and HashValue, and sets
// FileSize to -1 when the size is not given.
type Entry struct {
	Line              int // line number in the parsed manifest (1-based); Write ignores it
	FileURL           string
	HashAlgorithm     string // md5, sha1, sha256, sha512, or "" when no digest is given
	HashValue         string // lower-case hex
	FileSize          int64  // -1 when unknown
	FileLastModified  string
	FileName          string // clean relative path
	MimeType          string
	PrimaryIdentifier string
	LocalIdentifier   string
	Creator           string
	Title             string
	Date              string
	Where             string
}

// Manifest is a parsed manifest.
type Manifest struct {
	Profile string   // the #%profile value, "" when absent
	Fields  []string // the #%fields names, as written
	Entries []Entry
}

// Limits bound what Parse reads. Zero (or negative) fields take the defaults.
type Limits struct {
	MaxBytes     int64 // whole manifest; default 64 MiB
	MaxLines     int   // default 1,000,000
	MaxLineBytes int   // one line without its end-of-line; default 64 KiB
}

// Default limits.
const (
	DefaultMaxBytes     = 64 << 20
	DefaultMaxLines     = 1_000_000
	DefaultMaxLineBytes = 64 << 10
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxLines <= 0 {
		l.MaxLines = DefaultMaxLines
	}
	if l.MaxLineBytes <= 0 {
		l.MaxLineBytes = DefaultMaxLineBytes
	}
	return l
}

// ParseError is every error Parse returns: the line it is about and why.
// It unwraps to ErrLimit when a limit was exceeded and to the reader's error
// when reading failed.
type ParseError struct {
	Line int
	Msg  string
	err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Unwrap returns ErrLimit, the reader's error, or nil.
func (e *ParseError) Unwrap() error { return e.err }

// ErrLimit is matched (errors.Is) by a ParseError for a manifest over one of
// its Limits.
var ErrLimit = errors.New("manifest limit exceeded")

// field is one known column of a manifest.
type field int

const (
	fieldUnknown field = iota
	fieldFileURL
	fieldHashAlgorithm
	fieldHashValue
	fieldFileSize
	fieldFileLastModified
	fieldFileName
	fieldMimeType
	fieldPrimaryIdentifier
	fieldLocalIdentifier
	fieldCreator
	fieldTitle
	fieldDate
	fieldWhere
)

// fieldOf maps a field name ("nfo:fileUrl", "fileurl", "MRT:title") to the
// column it names. Only the nfo: and mrt: prefixes (or none) are known, and
// either prefix is accepted on any name: depositors mix them up.
func fieldOf(name string) field {
	n := strings.ToLower(strings.TrimSpace(name))
	if rest, ok := strings.CutPrefix(n, "nfo:"); ok {
		n = rest
	} else if rest, ok := strings.CutPrefix(n, "mrt:"); ok {
		n = rest
	}
	switch n {
	case "fileurl":
		return fieldFileURL
	case "hashalgorithm":
		return fieldHashAlgorithm
	case "hashvalue":
		return fieldHashValue
	case "filesize":
		return fieldFileSize
	case "filelastmodified":
		return fieldFileLastModified
	case "filename":
		return fieldFileName
	case "mimetype":
		return fieldMimeType
	case "primaryidentifier":
		return fieldPrimaryIdentifier
	case "localidentifier":
		return fieldLocalIdentifier
	case "creator":
		return fieldCreator
	case "title":
		return fieldTitle
	case "date":
		return fieldDate
	case "where":
		return fieldWhere
	}
	return fieldUnknown
}

// HasField reports whether the manifest has a column for name, a known field
// matched as Parse matches it ("nfo:fileSize", "filesize"), or any other
// name compared case-insensitively.
func (m *Manifest) HasField(name string) bool {
	want := fieldOf(name)
	for _, f := range m.Fields {
		if want != fieldUnknown && fieldOf(f) == want {
			return true
		}
		if want == fieldUnknown && strings.EqualFold(strings.TrimSpace(f), strings.TrimSpace(name)) {
			return true
		}
	}
	return false
}

// ObjectFields are the columns Write uses for an object manifest when given
// none.
func ObjectFields() []string {
	return []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize",
		"nfo:fileLastModified", "nfo:fileName", "mrt:mimeType"}
}

// BatchFields are the columns Write uses for a batch manifest (ProfileBatch
// or ProfileContainerBatch) when given none.
func BatchFields() []string {
	return append(ObjectFields(), "mrt:primaryIdentifier", "mrt:localIdentifier",
		"mrt:creator", "mrt:title", "mrt:date")
}

// get and set move one column's text in and out of an Entry. FileSize is
// handled by the callers because it is not text.
func (e *Entry) get(f field) string {
	switch f {
	case fieldFileURL:
		return e.FileURL
	case fieldHashAlgorithm:
		return e.HashAlgorithm
	case fieldHashValue:
		return e.HashValue
	case fieldFileLastModified:
		return e.FileLastModified
	case fieldFileName:
		return e.FileName
	case fieldMimeType:
		return e.MimeType
	case fieldPrimaryIdentifier:
		return e.PrimaryIdentifier
	case fieldLocalIdentifier:
		return e.LocalIdentifier
	case fieldCreator:
		return e.Creator
	case fieldTitle:
		return e.Title
	case fieldDate:
		return e.Date
	case fieldWhere:
		return e.Where
	}
	return ""
}

func (e *Entry) set(f field, v string) {
	switch f {
	case fieldFileURL:
		e.FileURL = v
	case fieldHashAlgorithm:
		e.HashAlgorithm = v
	case fieldHashValue:
		e.HashValue = v
	case fieldFileLastModified:
		e.FileLastModified = v
	case fieldFileName:
		e.FileName = v
	case fieldMimeType:
		e.MimeType = v
	case fieldPrimaryIdentifier:
		e.PrimaryIdentifier = v
	case fieldLocalIdentifier:
		e.LocalIdentifier = v
	case fieldCreator:
		e.Creator = v
	case fieldTitle:
		e.Title = v
	case fieldDate:
		e.Date = v
	case fieldWhere:
		e.Where = v
	}
}

// CheckFileNames refuses two entries that would land on the same path under
// the job's producer/ folder: the same file name twice, or a file name that
// another entry uses as a folder ("a" and "a/b"). The error names the later
// line and the earlier one. Batch manifests need not pass it: their file
// names are not written anywhere.
func (m *Manifest) CheckFileNames() error {
	files := map[string]int{} // file name → line
	dirs := map[string]int{}  // folder implied by a file name → line
	for _, e := range m.Entries {
		if line, ok := files[e.FileName]; ok {
			return &ParseError{Line: e.Line, Msg: fmt.Sprintf("file name %s already used on line %d", quoteShort(e.FileName), line)}
		}
		if line, ok := dirs[e.FileName]; ok {
			return &ParseError{Line: e.Line, Msg: fmt.Sprintf("file name %s is a folder of the file on line %d", quoteShort(e.FileName), line)}
		}
		for i := range len(e.FileName) {
			if e.FileName[i] != '/' {
				continue
			}
			dir := e.FileName[:i]
			if line, ok := files[dir]; ok {
				return &ParseError{Line: e.Line, Msg: fmt.Sprintf("file name %s puts a file inside %s, the file on line %d", quoteShort(e.FileName), quoteShort(dir), line)}
			}
			if _, ok := dirs[dir]; !ok {
				dirs[dir] = e.Line
			}
		}
		files[e.FileName] = e.Line
	}
	return nil
}
