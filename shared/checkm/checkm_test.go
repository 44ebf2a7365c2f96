package checkm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/ingestq/ingestq/shared/checkm"
)

const objectManifest = `#%checkm_0.7
#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest
#%prefix | mrt: | http://merritt.cdlib.org/terms#
#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#
#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:mimeType
http://127.0.0.1:8080/a.txt | md5 | 0cc175b9c0f1b6a831c399e269772661 | 1 | | a.txt | text/plain
#%eof
`

const batchManifest = "\uFEFF#%checkm_0.7\r\n" +
	"#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\r\n" +
	"# a comment, then a blank line\r\n" +
	"\r\n" +
	"#%fields | Title | fileurl | MRT:primaryIdentifier | nfo:hashAlgorithm | hashValue | mrt:localIdentifier | custom:notes | creator | date | nfo:filesize\r\n" +
	"A title|http://127.0.0.1:8080/m/one%20object.checkm|ark:/99999/fk4abc|SHA-256|E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855|local-1|ignored|Doe, Jane|2024-01-02|\r\n" +
	"   Second   |  http://127.0.0.1:8080/m/two.checkm  \r\n" +
	"#%eof\r\n" +
	"\r\n"

func TestParseAcceptsManifests(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		profile string
		fields  []string
		entries []checkm.Entry
	}{
		{
			name:    "object manifest as Merritt writes it",
			in:      objectManifest,
			profile: checkm.ProfileObject,
			fields:  []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileLastModified", "nfo:fileName", "mrt:mimeType"},
			entries: []checkm.Entry{{Line: 6, FileURL: "http://127.0.0.1:8080/a.txt", HashAlgorithm: "md5",
				HashValue: "0cc175b9c0f1b6a831c399e269772661", FileSize: 1, FileName: "a.txt", MimeType: "text/plain"}},
		},
		{
			name:    "batch manifest with BOM, CRLF, any column order and case, short rows, normalized digest, name from URL",
			in:      batchManifest,
			profile: checkm.ProfileBatch,
			fields:  []string{"Title", "fileurl", "MRT:primaryIdentifier", "nfo:hashAlgorithm", "hashValue", "mrt:localIdentifier", "custom:notes", "creator", "date", "nfo:filesize"},
			entries: []checkm.Entry{
				{Line: 6, FileURL: "http://127.0.0.1:8080/m/one%20object.checkm", HashAlgorithm: "sha256",
					HashValue: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", FileSize: -1,
					FileName: "one object.checkm", PrimaryIdentifier: "ark:/99999/fk4abc", LocalIdentifier: "local-1",
					Creator: "Doe, Jane", Title: "A title", Date: "2024-01-02"},
				{Line: 7, FileURL: "http://127.0.0.1:8080/m/two.checkm", FileSize: -1, FileName: "two.checkm", Title: "Second"},
			},
		},
		{
			name: "container batch without #%eof, nested file name, where column, sha-1 and SHA512 spellings",
			in: "#%checkm_0.7\n#%profile | " + checkm.ProfileContainerBatch + "\n" +
				"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:where\n" +
				"http://127.0.0.1/c.zip | sha-1 | da39a3ee5e6b4b0d3255bfef95601890afd80709 | 0 | dir/c.zip | ark:/99999/fk4w\n" +
				"http://127.0.0.1/d.tar | SHA512 | " + strings.Repeat("ab", 64) + " | 12345678901 | d.tar |",
			profile: checkm.ProfileContainerBatch,
			fields:  []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName", "mrt:where"},
			entries: []checkm.Entry{
				{Line: 4, FileURL: "http://127.0.0.1/c.zip", HashAlgorithm: "sha1", HashValue: "da39a3ee5e6b4b0d3255bfef95601890afd80709",
					FileSize: 0, FileName: "dir/c.zip", Where: "ark:/99999/fk4w"},
				{Line: 5, FileURL: "http://127.0.0.1/d.tar", HashAlgorithm: "sha512", HashValue: strings.Repeat("ab", 64),
					FileSize: 12345678901, FileName: "d.tar"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := checkm.Parse(strings.NewReader(tt.in), checkm.Limits{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if m.Profile != tt.profile {
				t.Errorf("Profile = %q, want %q", m.Profile, tt.profile)
			}
			if !reflect.DeepEqual(m.Fields, tt.fields) {
				t.Errorf("Fields = %q, want %q", m.Fields, tt.fields)
			}
			if !reflect.DeepEqual(m.Entries, tt.entries) {
				t.Errorf("Entries:\n got %+v\nwant %+v", m.Entries, tt.entries)
			}
		})
	}
}

const head = "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName\n"

// marked is head marked as Write marks a manifest whose values spell '|'.
const marked = "#%checkm_0.7\n#%encoded | %7c\n#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName\n"

func TestParseRefusesBadManifests(t *testing.T) {
	short := "#%checkm_0.7\n#%fields | nfo:fileUrl\n"
	long := "http://127.0.0.1/" + strings.Repeat("x", 200) + "\n"
	tests := []struct {
		name   string
		in     string
		limits checkm.Limits
		line   int
		reason string
		limit  bool // the error matches ErrLimit
	}{
		{name: "empty input", in: "", line: 1, reason: "empty input: first line must be #%checkm_0.7"},
		{name: "missing header", in: "#%fields | nfo:fileUrl\nhttp://127.0.0.1/a\n", line: 1, reason: `first line must be #%checkm_0.7, got "#%fields | nfo:fileUrl"`},
		{name: "row before fields", in: "#%checkm_0.7\n# comment\nhttp://127.0.0.1/a\n", line: 3, reason: "row before #%fields"},
		{name: "more columns than fields", in: "#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:fileName\nhttp://127.0.0.1/a | a | extra\n", line: 3, reason: "row has 3 columns but #%fields (line 2) declares 2"},
		{name: "fields without fileUrl", in: "#%checkm_0.7\n#%fields | nfo:fileName\n", line: 2, reason: "#%fields: no nfo:fileUrl field"},
		{name: "field twice under two spellings", in: "#%checkm_0.7\n#%fields | nfo:fileUrl | FILEURL\n", line: 2, reason: `#%fields: field "FILEURL" repeats field "nfo:fileUrl"`},
		{name: "empty field name", in: "#%checkm_0.7\n#%fields | nfo:fileUrl | | mrt:title\n", line: 2, reason: "#%fields: field 2 has no name"},
		{name: "fields repeated", in: head + "#%fields | nfo:fileUrl\n", line: 3, reason: "#%fields repeated (first on line 2)"},
		{name: "profile repeated", in: "#%checkm_0.7\n#%profile | a\n#%profile | b\n", line: 3, reason: "#%profile repeated (first on line 2)"},
		{name: "profile with two values", in: "#%checkm_0.7\n#%profile | a | b\n", line: 2, reason: "#%profile needs exactly one value"},
		{name: "no entries", in: head + "# nothing\n#%eof\n", line: 4, reason: "manifest has no entries"},
		{name: "content after eof", in: head + "http://127.0.0.1/a | | | |\n#%eof\n\nhttp://127.0.0.1/b\n", line: 6, reason: "content after #%eof (line 4)"},
		{name: "negative size", in: head + "http://127.0.0.1/a | | | -1 |\n", line: 3, reason: `nfo:fileSize "-1" is not a non-negative integer`},
		{name: "signed size", in: head + "http://127.0.0.1/a | | | +1 |\n", line: 3, reason: `nfo:fileSize "+1" is not a non-negative integer`},
		{name: "fractional size", in: head + "http://127.0.0.1/a | | | 1.5 |\n", line: 3, reason: `nfo:fileSize "1.5" is not a non-negative integer`},
		{name: "size overflowing int64", in: head + "http://127.0.0.1/a | | | 99999999999999999999 |\n", line: 3, reason: "is not a non-negative integer"},
		{name: "unknown hash algorithm", in: head + "http://127.0.0.1/a | crc32 | 1234abcd | |\n", line: 3, reason: `unknown hash algorithm "crc32" (want md5, sha1, sha256 or sha512)`},
		{name: "digest without algorithm", in: head + "http://127.0.0.1/a | | 0cc175b9c0f1b6a831c399e269772661 | |\n", line: 3, reason: `nfo:hashValue "0cc175b9c0f1b6a831c399e269772661" given without nfo:hashAlgorithm`},
		{name: "algorithm without digest", in: head + "http://127.0.0.1/a | md5 | | |\n", line: 3, reason: "nfo:hashAlgorithm md5 given without nfo:hashValue"},
		{name: "digest of the wrong length", in: head + "http://127.0.0.1/a | sha256 | 0cc175b9c0f1b6a831c399e269772661 | |\n", line: 3, reason: `sha256 digest "0cc175b9c0f1b6a831c399e269772661" has 32 hex digits, want 64`},
		{name: "digest not hex", in: head + "http://127.0.0.1/a | md5 | 0cc175b9c0f1b6a831c399e26977266z | |\n", line: 3, reason: `md5 digest "0cc175b9c0f1b6a831c399e26977266z" is not hexadecimal`},
		{name: "empty URL", in: head + " | | | | a\n", line: 3, reason: "nfo:fileUrl is empty"},
		{name: "relative URL", in: head + "a.txt | | | | a.txt\n", line: 3, reason: `nfo:fileUrl "a.txt" is not an absolute URL`},
		{name: "unparseable URL", in: head + "http://127.0.0.1/%zz | | | | a\n", line: 3, reason: `nfo:fileUrl "http://127.0.0.1/%zz" is not a URL: invalid URL escape "%zz"`},
		{name: "file name escaping the folder", in: head + "http://127.0.0.1/a | | | | ../etc/passwd\n", line: 3, reason: `file name "../etc/passwd" has a ".." segment`},
		{name: "absolute file name", in: head + "http://127.0.0.1/a | | | | /etc/passwd\n", line: 3, reason: `file name "/etc/passwd" is an absolute path`},
		{name: "backslash in file name", in: head + "http://127.0.0.1/a | | | | a\\b\n", line: 3, reason: `file name "a\\b" contains a backslash`},
		{name: "empty segment in file name", in: head + "http://127.0.0.1/a | | | | a//b\n", line: 3, reason: `file name "a//b" has an empty path segment`},
		{name: "trailing slash in file name", in: head + "http://127.0.0.1/a | | | | a/\n", line: 3, reason: `file name "a/" has an empty path segment`},
		{name: "dot segment in file name", in: head + "http://127.0.0.1/a | | | | a/./b\n", line: 3, reason: `file name "a/./b" has a "." segment`},
		{name: "NUL in file name", in: head + "http://127.0.0.1/a | | | | a\x00b\n", line: 3, reason: `file name "a\x00b" contains a control character`},
		{name: "invalid UTF-8 in file name", in: head + "http://127.0.0.1/a | | | | a\xffb\n", line: 3, reason: `file name "a\xffb" is not valid UTF-8`},
		{name: "URL without a file name and no fileName", in: head + "http://127.0.0.1/dir/ | | | |\n", line: 3, reason: `no nfo:fileName and the URL "http://127.0.0.1/dir/" has no file name`},
		{name: "URL whose name decodes to a leading space", in: head + "http://127.0.0.1/%20a | | | |\n", line: 3, reason: `no nfo:fileName and the URL's file name " a" has leading or trailing spaces`},
		{name: "URL whose name decodes to \"%7c\", in a marked manifest", in: marked + "http://127.0.0.1/a%257cb | | | |\n", line: 4, reason: `no nfo:fileName and the URL's file name "a%7cb" contains "%7c", which a manifest reads as '|'`},
		{name: "encoded mark repeated", in: marked + "#%encoded | %7c\n", line: 4, reason: "#%encoded repeated (first on line 2)"},
		{name: "encoded mark after a row", in: head + "http://127.0.0.1/a | | | | a\n#%encoded | %7c\n", line: 4, reason: "#%encoded after the first row: it must come before the rows it applies to"},
		{name: "encoded mark naming another escape", in: "#%checkm_0.7\n#%encoded | %25\n", line: 2, reason: `#%encoded "%25": the only encoding known is "%7c" (a '|')`},
		{name: "URL whose name decodes to ..", in: head + "http://127.0.0.1/%2e%2e | | | |\n", line: 3, reason: `no nfo:fileName and the URL's file name ".." has a ".." segment`},
		{name: "too many lines", in: head + "http://127.0.0.1/a\nhttp://127.0.0.1/b\n", limits: checkm.Limits{MaxLines: 3}, line: 4, reason: "manifest has more than 3 lines (MaxLines)", limit: true},
		{name: "too many bytes", in: head + "http://127.0.0.1/a\nhttp://127.0.0.1/b\n", limits: checkm.Limits{MaxBytes: int64(len(head)) + 20}, line: 4, reason: fmt.Sprintf("manifest is larger than %d bytes (MaxBytes)", len(head)+20), limit: true},
		{name: "line a little too long", in: short + "http://127.0.0.1/" + strings.Repeat("x", 34) + "\n", limits: checkm.Limits{MaxLineBytes: 50}, line: 3, reason: "line longer than 50 bytes (MaxLineBytes)", limit: true},
		{name: "line far too long", in: short + long, limits: checkm.Limits{MaxLineBytes: 100}, line: 3, reason: "line longer than 100 bytes (MaxLineBytes)", limit: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := checkm.Parse(strings.NewReader(tt.in), tt.limits)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", m)
			}
			var pe *checkm.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not a *ParseError", err, err)
			}
			if pe.Line != tt.line {
				t.Errorf("Line = %d, want %d (%v)", pe.Line, tt.line, err)
			}
			want := fmt.Sprintf("line %d: %s", tt.line, tt.reason)
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", tt.line)) || !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error = %q, want %q", err.Error(), want)
			}
			if got := errors.Is(err, checkm.ErrLimit); got != tt.limit {
				t.Errorf("errors.Is(err, ErrLimit) = %v, want %v", got, tt.limit)
			}
		})
	}
}

