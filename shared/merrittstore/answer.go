package merrittstore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ingestq/ingestq/shared/checkm"
)

// The storage service formats its answers from XML: with the response
// form "json" it sends that XML turned into JSON, each element a key with
// its namespace prefix ("ver:versionState", "ver:identifier"), a number or
// a boolean where the text reads as one, an element given more than once
// an array, a lone one a single value.

// VersionState is the service's answer to an add or an update.
type VersionState struct {
	Object          string // the object id it stored under
	Number          int    // the version made
	NumFiles        int
	TotalSize       int64
	TotalActualSize int64 // Merritt's storage consumer counts a call a success when it is given
	HasActualSize   bool
	// Files are the file ids the answer lists (its file state URLs' last
	// segments, decoded); nil when it lists none.
	Files []string
}

// ObjectState is the service's answer about an object.
type ObjectState struct {
	Object   string
	Versions int // the number of versions, the last being the current one
	Files    int // of the current version
}

// AnswerError is an answer that is not a success: the HTTP status, and
// what the service said of it.
type AnswerError struct {
	Call   string // "add/7/ark%3A…", "state/7/ark%3A…"
	Code   int
	Status string // the service's exception status ("REQUEST_INVALID"), "" when it gave none
	// Detail is the service's reason: its exception's detail (or, without
	// one, its error or description), never its stack trace; the start of
	// the answer when it is no exception of the service's.
	Detail string
}

