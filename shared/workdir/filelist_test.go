package workdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
)

func files(n int) *v1.Manifest {
	m := &v1.Manifest{}
	for i := range n {
		m.Files = append(m.Files, &v1.ManifestFile{Url: fmt.Sprintf("http://127.0.0.1:1/f/%d", i), Size: int64(i),
			HashAlgorithm: "sha256", HashValue: strings.Repeat("a", 64), Name: fmt.Sprintf("d/f%05d", i)})
	}
	return m
}

// TestAKeptFileListReadsBackAsWrittenAndNothingElseDoes: the list kept in a
// job's working folder reads back file for file through the reference the
// manifest node holds; a list the reference does not name (another list,
// one cut short, none) is corrupt, and a folder outside the root, or reached
// through a link, is refused.
func TestAKeptFileListReadsBackAsWrittenAndNothingElseDoes(t *testing.T) {
	r, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wd := r.Job("bid1", "jid1")
	want := files(2000)
	ref, err := r.KeepFileList(wd, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.GetFiles()) != 0 || ref.GetKept().GetFiles() != 2000 || ref.GetKept().GetName() != FileListName {
		t.Fatalf("reference %v", ref)
	}
	got, err := r.FileList(wd, ref)
	if err != nil {
		t.Fatal(err)
	}
	if string(queue.EncodeManifest(got)) != string(queue.EncodeManifest(want)) {
		t.Error("the list read back is not the list kept")
	}
	if m, err := r.FileList(wd, want); err != nil || m != want {
		t.Errorf("a list held in the node itself: %v, %v; want it as it is", m, err)
	}
	left, _ := filepath.Glob(filepath.Join(wd, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	if _, err := r.KeepFileList(wd, files(1999)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.FileList(wd, ref); !errors.Is(err, queue.ErrCorrupt) || !strings.Contains(err.Error(), "not the one the job's manifest names") {
		t.Errorf("another list under the name: %v; want it corrupt", err)
	}
	if err := os.Remove(filepath.Join(wd, FileListName)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.FileList(wd, ref); !errors.Is(err, queue.ErrCorrupt) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("a list removed: %v; want it corrupt, saying it is gone", err)
	}
	if _, err := r.FileList(r.Job("bid1", "jid2"), ref); !errors.Is(err, queue.ErrCorrupt) {
		t.Errorf("a working folder removed: %v; want it corrupt", err)
	}
	other := &v1.Manifest{Kept: &v1.KeptFileList{Name: "../payload", Files: 1}}
	if _, err := r.FileList(wd, other); !errors.Is(err, queue.ErrCorrupt) {
		t.Errorf("a reference to another file: %v; want it corrupt", err)
	}

	outside := t.TempDir()
	if _, err := r.KeepFileList(outside, want); err == nil || !strings.Contains(err.Error(), "not inside the work root") {
		t.Errorf("a working folder outside the root: %v; want it refused", err)
	}
	if err := os.MkdirAll(r.Batch("bid2"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, r.Job("bid2", "jid1")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.KeepFileList(r.Job("bid2", "jid1"), want); err == nil {
		t.Error("a working folder that is a link out of the root was written to")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("written outside the root: %v", entries)
	}
}