func TestParseReportsReadErrorsWithTheLine(t *testing.T) {
	errDisk := errors.New("disk on fire")
	r := io.MultiReader(strings.NewReader(head+"http://127.0.0.1/a\n"), iotest.ErrReader(errDisk))
	_, err := checkm.Parse(r, checkm.Limits{})
	var pe *checkm.ParseError
	if !errors.As(err, &pe) || pe.Line != 4 || !errors.Is(err, errDisk) {
		t.Fatalf("err = %v, want a ParseError on line 4 wrapping %v", err, errDisk)
	}
	if want := "line 4: reading the manifest: disk on fire"; err.Error() != want {
		t.Errorf("error = %q, want %q", err.Error(), want)
	}
}

func TestWriteThenParseGivesTheSameManifest(t *testing.T) {
	for _, in := range []string{objectManifest, batchManifest} {
		m, err := checkm.Parse(strings.NewReader(in), checkm.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := checkm.Write(&buf, m.Profile, m.Fields, m.Entries); err != nil {
			t.Fatalf("Write: %v", err)
		}
		back, err := checkm.Parse(&buf, checkm.Limits{})
		if err != nil {
			t.Fatalf("Parse of what Write wrote: %v\n%s", err, buf.String())
		}
		if back.Profile != m.Profile || !reflect.DeepEqual(back.Fields, m.Fields) {
			t.Errorf("profile/fields = %q %q, want %q %q", back.Profile, back.Fields, m.Profile, m.Fields)
		}
		if !reflect.DeepEqual(withoutLines(back.Entries), withoutLines(m.Entries)) {
			t.Errorf("entries:\n got %+v\nwant %+v", back.Entries, m.Entries)
		}
	}
}

func TestWriteWithDefaultFields(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		entry   checkm.Entry
		want    checkm.Entry // after the round trip
		line    string       // the row Write must emit
	}{
		{
			name:    "one-file object manifest, size unknown, name from the URL",
			profile: checkm.ProfileObject,
			entry:   checkm.Entry{FileURL: "http://127.0.0.1/x/data.bin", FileSize: -1},
			want:    checkm.Entry{FileURL: "http://127.0.0.1/x/data.bin", FileSize: -1, FileName: "data.bin"},
			line:    "http://127.0.0.1/x/data.bin |  |  |  |  | data.bin | \n",
		},
		{
			name:    "container batch row with identifiers and metadata",
			profile: checkm.ProfileContainerBatch,
			entry: checkm.Entry{FileURL: "http://127.0.0.1/c.zip", HashAlgorithm: "MD5", HashValue: "0CC175B9C0F1B6A831C399E269772661",
				FileSize: 7, FileName: "c.zip", PrimaryIdentifier: "ark:/99999/fk4x", LocalIdentifier: "L1", Creator: "Doe", Title: "T", Date: "2024"},
			want: checkm.Entry{FileURL: "http://127.0.0.1/c.zip", HashAlgorithm: "md5", HashValue: "0cc175b9c0f1b6a831c399e269772661",
				FileSize: 7, FileName: "c.zip", PrimaryIdentifier: "ark:/99999/fk4x", LocalIdentifier: "L1", Creator: "Doe", Title: "T", Date: "2024"},
			line: "http://127.0.0.1/c.zip | md5 | 0cc175b9c0f1b6a831c399e269772661 | 7 |  | c.zip |  | ark:/99999/fk4x | L1 | Doe | T | 2024\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := checkm.Write(&buf, tt.profile, nil, []checkm.Entry{tt.entry}); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if !strings.Contains(buf.String(), "\n"+tt.line) {
				t.Errorf("Write wrote\n%s\nwant the row %q", buf.String(), tt.line)
			}
			m, err := checkm.Parse(&buf, checkm.Limits{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if m.Profile != tt.profile || len(m.Entries) != 1 {
				t.Fatalf("read back %+v", m)
			}
			got := m.Entries[0]
			got.Line = 0
			if got != tt.want {
				t.Errorf("entry:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestWriteRefusesWhatCannotReadBack(t *testing.T) {
	ok := checkm.Entry{FileURL: "http://127.0.0.1/a", FileSize: -1}
	tests := []struct {
		name    string
		profile string
		fields  []string
		entries []checkm.Entry
		reason  string
	}{
		{name: "no entries", reason: "checkm: manifest has no entries"},
		{name: "fields without fileUrl", fields: []string{"nfo:fileName"}, entries: []checkm.Entry{ok}, reason: "checkm: fields: no nfo:fileUrl field"},
		{name: "field name with a bar", fields: []string{"nfo:fileUrl", "a|b"}, entries: []checkm.Entry{ok}, reason: `checkm: field name: "a|b" contains '|' or a line break`},
		{name: "profile with a line break", profile: "p\nq", entries: []checkm.Entry{ok}, reason: `checkm: profile: "p\nq" contains '|' or a line break`},
		{name: "URL with a bar", entries: []checkm.Entry{{FileURL: "http://127.0.0.1/a|b", FileSize: -1, FileName: "a"}},
			reason: `checkm: entry 1 ("http://127.0.0.1/a|b"): nfo:fileUrl: "http://127.0.0.1/a|b" contains '|' or a line break`},
		{name: "value with the escape in a manifest a bar marks", entries: []checkm.Entry{{FileURL: "http://127.0.0.1/a", FileSize: -1, MimeType: "text/plain%7cx"},
			{FileURL: "http://127.0.0.1/b", FileSize: -1, FileName: "b|c"}},
			reason: `checkm: entry 1 ("http://127.0.0.1/a"): mrt:mimeType: "text/plain%7cx" holds "%7c", which reads back as '|' in a manifest that spells '|' so (another value holds one)`},
		{name: "value with surrounding spaces", entries: []checkm.Entry{ok, {FileURL: "http://127.0.0.1/b", FileSize: -1, MimeType: " text/plain"}},
			reason: `checkm: entry 2 ("http://127.0.0.1/b"): mrt:mimeType: " text/plain" has leading or trailing spaces`},
		{name: "bad digest", entries: []checkm.Entry{{FileURL: "http://127.0.0.1/a", FileSize: -1, HashAlgorithm: "md5", HashValue: "abc"}},
			reason: `checkm: entry 1 ("http://127.0.0.1/a"): md5 digest "abc" has 3 hex digits, want 32`},
		{name: "size below -1", entries: []checkm.Entry{{FileURL: "http://127.0.0.1/a", FileSize: -2}},
			reason: `checkm: entry 1 ("http://127.0.0.1/a"): nfo:fileSize -2 is negative`},
		{name: "first column starting with #", fields: []string{"mrt:title", "nfo:fileUrl"}, entries: []checkm.Entry{{FileURL: "http://127.0.0.1/a", FileSize: -1, Title: "#1"}},
			reason: `checkm: entry 1 ("http://127.0.0.1/a"): mrt:title "#1" starts with '#' in the first column and would read as a comment`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := checkm.Write(&buf, tt.profile, tt.fields, tt.entries)
			if err == nil || err.Error() != tt.reason {
				t.Fatalf("Write error = %v, want %q", err, tt.reason)
			}
		})
	}
}

func TestWriteReportsWriterErrors(t *testing.T) {
	errFull := errors.New("disk full")
	err := checkm.Write(failingWriter{errFull}, "", nil, []checkm.Entry{{FileURL: "http://127.0.0.1/a", FileSize: -1}})
	if !errors.Is(err, errFull) {
		t.Fatalf("Write error = %v, want it to wrap %v", err, errFull)
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// TestCheckFileNameRefusesWhatAManifestCannotCarry: a name holding "%7c"
// (how a manifest spells a '|'), a control character or a trailing space is
// refused, with a reason that does not repeat the name; every name it
// accepts, a '|' included, Write writes and Parse reads back unchanged.
func TestCheckFileNameRefusesWhatAManifestCannotCarry(t *testing.T) {
	for _, tc := range []struct{ name, reason string }{
		{"a%7cb.txt", `contains "%7c", which a manifest reads as '|'`},
		{"a\tb.txt", "contains a control character"},
		{"a\nb.txt", "contains a control character"},
		{"a\x1b[31mb.txt", "contains a control character"},
		{"dir/b.txt ", "has leading or trailing spaces"},
		{"a\u00a0", "has leading or trailing spaces"},
	} {
		err := checkm.CheckFileName(tc.name)
		var fe *checkm.FileNameError
		if !errors.As(err, &fe) || fe.Name != tc.name || fe.Reason != tc.reason {
			t.Errorf("CheckFileName(%q) = %v, want a FileNameError saying %q", tc.name, err, tc.reason)
			continue
		}
		if strings.Count(err.Error(), fmt.Sprintf("%q", tc.name)) != 1 {
			t.Errorf("CheckFileName(%q): %q names the file other than once", tc.name, err)
		}
		// Beside a name with a '|', which marks the manifest.
		if werr := checkm.Write(io.Discard, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: "http://127.0.0.1/x", FileSize: -1, FileName: tc.name},
			{FileURL: "http://127.0.0.1/y", FileSize: -1, FileName: "y|z"}}); werr == nil {
			t.Errorf("Write accepted the file name %q", tc.name)
		}
	}
	for _, name := range []string{"a b/c d.txt", "d/naïve #1 (copy).txt", "a,b;c=d&e.txt", "日本語/ファイル.txt",
		"a|b.txt", "|", "a||b/|c|", "x%7Cy.txt", "100%20off.txt", "%7|c", "%|7c"} {
		if err := checkm.CheckFileName(name); err != nil {
			t.Errorf("CheckFileName(%q): %v", name, err)
			continue
		}
		var b bytes.Buffer
		if err := checkm.Write(&b, checkm.ProfileObject, nil, []checkm.Entry{{FileURL: "http://127.0.0.1/x", FileSize: -1, FileName: name}}); err != nil {
			t.Errorf("Write of the file name %q: %v", name, err)
			continue
		}
		m, err := checkm.Parse(&b, checkm.Limits{})
		if err != nil || m.Entries[0].FileName != name {
			t.Errorf("the file name %q read back as %v, %v", name, m, err)
		}
	}
}

func TestCheckFileNamesRefusesCollisions(t *testing.T) {
	tests := []struct {
		name   string
		names  []string
		reason string // "" when accepted
	}{
		{name: "distinct names and shared folders", names: []string{"a.txt", "d/a.txt", "d/b.txt", "d/e/f"}},
		{name: "same name twice", names: []string{"a.txt", "b", "a.txt"}, reason: `line 3: file name "a.txt" already used on line 1`},
		{name: "file then a file inside it", names: []string{"d", "d/x"}, reason: `line 2: file name "d/x" puts a file inside "d", the file on line 1`},
		{name: "folder then a file of the folder's name", names: []string{"d/e/x", "d/e"}, reason: `line 2: file name "d/e" is a folder of the file on line 1`},
		{name: "names differing only in case are distinct", names: []string{"A", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &checkm.Manifest{}
			for i, n := range tt.names {
				m.Entries = append(m.Entries, checkm.Entry{Line: i + 1, FileName: n})
			}
			err := m.CheckFileNames()
			if tt.reason == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.reason != "" && (err == nil || err.Error() != tt.reason) {
				t.Fatalf("error = %v, want %q", err, tt.reason)
			}
		})
	}
}

func TestHasFieldMatchesAsParseDoes(t *testing.T) {
	m, err := checkm.Parse(strings.NewReader(batchManifest), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want bool
	}{
		{"nfo:fileUrl", true},
		{"mrt:title", true},
		{"primaryIdentifier", true},
		{"nfo:fileSize", true},
		{"CUSTOM:NOTES", true},
		{"mrt:mimeType", false},
		{"nfo:fileName", false},
		{"notes", false},
	}
	for _, tt := range tests {
		if got := m.HasField(tt.name); got != tt.want {
			t.Errorf("HasField(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func withoutLines(es []checkm.Entry) []checkm.Entry {
	out := make([]checkm.Entry, len(es))
	for i, e := range es {
		e.Line = 0
		out[i] = e
	}
	return out
}