func (e *AnswerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the storage service answered %s with HTTP %d", e.Call, e.Code)
	if e.Status != "" {
		b.WriteString(" " + e.Status)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	return b.String()
}

// MayPass reports whether the same call may succeed later: the service,
// or what stands in front of it, is unavailable (502, 503, 504, and 408
// and 429), or it failed in its own work (500 GENERAL_EXCEPTION: mrt-store
// raises it for a manifest or file it could not fetch, "Object Fails",
// and for a write to its cloud store that failed; a 500 that is no
// exception of the service's is its container's). Every other answer
// will be the same however often the call is made: the request is wrong
// (4xx), or what it names is (INVALID_DATA_FORMAT, FIXITY_CHECK_FAILS,
// INVALID_OR_MISSING_PARM, 501).
func (e *AnswerError) MayPass() bool {
	switch e.Code {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	case http.StatusInternalServerError:
		return e.Status == "" || e.Status == "GENERAL_EXCEPTION"
	}
	return false
}

// decodeJSON reads an answer as an object keeping numbers as written.
func decodeJSON(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// child is the object under key, nil when there is none.
func child(obj map[string]any, key string) map[string]any {
	m, _ := obj[key].(map[string]any)
	return m
}

// text is a value as text: a string, or a number or boolean as written.
func text(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case json.Number:
		return t.String()
	case bool:
		return strconv.FormatBool(t)
	}
	return ""
}

func integer(obj map[string]any, key string) (int64, bool) {
	n, err := strconv.ParseInt(text(obj[key]), 10, 64)
	return n, err == nil
}

// texts is a value that may be one or many.
func texts(v any) []string {
	if a, ok := v.([]any); ok {
		out := make([]string, 0, len(a))
		for _, x := range a {
			out = append(out, text(x))
		}
		return out
	}
	if s := text(v); s != "" {
		return []string{s}
	}
	return nil
}

// ParseVersionState reads an add or update answer in the "json" form.
func ParseVersionState(data []byte) (VersionState, error) {
	obj, err := decodeJSON(data)
	if err != nil {
		return VersionState{}, fmt.Errorf("the answer is not JSON: %w", err)
	}
	v := child(obj, "ver:versionState")
	if v == nil {
		return VersionState{}, fmt.Errorf("the answer has no ver:versionState")
	}
	var vs VersionState
	vs.Object = text(v["ver:objectID"])
	n, ok := integer(v, "ver:identifier")
	if !ok {
		return VersionState{}, fmt.Errorf("the answer's ver:identifier %q is not a number", text(v["ver:identifier"]))
	}
	vs.Number = int(n)
	if n, ok := integer(v, "ver:numFiles"); ok {
		vs.NumFiles = int(n)
	}
	vs.TotalSize, _ = integer(v, "ver:totalSize")
	vs.TotalActualSize, vs.HasActualSize = integer(v, "ver:totalActualSize")
	if fs := child(v, "ver:fileStates"); fs != nil {
		for _, u := range texts(fs["ver:fileState"]) {
			name, err := lastSegment(u)
			if err != nil {
				return VersionState{}, fmt.Errorf("the answer's file state %q: %w", u, err)
			}
			vs.Files = append(vs.Files, name)
		}
	}
	return vs, nil
}

// ParseObjectState reads a state answer about an object in the "json"
// form.
func ParseObjectState(data []byte) (ObjectState, error) {
	obj, err := decodeJSON(data)
	if err != nil {
		return ObjectState{}, fmt.Errorf("the answer is not JSON: %w", err)
	}
	o := child(obj, "obj:objectState")
	if o == nil {
		return ObjectState{}, fmt.Errorf("the answer has no obj:objectState")
	}
	n, ok := integer(o, "obj:numVersions")
	if !ok {
		return ObjectState{}, fmt.Errorf("the answer's obj:numVersions %q is not a number", text(o["obj:numVersions"]))
	}
	files, _ := integer(o, "obj:numFiles")
	return ObjectState{Object: text(o["obj:identifier"]), Versions: int(n), Files: int(files)}, nil
}

// lastSegment is a URL's last path segment, decoded.
func lastSegment(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	p := u.EscapedPath()
	return Decode(p[strings.LastIndexByte(p, '/')+1:])
}

// parseException reads what the service said of a failure: its exception
// (mrt-core2's TException) in the JSON form (one "exc:…" key whose object
// holds "exc:statusName", "exc:status", "exc:detail", "exc:error",
// "exc:description", …) or the XML form (the same as elements of the
// root), or else the start of the answer. The reason is the detail, else
// the error, else the description; the exception's trace is left out.
func parseException(body []byte) (status, reason string) {
	fields := map[string]string{}
	if obj, err := decodeJSON(body); err == nil {
		for k, v := range obj {
			if e, ok := v.(map[string]any); ok && strings.HasPrefix(k, "exc:") {
				for name, value := range e {
					if local, ok := strings.CutPrefix(name, "exc:"); ok {
						fields[local] = text(value)
					}
				}
				break
			}
		}
	} else {
		fields = exceptionXML(body)
	}
	status = fields["statusName"]
	if status == "" {
		status = fields["status"]
	}
	for _, name := range []string{"detail", "error", "description"} {
		if reason = strings.TrimSpace(fields[name]); reason != "" {
			break
		}
	}
	if status == "" && reason == "" {
		reason = strings.Join(strings.Fields(string(body)), " ")
		if len(reason) > 300 {
			reason = reason[:300] + "…"
		}
	}
	return status, reason
}

// exceptionXML reads the elements directly under an XML exception's root
// (one whose name begins "tException"), by local name.
func exceptionXML(body []byte) map[string]string {
	fields := map[string]string{}
	dec := xml.NewDecoder(bytes.NewReader(body))
	depth, name := 0, ""
	var value strings.Builder
	for {
		tok, err := dec.Token()
		if err != nil {
			return fields
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 && !strings.HasPrefix(t.Name.Local, "tException") {
				return fields
			}
			if depth == 2 {
				name = t.Name.Local
				value.Reset()
			}
		case xml.CharData:
			if depth == 2 {
				value.Write(t)
			}
		case xml.EndElement:
			if depth == 2 {
				fields[name] = value.String()
			}
			depth--
		}
	}
}

// Object is an object as the storage service's manifest of it lists it:
// every version with its files.
type Object struct {
	ID       string
	Current  int
	Versions []Version
}

// Version is one version of an Object.
type Version struct {
	Number int
	Files  []File
}

// File is one file of a Version.
type File struct {
	Name          string // the file id: producer/…, system/…
	Size          int64
	HashAlgorithm string // as checkm spells it: sha256, md5, …
	HashValue     string // lower-case hex
}

// Version returns version n of the object, or false.
func (o Object) Version(n int) (Version, bool) {
	for _, v := range o.Versions {
		if v.Number == n {
			return v, true
		}
	}
	return Version{}, false
}

// File returns the version's file of that name, or false.
func (v Version) File(name string) (File, bool) {
	for _, f := range v.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

// objectInfoXML is the storage service's manifest of an object
// (namespace http://uc3.cdlib.org/ontology/mrt/manifest), the document
// Merritt's inventory service reads.
type objectInfoXML struct {
	XMLName xml.Name `xml:"objectInfo"`
	Object  struct {
		ID      string `xml:"id,attr"`
		Current int    `xml:"current"`
	} `xml:"object"`
	Versions []struct {
		ID       int `xml:"id,attr"`
		Manifest struct {
			Files []struct {
				ID         string `xml:"id,attr"`
				DigestType string `xml:"digestType"`
				Digest     string `xml:"digest"`
				Size       int64  `xml:"size"`
			} `xml:"file"`
		} `xml:"manifest"`
	} `xml:"versions>version"`
}

// MaxObjectInfo bounds the manifest of one object read whole.
const MaxObjectInfo = 256 << 20

// ParseObjectInfo reads the storage service's manifest of an object.
func ParseObjectInfo(r io.Reader) (Object, error) {
	var doc objectInfoXML
	// The service declares XML 1.1, which encoding/xml does not take; the
	// document uses nothing of 1.1 beyond 1.0.
	br := bufio.NewReader(io.LimitReader(r, MaxObjectInfo))
	head, _ := br.Peek(64)
	var in io.Reader = br
	if i := bytes.Index(head, []byte(`version="1.1"`)); i >= 0 && bytes.HasPrefix(head, []byte("<?xml")) {
		fixed := bytes.Replace(head, []byte(`version="1.1"`), []byte(`version="1.0"`), 1)
		br.Discard(len(head))
		in = io.MultiReader(bytes.NewReader(fixed), br)
	}
	dec := xml.NewDecoder(in)
	if err := dec.Decode(&doc); err != nil {
		return Object{}, fmt.Errorf("the object manifest cannot be read: %w", err)
	}
	o := Object{ID: doc.Object.ID, Current: doc.Object.Current}
	for _, v := range doc.Versions {
		ver := Version{Number: v.ID}
		for _, f := range v.Manifest.Files {
			alg, err := checkm.HashAlgorithm(f.DigestType)
			if err != nil {
				return Object{}, fmt.Errorf("the object manifest: version %d, %s: %w", v.ID, f.ID, err)
			}
			ver.Files = append(ver.Files, File{Name: f.ID, Size: f.Size, HashAlgorithm: alg, HashValue: strings.ToLower(f.Digest)})
		}
		o.Versions = append(o.Versions, ver)
	}
	return o, nil
}

// JavaAlgorithm is a digest algorithm as Java names it ("SHA-256"), the
// spelling of the service's manifests.
func JavaAlgorithm(alg string) string {
	switch alg {
	case "md5":
		return "MD5"
	case "sha1":
		return "SHA-1"
	case "sha256":
		return "SHA-256"
	case "sha512":
		return "SHA-512"
	}
	return alg
}

// AddManifestProfile is the profile of the manifest an add or update call
// names: the storage service refuses any other.
const AddManifestProfile = "http://uc3.cdlib.org/registry/store/manifest/mrt-add-manifest"

// AddFile is one row of an add manifest.
type AddFile struct {
	URL           string // where the storage service fetches it
	HashAlgorithm string // checkm's spelling: sha256
	HashValue     string
	Size          int64
	Modified      time.Time // zero: not said
	Name          string    // the file id in the version: producer/…, system/…
	MimeType      string
}

// WriteAddManifest writes the manifest of a version to store in the form
// the storage service reads: checkm 0.7, the add manifest's profile, its
// namespace prefixes and seven columns, one row a file, each file's name
// spelled by ManifestName.
func WriteAddManifest(w io.Writer, files []AddFile) error {
	var b bytes.Buffer
	b.WriteString("#%checkm_0.7\n")
	b.WriteString("#%profile | " + AddManifestProfile + "\n")
	b.WriteString("#%prefix | nfo:<http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#>\n")
	b.WriteString("#%prefix | nie:<http://www.semanticdesktop.org/ontologies/2007/01/19/nie/#>\n")
	b.WriteString("#%prefix | mrt:<http://uc3.cdlib.org/ontology/mrt/mom#>\n")
	b.WriteString("#%columns | nfo:fileURL | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | nie:mimeType\n")
	for _, f := range files {
		modified := ""
		if !f.Modified.IsZero() {
			modified = f.Modified.Format(time.RFC3339)
		}
		name, err := ManifestName(f.Name)
		if err != nil {
			return fmt.Errorf("add manifest: %w", err)
		}
		row := []string{f.URL, f.HashAlgorithm, f.HashValue, strconv.FormatInt(f.Size, 10), modified, name, f.MimeType}
		for _, v := range row {
			if strings.ContainsAny(v, "|\r\n") || strings.TrimSpace(v) != v {
				return fmt.Errorf("add manifest: %s: the value %q cannot be written in a manifest row", f.Name, v)
			}
		}
		if f.URL == "" || f.Name == "" || f.HashValue == "" || f.Size < 0 {
			return fmt.Errorf("add manifest: %s: a row needs a URL, a name, a digest and a size", f.Name)
		}
		b.WriteString(strings.Join(row, " | ") + "\n")
	}
	b.WriteString("#%eof\n")
	_, err := w.Write(b.Bytes())
	return err
}

// ManifestName spells a file's name in an add manifest so that the storage
// service reads back exactly that name. It reads a row's values but the URL
// through mrt-core2's Checkm.dec, which makes "%20" a space and then "%7c"
// a '|' and decodes nothing else, and it splits the row at each '|' with
// the blanks around it: every space is written "%20" and every '|' "%7c".
// A name with "%20" or "%7c" in it cannot be written at all (the service
// would read a space or a '|' there: there is no escape for '%'), nor one
// that breaks a line or begins or ends with other blanks (lost at the
// split); the error says so.
func ManifestName(name string) (string, error) {
	switch {
	case strings.Contains(name, "%20") || strings.Contains(name, "%7c"):
		return "", fmt.Errorf("%q cannot be stored in Merritt's storage service under its own name: the service reads %q in a manifest's file name as a space and %q as '|', and has no way to write them otherwise (rename the file)",
			name, "%20", "%7c")
	case strings.ContainsAny(name, "\r\n"):
		return "", fmt.Errorf("%q cannot be stored in Merritt's storage service: its manifest holds one file a line", name)
	}
	enc := strings.NewReplacer(" ", "%20", "|", "%7c").Replace(name)
	if strings.TrimSpace(enc) != enc {
		return "", fmt.Errorf("%q cannot be stored in Merritt's storage service under its own name: the service drops the blanks a manifest value begins or ends with", name)
	}
	return enc, nil
}
