package merrittstore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
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
	Status string // the service's exception name ("REQUEST_INVALID"), "" when it gave none
	Detail string // the service's words, or the start of its answer
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
// formatted in any of its forms (JSON: "exc:…" keys; XML: "exc:" elements),
// or else the start of the answer.
func parseException(body []byte) (status, detail string) {
	if obj, err := decodeJSON(body); err == nil {
		for k, v := range obj {
			if e, ok := v.(map[string]any); ok && strings.HasPrefix(k, "exc:") {
				status = text(e["exc:statusName"])
				if status == "" {
					status = text(e["exc:status"])
				}
				detail = text(e["exc:detail"])
				if detail == "" {
					detail = text(e["exc:error"])
				}
				return status, detail
			}
		}
	}
	dec := xml.NewDecoder(bytes.NewReader(body))
	var key string
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch t := tok.(type) {
		case xml.StartElement:
			key = t.Name.Local
		case xml.CharData:
			switch v := strings.TrimSpace(string(t)); {
			case v == "":
			case key == "statusName" || (key == "status" && status == ""):
				status = v
			case key == "detail" || (key == "error" && detail == ""):
				detail = v
			}
		}
	}
	if status == "" && detail == "" {
		detail = strings.Join(strings.Fields(string(body)), " ")
		if len(detail) > 300 {
			detail = detail[:300] + "…"
		}
	}
	return status, detail
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
// namespace prefixes and seven columns, one row a file.
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
		row := []string{f.URL, f.HashAlgorithm, f.HashValue, strconv.FormatInt(f.Size, 10), modified, f.Name, f.MimeType}
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
