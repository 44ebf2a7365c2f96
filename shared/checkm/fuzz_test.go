package checkm_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
)

// FuzzParse: Parse never panics, and whatever it accepts Write writes and
// Parse reads back to the same profile, fields and entries. The seed corpus
// is testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := checkm.Parse(bytes.NewReader(data), checkm.Limits{})
		if err != nil {
			return
		}
		for _, e := range m.Entries {
			if err := checkm.CheckFileName(e.FileName); err != nil || e.FileURL == "" || e.FileSize < -1 {
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
	})
}
