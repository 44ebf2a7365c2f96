package validate

import (
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/robustness/traffic"
	"github.com/ingestq/ingestq/e2e/robustness/watch"
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

// TestAMoveInsideALockIsAViolationOnlyWhenTheLockCertainlyStood: a move
// by one worker while another's lock stood is a violation when the lock's
// end is certain (tight, or its holder's own later move); inside a lock
// the watcher saw gone only after holdings it did not see, it is a note.
func TestAMoveInsideALockIsAViolationOnlyWhenTheLockCertainlyStood(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 21, 40, 56, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	workers := map[string][]int64{"recorder-a-1": {1}, "recorder-b-1": {2}}
	// b moves the job 3.4 s after a's lock was created.
	moveB := seenMove{Move: watch.Move{At: at(3400 * time.Millisecond), From: "Recording", To: "Notify", Worker: "recorder-b-1"}}
	for _, tc := range []struct {
		name      string
		lock      watch.Lock
		moves     []seenMove
		violation bool
	}{
		{"seen gone late, after unseen holdings", watch.Lock{Session: 1, Created: t0, Gone: at(3450 * time.Millisecond)},
			[]seenMove{moveB}, false},
		{"seen gone tight", watch.Lock{Session: 1, Created: t0, Gone: at(3450 * time.Millisecond), Tight: true},
			[]seenMove{moveB}, true},
		{"ended by its holder's own later move", watch.Lock{Session: 1, Created: t0, Gone: at(5 * time.Second)},
			[]seenMove{moveB, {Move: watch.Move{At: at(4 * time.Second), From: "Notify", To: "Completed", Worker: "recorder-a-1"}}}, true},
		{"still held at the end", watch.Lock{Session: 1, Created: t0}, []seenMove{moveB}, true},
		{"gone before the move", watch.Lock{Session: 1, Created: t0, Gone: at(3 * time.Second), Tight: true}, []seenMove{moveB}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Figures: map[string]int{}}
			r.mutualExclusion("jid0000000010", watch.Job{ID: "jid0000000010", Locks: []watch.Lock{tc.lock}}, tc.moves, workers, nil)
			if got := len(r.Violations) > 0; got != tc.violation {
				t.Errorf("violations %v, notes %v; want a violation: %t", r.Violations, r.Notes, tc.violation)
			}
		})
	}
}
