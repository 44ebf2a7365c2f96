package sysfiles

import (
	"encoding/xml"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// FuzzSystemFiles writes an object's system files from whatever metadata
// and ids a depositor sent (a submission, a manifest's columns). The ERC
// record keeps its shape: no value can add or reorder an element (a value
// with line breaks only continues its own); the Dublin Core record is XML
// that reads back as the values given, characters XML cannot hold
// replaced. The seed corpus is testdata/fuzz/FuzzSystemFiles.
func FuzzSystemFiles(f *testing.F) {
	f.Fuzz(func(t *testing.T, who, what, when, where, ark, localID string) {
		o := Object{ARK: ark, Metadata: &v1.Metadata{Who: who, What: what, When: when, Where: where}}
		if localID != "" {
			o.LocalIDs = []string{localID}
		}
		elements := []string{"who", "what", "when", "where"}
		for range o.LocalIDs {
			elements = append(elements, "where")
		}
		if got := ercElements(t, ERC(o)); !slices.Equal(got, elements) {
			t.Fatalf("ERC elements %q, want %q", got, elements)
		}

		dc, err := DublinCore(o)
		if err != nil {
			t.Fatalf("DublinCore: %v", err)
		}
		var rec struct {
			Creator    []string `xml:"http://purl.org/dc/elements/1.1/ creator"`
			Title      []string `xml:"http://purl.org/dc/elements/1.1/ title"`
			Date       []string `xml:"http://purl.org/dc/elements/1.1/ date"`
			Identifier []string `xml:"http://purl.org/dc/elements/1.1/ identifier"`
			Coverage   []string `xml:"http://purl.org/dc/elements/1.1/ coverage"`
		}
		if err := xml.Unmarshal(dc, &rec); err != nil {
			t.Fatalf("Dublin Core is not XML: %v\n%s", err, dc)
		}
		for _, c := range []struct {
			name string
			got  []string
			want []string
		}{
			{"creator", rec.Creator, given(who)},
			{"title", rec.Title, given(what)},
			{"date", rec.Date, given(when)},
			{"coverage", rec.Coverage, given(where)},
			{"identifier", rec.Identifier, append([]string{xmlText(ark)}, xmlTexts(o.LocalIDs)...)},
		} {
			if !slices.Equal(c.got, c.want) {
				t.Fatalf("dc:%s %q, want %q\n%s", c.name, c.got, c.want, dc)
			}
		}
	})
}

// ercElements lists the element names of an ERC record: every line that
// does not continue the one before, after the "erc:" line.
func ercElements(t *testing.T, erc []byte) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(erc), "\n"), "\n")
	if lines[0] != "erc:" {
		t.Fatalf("ERC record starts %q", lines[0])
	}
	var names []string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, " ") {
			continue
		}
		name, _, ok := strings.Cut(l, ": ")
		if !ok {
			t.Fatalf("ERC line %q is neither an element nor a continuation", l)
		}
		names = append(names, name)
	}
	return names
}

// given is what the Dublin Core record holds for a value: nothing when it
// is blank, otherwise its text.
func given(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	return []string{xmlText(v)}
}

func xmlTexts(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = xmlText(v)
	}
	return out
}

// xmlText is v as an XML writer keeps it: bytes that are not UTF-8 and
// characters XML 1.0 cannot hold become U+FFFD.
func xmlText(v string) string {
	var b strings.Builder
	for len(v) > 0 {
		r, size := utf8.DecodeRuneInString(v)
		if (r == utf8.RuneError && size == 1) || !xmlChar(r) {
			r = utf8.RuneError
		}
		b.WriteRune(r)
		v = v[size:]
	}
	return b.String()
}

// xmlChar is XML 1.0's Char production.
func xmlChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
}
