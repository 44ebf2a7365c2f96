package checkm_test

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
)

// versionFields are the columns of the processor's storage and version
// manifests.
var versionFields = []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}

// merrittDec reads a value as mrt-core2's Checkm.dec does: "%20" is a
// space, then "%7c" a '|'.
func merrittDec(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "%20", " "), "%7c", "|")
}

// TestAPipeInANameIsWrittenAsMerrittSpellsItAndReadsBackExactly: a version
// whose names hold a '|' is written marked "#%encoded | %7c" before its
// fields, each '|' of a name spelled "%7c" (the URL escaped as a URL is),
// so that Merritt's own reading of the row gives the name too; Parse reads
// every name back exactly, those holding "%20" and "%7C" as well.
func TestAPipeInANameIsWrittenAsMerrittSpellsItAndReadsBackExactly(t *testing.T) {
	names := []string{"producer/a|b.txt", "producer/|lead", "producer/100%20off.txt", "producer/x%7Cy.txt", "producer/d|e/f|g.txt", "system/mrt-erc.txt"}
	var entries []checkm.Entry
	for _, n := range names {
		entries = append(entries, checkm.Entry{FileURL: checkm.FileURL("/store/ark_99999_fk4x/v1/" + n), HashAlgorithm: "md5",
			HashValue: "0cc175b9c0f1b6a831c399e269772661", FileSize: 1, FileName: n})
	}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, checkm.ProfileObject, versionFields, entries); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	mark, fields := strings.Index(text, "\n#%encoded | %7c\n"), strings.Index(text, "\n#%fields ")
	if mark < 0 || mark > fields {
		t.Fatalf("no mark before #%%fields:\n%s", text)
	}
	row := "file:///store/ark_99999_fk4x/v1/producer/a%7Cb.txt | md5 | 0cc175b9c0f1b6a831c399e269772661 | 1 | producer/a%7cb.txt\n"
	if !strings.Contains(text, "\n"+row) {
		t.Errorf("no row %q in\n%s", row, text)
	}
	m, err := checkm.Parse(strings.NewReader(text), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withoutLines(m.Entries), entries) {
		t.Errorf("read back\n%+v\nwant\n%+v", m.Entries, entries)
	}
	// Merritt's reading agrees on every name that holds no "%20".
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") || strings.Contains(line, "%2520") {
			continue
		}
		name := merrittDec(strings.TrimSpace(line[strings.LastIndex(line, "|")+1:]))
		if !strings.Contains(strings.Join(names, "\n"), name) {
			t.Errorf("Merritt would read the row %q as the name %q", line, name)
		}
	}
}

// TestAManifestWrittenWithoutTheMarkReadsBackAsWritten: ingestq wrote
// testdata/unmarked-version.checkm for a version whose names hold "%20",
// "%7c" and "%7C" and no '|'. Parse reads each name as written, and Write
// writes that version byte for byte the same, with no mark: a stored
// version audits and is recorded under its names, and its manifest is
// served unchanged. A depositor's manifest of the same text means '|'
// where it says "%7c".
func TestAManifestWrittenWithoutTheMarkReadsBackAsWritten(t *testing.T) {
	stored, err := os.ReadFile("testdata/unmarked-version.checkm")
	if err != nil {
		t.Fatal(err)
	}
	m, err := checkm.Parse(bytes.NewReader(stored), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range m.Entries {
		names = append(names, e.FileName)
	}
	want := []string{"producer/100%20off.txt", "producer/x%7cy.txt", "producer/x%7Cy.txt", "system/mrt-erc.txt"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	if got, _ := checkm.FilePath(m.Entries[1].FileURL); got != "/store/ark_99999_fk4old/v1/producer/x%7cy.txt" {
		t.Errorf("the file of %q is %q", names[1], got)
	}
	var again bytes.Buffer
	if err := checkm.Write(&again, m.Profile, m.Fields, m.Entries); err != nil {
		t.Fatal(err)
	}
	if again.String() != string(stored) {
		t.Errorf("written again as\n%s\nwant\n%s", again.String(), stored)
	}
	dep, err := checkm.ParseDeposited(bytes.NewReader(stored), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Entries[1].FileName; got != "producer/x|y.txt" {
		t.Errorf("as a depositor's manifest, %q reads as %q", names[1], got)
	}
}

// TestADepositorsManifestSpellsAPipeAsMerrittReadsIt: ParseDeposited reads
// "%7c" as '|' in every value but the URL, marked or not; "%20" and "%7C"
// stay as written; a name taken from the URL is not decoded, and one that
// holds "%7c" is refused; two rows naming one file once decoded collide.
func TestADepositorsManifestSpellsAPipeAsMerrittReadsIt(t *testing.T) {
	in := "#%checkm_0.7\n#%profile | " + checkm.ProfileObject + "\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileName | mrt:title\n" +
		"http://127.0.0.1/d/a%7cb.txt | | | | a%7cb.txt | Before %7c after\n" +
		"http://127.0.0.1/d/100%2520off.txt | | | | 100%20off.txt |\n" +
		"http://127.0.0.1/d/x%257Cy.txt | | | | x%7Cy.txt |\n" +
		"http://127.0.0.1/d/c%7Cd.txt | | | | |\n"
	for _, marked := range []bool{false, true} {
		text := in
		if marked {
			text = strings.Replace(in, "#%fields", "#%encoded | %7c\n#%fields", 1)
		}
		m, err := checkm.ParseDeposited(strings.NewReader(text), checkm.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		got := [][2]string{}
		for _, e := range m.Entries {
			got = append(got, [2]string{e.FileURL, e.FileName})
		}
		want := [][2]string{{"http://127.0.0.1/d/a%7cb.txt", "a|b.txt"}, {"http://127.0.0.1/d/100%2520off.txt", "100%20off.txt"},
			{"http://127.0.0.1/d/x%257Cy.txt", "x%7Cy.txt"}, {"http://127.0.0.1/d/c%7Cd.txt", "c|d.txt"}}
		if !reflect.DeepEqual(got, want) || m.Entries[0].Title != "Before | after" {
			t.Errorf("marked %v: read %q, title %q", marked, got, m.Entries[0].Title)
		}
	}
	for _, tc := range []struct{ in, reason string }{
		{head + "http://127.0.0.1/d/a%257cb.txt | | | |\n", `line 3: no nfo:fileName and the URL's file name "a%7cb.txt" contains "%7c", which a manifest reads as '|'`},
	} {
		if _, err := checkm.ParseDeposited(strings.NewReader(tc.in), checkm.Limits{}); err == nil || err.Error() != tc.reason {
			t.Errorf("ParseDeposited: %v, want %q", err, tc.reason)
		}
	}
	m, err := checkm.ParseDeposited(strings.NewReader(head+"http://127.0.0.1/1 | | | | a%7cb\nhttp://127.0.0.1/a%7Cb | | | |\n"), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CheckFileNames(); err == nil || err.Error() != `line 4: file name "a|b" already used on line 3` {
		t.Errorf("CheckFileNames: %v", err)
	}
}
