package validate

import (
	"strings"
	"testing"

	"github.com/ingestq/ingestq/e2e/robustness/traffic"
)

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

// TestAStoredFileThatIsPartialOrNotTheDepositsIsAViolation: the checker
// names a stored file shorter than the deposited one as partial, one of
// another digest, one missing and one the deposit has not.
func TestAStoredFileThatIsPartialOrNotTheDepositsIsAViolation(t *testing.T) {
	obj := traffic.Object{Files: map[string]string{"aaa": "a.txt", "bbb": "b.txt", "ccc": "c.txt", "ddd": "d.txt"},
		Sizes: map[string]int64{"a.txt": 10, "b.txt": 20, "c.txt": 30, "d.txt": 40}}
	stored := map[string]storedFile{
		"a.txt": {size: 10, sha256: "aaa"}, // whole
		"b.txt": {size: 12, sha256: "xxx"}, // partial
		"c.txt": {size: 30, sha256: "yyy"}, // another file
		"e.txt": {size: 1, sha256: "eee"},  // not deposited
	}
	r := &Report{Figures: map[string]int{}}
	r.checkWhole(completedJob{job: &job{id: "jid1"}, obj: obj}, "version v1", stored)
	var got []string
	for _, v := range r.Violations {
		if v.Check != CheckStoredWhole || v.Item != "jid1" {
			t.Errorf("violation %v", v)
		}
		got = append(got, v.Detail)
	}
	want := []string{
		"version v1 stores b.txt partial: 12 bytes of 20",
		"version v1 stores c.txt of 30 bytes, sha256 yyy; the deposit's is 30 bytes, sha256 ccc",
		"version v1 does not store d.txt",
		"version v1 stores e.txt, which the deposit has not",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || r.Figures["files stored whole"] != 1 {
		t.Errorf("violations:\n%s\nwant:\n%s\n(files stored whole: %d)", strings.Join(got, "\n"), strings.Join(want, "\n"), r.Figures["files stored whole"])
	}
}
