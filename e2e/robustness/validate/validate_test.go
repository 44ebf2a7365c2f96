package validate

import "testing"

// TestNoidNumberReadsTheNumberAnARKSpells: ARKs the processor mints (NOID
// names with a check character) read back as their counter numbers; a
// wrong check character or shoulder is no number.
func TestNoidNumberReadsTheNumberAnARKSpells(t *testing.T) {
	for _, tc := range []struct {
		ark  string
		n    int64
		okay bool
	}{
		{"ark:/99999/fk40000017", 1, true},
		{"ark:/99999/fk40000018", 0, false},
		{"ark:/99999/fk50000017", 0, false},
	} {
		n, ok := noidNumber("ark:/99999/fk4", tc.ark)
		if ok != tc.okay || (ok && n != tc.n) {
			t.Errorf("noidNumber(%s) = %d, %t; want %d, %t", tc.ark, n, ok, tc.n, tc.okay)
		}
	}
}
