package checkm_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
)

// FuzzParse: Parse and ParseDeposited never panic, and whatever either
// accepts Write writes and Parse reads back to the same profile, fields and
// entries. The seed corpus is testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if m, err := checkm.Parse(bytes.NewReader(data), checkm.Limits{}); err == nil {
			// An unmarked manifest's names may hold "%7c" as written.
			writesBack(t, m, func(name string) string { return strings.ReplaceAll(name, "%7c", "|") })
		}
		if m, err := checkm.ParseDeposited(bytes.NewReader(data), checkm.Limits{}); err == nil {
			writesBack(t, m, func(name string) string { return name })
		}
	})
}

// writesBack checks that m's entries keep the rules (each name, as seen,
// passes CheckFileName) and that Write then Parse gives m back.
func writesBack(t *testing.T, m *checkm.Manifest, seen func(string) string) {
	t.Helper()
	for _, e := range m.Entries {
		if err := checkm.CheckFileName(seen(e.FileName)); err != nil || e.FileURL == "" || e.FileSize < -1 {
			t.Fatalf("accepted an entry that breaks the rules: %+v (%v)", e, err)
		}
	}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, m.Profile, m.Fields, m.Entries); err != nil {
		t.Fatalf("Write refused what Parse accepted: %v", err)
	}
	// Write spaces the columns, so its lines may be longer than the
	// input's: read it back without limits in the way.
	back, err := checkm.Parse(&buf, checkm.Limits{MaxBytes: 1 << 40, MaxLines: 1 << 30, MaxLineBytes: 1 << 30})
	if err != nil {
		t.Fatalf("Parse refused what Write wrote: %v\n%s", err, buf.String())
	}
	if back.Profile != m.Profile || !reflect.DeepEqual(back.Fields, m.Fields) {
		t.Fatalf("profile/fields %q %q read back as %q %q", m.Profile, m.Fields, back.Profile, back.Fields)
	}
	if !reflect.DeepEqual(withoutLines(back.Entries), withoutLines(m.Entries)) {
		t.Fatalf("entries\n%+v\nread back as\n%+v", m.Entries, back.Entries)
	}
}
