// Package sysfiles writes the system files Merritt keeps with every object
// version: its ERC record (mrt-erc.txt) and its Dublin Core record
// (mrt-dc.xml), made from the submission's metadata and the object's ids.
package sysfiles

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// File names in the version's system/ folder.
const (
	ERCName        = "mrt-erc.txt"
	DublinCoreName = "mrt-dc.xml"
)

// Object is what the system files describe.
type Object struct {
	ARK      string
	LocalIDs []string
	Metadata *v1.Metadata
}

// unavailable is ERC's code for a value the depositor did not give.
const unavailable = "(:unav)"

// ERC is the object's Electronic Resource Citation in ANVL: who, what,
// when, then one where per identifier (the ARK first). A value that spans
// lines is folded (continuation lines start with a space), as ANVL reads it.
func ERC(o Object) []byte {
	var b strings.Builder
	b.WriteString("erc:\n")
	line := func(name, value string) {
		if strings.TrimSpace(value) == "" {
			value = unavailable
		}
		value = strings.ReplaceAll(strings.ReplaceAll(value, "\r\n", "\n"), "\r", "\n")
		b.WriteString(name + ": " + strings.ReplaceAll(value, "\n", "\n ") + "\n")
	}
	md := o.Metadata
	line("who", md.GetWho())
	line("what", md.GetWhat())
	line("when", md.GetWhen())
	line("where", o.ARK)
	for _, id := range o.LocalIDs {
		line("where", id)
	}
	return []byte(b.String())
}

// Namespaces of the Dublin Core record.
const (
	NamespaceDC    = "http://purl.org/dc/elements/1.1/"
	NamespaceOAIDC = "http://www.openarchives.org/OAI/2.0/oai_dc/"
)

// dcRecord is an oai_dc:dc record; encoding/xml escapes every value.
type dcRecord struct {
	XMLName    xml.Name `xml:"oai_dc:dc"`
	OAIDC      string   `xml:"xmlns:oai_dc,attr"`
	DC         string   `xml:"xmlns:dc,attr"`
	Creator    []string `xml:"dc:creator"`
	Title      []string `xml:"dc:title"`
	Date       []string `xml:"dc:date"`
	Identifier []string `xml:"dc:identifier"`
	Coverage   []string `xml:"dc:coverage"`
}

// DublinCore is the object's Dublin Core record: creator, title and date
// from the ERC metadata (left out when not given), the ARK and local ids as
// identifiers, and the ERC "where" of the submission, if any, as coverage.
func DublinCore(o Object) ([]byte, error) {
	md := o.Metadata
	rec := dcRecord{OAIDC: NamespaceOAIDC, DC: NamespaceDC,
		Creator: nonEmpty(md.GetWho()), Title: nonEmpty(md.GetWhat()), Date: nonEmpty(md.GetWhen()),
		Identifier: append([]string{o.ARK}, o.LocalIDs...), Coverage: nonEmpty(md.GetWhere())}
	var b bytes.Buffer
	b.WriteString(xml.Header)
	enc := xml.NewEncoder(&b)
	enc.Indent("", "  ")
	if err := enc.Encode(rec); err != nil {
		return nil, fmt.Errorf("writing Dublin Core of %s: %w", o.ARK, err)
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func nonEmpty(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return []string{s}
}

// Write writes both system files into dir (created if missing), replacing
// what a previous attempt of the same job wrote. Each is a new file renamed
// into place, never an old one rewritten: the old one may be a stored
// version's file too (the object store links files it stores).
func Write(dir string, o Object) error {
	dc, err := DublinCore(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for name, data := range map[string][]byte{ERCName: ERC(o), DublinCoreName: dc} {
		if err := replaceFile(filepath.Join(dir, name), data); err != nil {
			return fmt.Errorf("writing system file: %w", err)
		}
	}
	return nil
}

// Names of the system files of a version for Merritt's storage service.
const (
	// IngestName names the job that made the version
	// (merrittstore.IngestRecord).
	IngestName = "mrt-ingest.txt"
	// DeleteName lists the files an update removes, one a line, as
	// Merritt's ingest service keeps it.
	DeleteName = "mrt-delete.txt"
)

// WriteMerritt writes the system files a version for Merritt's storage
// service has beside the others: the ingest record, and an update's list of
// files it deletes (none: no such file). It replaces what an earlier
// attempt wrote, as Write does.
func WriteMerritt(dir string, ingest []byte, deletions []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := replaceFile(filepath.Join(dir, IngestName), ingest); err != nil {
		return fmt.Errorf("writing system file: %w", err)
	}
	del := filepath.Join(dir, DeleteName)
	if len(deletions) == 0 {
		if err := os.Remove(del); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing %s: %w", del, err)
		}
		return nil
	}
	if err := replaceFile(del, []byte(strings.Join(deletions, "\n")+"\n")); err != nil {
		return fmt.Errorf("writing system file: %w", err)
	}
	return nil
}

// replaceFile writes path under a temporary name beside it and renames it
// into place; the processor removes the temporary files of an attempt that
// died in between (store.RemoveTemps) before it writes again.
func replaceFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
