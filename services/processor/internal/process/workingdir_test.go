package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheWorkingFolderIsCheckedOnDisk: the processor takes a job's working
// folder only when it lies inside the work root once links are resolved
// (workdir.Folder), so a link cannot lead it to store files from elsewhere.
func TestTheWorkingFolderIsCheckedOnDisk(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "work")
	outside := filepath.Join(base, "outside")
	job := filepath.Join(root, "bid0000000001", "jid0000000001")
	linked := filepath.Join(root, "bid0000000001", "jid0000000002")
	for _, dir := range []string{outside, job} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, linked); err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(job)
	if err != nil {
		t.Fatal(err)
	}
	p := &Processor{WorkRoot: root}
	if got, err := p.workingDir(job); err != nil || got != want {
		t.Errorf("workingDir(job) = %q, %v; want %q", got, err, want)
	}
	for dir, msg := range map[string]string{
		"":      "no working_dir",
		linked:  "symbolic link",
		outside: "not inside the work root",
	} {
		if got, err := p.workingDir(dir); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("workingDir(%q) = %q, %v; want an error saying %q", dir, got, err, msg)
		}
	}
}
