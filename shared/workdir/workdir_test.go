package workdir

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/durable"
)

// outsideFile makes a file outside the work root that must survive.
func outsideFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "precious.txt")
	if err := os.WriteFile(p, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); err != nil {
		t.Errorf("%s should still exist: %v", p, err)
	}
}

func mustNotExist(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("%s should be gone (err %v)", p, err)
	}
}

func TestRemoveDeletesAJobDirectoryAndLeavesItsSiblings(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	job, sibling := r.Job("bid0000000001", "jid0000000001"), r.Job("bid0000000001", "jid0000000002")
	for _, d := range []string{filepath.Join(job, "producer"), sibling} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(job, "producer", "a.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(job); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, job)
	mustExist(t, sibling)
	if err := r.Remove(job); err != nil {
		t.Errorf("removing a missing directory: %v, want nil", err)
	}
	if err := r.RemoveBatch("bid0000000001"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, r.Batch("bid0000000001"))
	mustExist(t, r.Dir())
}

func TestRemoveRefusesPathsOutsideTheRoot(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	precious := outsideFile(t)
	for _, tc := range []struct{ name, path string }{
		{"the root itself", r.Dir()},
		{"the root with a trailing dot-dot", r.Dir() + "/bid0000000001/.."},
		{"a sibling of the root", filepath.Join(filepath.Dir(r.Dir()), "other")},
		{"an escape through dot-dot", r.Dir() + "/../" + filepath.Base(filepath.Dir(precious))},
		{"a file elsewhere", precious},
		{"a relative path", "bid0000000001/jid0000000001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Remove(tc.path)
			if err == nil || !strings.Contains(err.Error(), "refusing") {
				t.Errorf("Remove(%q) = %v, want a refusal", tc.path, err)
			}
		})
	}
	mustExist(t, precious)
	mustExist(t, r.Dir())
	for _, bid := range []string{"", ".", "..", "a/b"} {
		if err := r.RemoveBatch(bid); err == nil {
			t.Errorf("RemoveBatch(%q) = nil, want a refusal", bid)
		}
	}
}

func TestRemoveNeverFollowsSymlinksOutOfTheRoot(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	precious := outsideFile(t)
	outsideDir := filepath.Dir(precious)

	// A job directory that is itself a link to a directory outside: the
	// link goes, what it points at stays.
	job := r.Job("bid0000000001", "jid0000000001")
	if err := os.MkdirAll(filepath.Dir(job), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outsideDir, job); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(job); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, job)
	mustExist(t, precious)

	// A batch directory that is a link outside: removing a job "inside" it
	// must not reach through the link.
	if err := os.Symlink(outsideDir, r.Batch("bid0000000002")); err != nil {
		t.Fatal(err)
	}
	err = r.Remove(filepath.Join(r.Batch("bid0000000002"), filepath.Base(precious)))
	if err == nil {
		t.Error("removing through a link that leaves the root succeeded")
	}
	mustExist(t, precious)

	// A link inside a job directory, pointing outside, is removed as a link.
	job3 := r.Job("bid0000000003", "jid0000000003")
	if err := os.MkdirAll(job3, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outsideDir, filepath.Join(job3, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := r.RemoveBatch("bid0000000003"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, r.Batch("bid0000000003"))
	mustExist(t, precious)
}

func TestOpenRefusesARelativeRoot(t *testing.T) {
	if _, err := Open("work"); err == nil {
		t.Error("Open(\"work\") = nil error, want a refusal")
	}
}

// TestAKeptPayloadIsReadBackWholeReplacedWholeAndGoesWithItsBatch: the
// copy of a batch's payload is read back as written, a second keeping
// replaces it and leaves no temporary file, a read is bounded, and the
// batch's removal takes it along.
func TestAKeptPayloadIsReadBackWholeReplacedWholeAndGoesWithItsBatch(t *testing.T) {
	r, err := Open(filepath.Join(t.TempDir(), "work"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var sync durable.Syncer
	const bid = "bid0000000007"
	if _, err := r.ReadPayload(bid, 100); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("reading a payload never kept: %v, want fs.ErrNotExist", err)
	}
	if err := r.KeepPayload(ctx, &sync, bid, []byte("first reading")); err != nil {
		t.Fatal(err)
	}
	if err := r.KeepPayload(ctx, &sync, bid, []byte("second")); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadPayload(bid, 100)
	if err != nil || string(got) != "second" {
		t.Errorf("read %q, %v; want %q", got, err, "second")
	}
	if got, _ := r.ReadPayload(bid, 3); string(got) != "seco" {
		t.Errorf("a read bounded to 3 bytes gave %q, want the first 4 (one more, to tell a longer copy)", got)
	}
	entries, err := os.ReadDir(r.Batch(bid))
	if err != nil || len(entries) != 1 || entries[0].Name() != filepath.Base(r.Payload(bid)) {
		t.Errorf("the batch's directory holds %v (%v), want only the payload", entries, err)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if err := r.KeepPayload(ctx, &sync, bad, []byte("x")); err == nil {
			t.Errorf("KeepPayload(%q) = nil, want a refusal", bad)
		}
	}
	if err := r.RemoveBatch(bid); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, r.Payload(bid))
}

func TestWithinAcceptsOnlyPathsStrictlyInsideTheRoot(t *testing.T) {
	for _, tc := range []struct {
		path, rel string
	}{
		{"/work/bid1/jid1", "bid1/jid1"},
		{"/work/bid1/../bid2/jid1", "bid2/jid1"},
		{"/work", ""},
		{"/work/..", ""},
		{"/work/../elsewhere", ""},
		{"/workshop/bid1", ""},
		{"work/bid1", ""},
	} {
		rel, err := Within("/work", tc.path)
		if rel != tc.rel || (err == nil) != (tc.rel != "") {
			t.Errorf("Within(/work, %s) = %q, %v; want %q", tc.path, rel, err, tc.rel)
		}
	}
	if _, err := Within("work", "work/bid1"); err == nil {
		t.Error("a relative root was accepted")
	}
}
