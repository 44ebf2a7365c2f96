package sysfiles

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

func TestERCIsANVLWithOneWherePerIdentifier(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Object
		want string
	}{
		{"full metadata", Object{ARK: "ark:/99999/fk4x", LocalIDs: []string{"loc001", "loc002"},
			Metadata: &v1.Metadata{Who: "Doe, Jane", What: "Letters", When: "1901"}},
			"erc:\nwho: Doe, Jane\nwhat: Letters\nwhen: 1901\nwhere: ark:/99999/fk4x\nwhere: loc001\nwhere: loc002\n"},
		{"missing values are (:unav)", Object{ARK: "ark:/99999/fk4y"},
			"erc:\nwho: (:unav)\nwhat: (:unav)\nwhen: (:unav)\nwhere: ark:/99999/fk4y\n"},
		{"multi-line values are folded", Object{ARK: "ark:/99999/fk4z", Metadata: &v1.Metadata{What: "line one\r\nline two\nwho: forged"}},
			"erc:\nwho: (:unav)\nwhat: line one\n line two\n who: forged\nwhen: (:unav)\nwhere: ark:/99999/fk4z\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(ERC(tc.o)); got != tc.want {
				t.Errorf("ERC =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// parsedDC reads a record back by namespace, not by prefix.
type parsedDC struct {
	XMLName    xml.Name
	Creator    []string `xml:"http://purl.org/dc/elements/1.1/ creator"`
	Title      []string `xml:"http://purl.org/dc/elements/1.1/ title"`
	Date       []string `xml:"http://purl.org/dc/elements/1.1/ date"`
	Identifier []string `xml:"http://purl.org/dc/elements/1.1/ identifier"`
	Coverage   []string `xml:"http://purl.org/dc/elements/1.1/ coverage"`
}

func TestDublinCoreParsesBackWithEscapedValues(t *testing.T) {
	o := Object{ARK: "ark:/99999/fk4x", LocalIDs: []string{"loc<1>"},
		Metadata: &v1.Metadata{Who: `Tom & "Jerry"`, What: "</dc:title><script>x</script>", When: "2026-11-22", Where: "Oakland\x01"}}
	data, err := DublinCore(o)
	if err != nil {
		t.Fatal(err)
	}
	var got parsedDC
	if err := xml.Unmarshal(data, &got); err != nil {
		t.Fatalf("the record is not XML: %v\n%s", err, data)
	}
	if got.XMLName.Space != NamespaceOAIDC || got.XMLName.Local != "dc" {
		t.Errorf("root element %v, want oai_dc:dc", got.XMLName)
	}
	for _, c := range []struct {
		field string
		got   []string
		want  []string
	}{
		{"creator", got.Creator, []string{`Tom & "Jerry"`}},
		{"title", got.Title, []string{"</dc:title><script>x</script>"}},
		{"date", got.Date, []string{"2026-11-22"}},
		{"identifier", got.Identifier, []string{"ark:/99999/fk4x", "loc<1>"}},
		// XML cannot hold U+0001: it is replaced, not passed through.
		{"coverage", got.Coverage, []string{"Oakland\uFFFD"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("dc:%s = %q, want %q", c.field, c.got, c.want)
		}
	}
}

func TestDublinCoreLeavesOutWhatWasNotGiven(t *testing.T) {
	data, err := DublinCore(Object{ARK: "ark:/99999/fk4x"})
	if err != nil {
		t.Fatal(err)
	}
	var got parsedDC
	if err := xml.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Creator)+len(got.Title)+len(got.Date)+len(got.Coverage) != 0 || !slices.Equal(got.Identifier, []string{"ark:/99999/fk4x"}) {
		t.Errorf("record %+v, want the identifier only", got)
	}
}

func TestWriteReplacesAnEarlierAttempt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "system")
	if err := Write(dir, Object{ARK: "ark:/99999/fk4old"}); err != nil {
		t.Fatal(err)
	}
	o := Object{ARK: "ark:/99999/fk4new", Metadata: &v1.Metadata{Who: "A"}}
	if err := Write(dir, o); err != nil {
		t.Fatal(err)
	}
	erc, _ := os.ReadFile(filepath.Join(dir, ERCName))
	if string(erc) != string(ERC(o)) {
		t.Errorf("%s holds\n%s", ERCName, erc)
	}
	dc, _ := os.ReadFile(filepath.Join(dir, DublinCoreName))
	want, _ := DublinCore(o)
	if string(dc) != string(want) {
		t.Errorf("%s holds\n%s", DublinCoreName, dc)
	}
}

// The object store links the files it stores: an earlier attempt's system
// file may be a stored version's too, read-only, and must stay as it is.
func TestWriteLeavesAFileStoredFromAnEarlierAttemptAsItWas(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "system")
	old := Object{ARK: "ark:/99999/fk4old"}
	if err := Write(dir, old); err != nil {
		t.Fatal(err)
	}
	stored := filepath.Join(base, "stored-erc.txt")
	if err := os.Link(filepath.Join(dir, ERCName), stored); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(stored, 0o444); err != nil {
		t.Fatal(err)
	}
	o := Object{ARK: "ark:/99999/fk4new"}
	if err := Write(dir, o); err != nil {
		t.Fatal(err)
	}
	if erc, _ := os.ReadFile(stored); string(erc) != string(ERC(old)) {
		t.Errorf("the stored file changed to\n%s", erc)
	}
	if erc, _ := os.ReadFile(filepath.Join(dir, ERCName)); string(erc) != string(ERC(o)) {
		t.Errorf("%s holds\n%s", ERCName, erc)
	}
}

func TestWriteReportsAFileInTheWay(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "system")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(blocker, Object{ARK: "ark:/99999/fk4x"}); err == nil {
		t.Fatal("Write into a regular file succeeded")
	}
}
