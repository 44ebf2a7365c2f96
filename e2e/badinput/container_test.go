package badinput

import (
	"archive/tar"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/testenv"
)

// TestHostileContainersFailTheirJobNamingTheEntry submits containers that
// try to write outside the job's folder, to link out of it or to expand
// beyond the limits: the downloader refuses each, the job's message names
// the container, its URL, the entry and the reason, and nothing of the
// archive lands in producer/ or anywhere else.
func TestHostileContainersFailTheirJobNamingTheEntry(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file string
		archive    []byte
		want       []string
		// outside, when set, is a path (relative to the job's producer/)
		// the archive aims at: it must not exist afterwards.
		outside string
	}{
		{"zip slip", "slip.zip", zipArchive(zipFile{name: "../../../../escaped.txt", body: []byte("owned")}),
			[]string{`entry "../../../../escaped.txt": path would leave the directory: ".." segment`}, "../../../../escaped.txt"},
		{"zip entry with an absolute path", "absolute.zip", zipArchive(zipFile{name: "/badinput-absolute.txt", body: []byte("owned")}),
			[]string{`entry "/badinput-absolute.txt": path would leave the directory: absolute path`}, ""},
		{"zip symbolic link", "symlink.zip", zipArchive(zipFile{name: "passwd", body: []byte("/etc/passwd"), mode: fs.ModeSymlink | 0o777}),
			[]string{`entry "passwd": links are not unpacked`}, ""},
		{"zip bomb whose header lies about the size", "liar.zip", zipLyingAboutSize("zeros.bin", 100, 32<<20),
			[]string{`entry "zeros.bin": content does not match its header (declared 100 bytes)`}, ""},
		{"zip bomb over the expansion limit", "bomb.zip", zipOfZeros("zeros.bin", 2*unpackMaxBytes),
			[]string{fmt.Sprintf(`entry "zeros.bin": expands to more than the limit: more than %d bytes in all`, unpackMaxBytes)}, ""},
		{"zip with too many entries", "many.zip", zipOfManyFiles(unpackMaxFiles + 1),
			[]string{fmt.Sprintf("too many entries: %d, at most %d", unpackMaxFiles+1, unpackMaxFiles)}, ""},
		{"zip naming one file twice", "twice.zip", zipArchive(zipFile{name: "a.txt", body: []byte("1")}, zipFile{name: "./a.txt", body: []byte("2")}),
			[]string{`entry "./a.txt": appears twice`}, ""},
		{"tar symbolic link out", "symlink.tar", tarArchive(tarEntry{name: "passwd", kind: tar.TypeSymlink, link: "../../../../../../etc/passwd"}),
			[]string{`entry "passwd": links are not unpacked`}, ""},
		{"tar hard link out", "hardlink.tar", tarArchive(tarEntry{name: "ok.txt", body: "fine"}, tarEntry{name: "shadow", kind: tar.TypeLink, link: "/etc/shadow"}),
			[]string{`entry "shadow": links are not unpacked`}, ""},
		{"tar device node", "device.tar", tarArchive(tarEntry{name: "null", kind: tar.TypeChar, link: ""}),
			[]string{`entry "null": only files and folders are unpacked`}, ""},
		{"tar.gz slip", "slip.tar.gz", gzipped(tarArchive(tarEntry{name: "../evil.sh", body: "rm -rf /"})),
			[]string{`entry "../evil.sh": path would leave the directory: ".." segment`}, "../evil.sh"},
		{"not an archive", "notes.zip", []byte("just some text, not an archive\n"),
			[]string{"unpacking: not a zip, tar or tar.gz archive"}, ""},
		{"tar entry named with the manifest's spelling of '|'", "escape.tar", tarArchive(tarEntry{name: "scans/ok.txt", body: "fine"}, tarEntry{name: "scans/a%7cb.txt", body: "x"}),
			[]string{`entry "scans/a%7cb.txt": name cannot be listed in a manifest: contains "%7c", which a manifest reads as '|'`}, ""},
		{"zip entry named with a TAB", "tab.zip", zipArchive(zipFile{name: "scans/a\tb.txt", body: []byte("x")}),
			[]string{`entry "scans/a\tb.txt": name cannot be listed in a manifest: contains a control character`}, ""},
		{"zip entry named with an escape sequence", "esc.zip", zipArchive(zipFile{name: "\x1b[2Jclear.txt", body: []byte("x")}),
			[]string{`entry "\x1b[2Jclear.txt": name cannot be listed in a manifest: contains a control character`}, ""},
		{"tar.gz entry named with a trailing space", "space.tar.gz", gzipped(tarArchive(tarEntry{name: "scans/page.txt ", body: "x"})),
			[]string{`entry "scans/page.txt ": name cannot be listed in a manifest: has leading or trailing spaces`}, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := fmt.Sprintf("/containers-%d/%s", i, tc.file)
			shared.deposits.Set(path, tc.archive)
			url := shared.deposits.URL + path
			bid := shared.main.submit(t, url, v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
			shared.main.checkFailed(t, bid, outcome{failed: 1, job: append([]string{tc.file + " (" + url + "): unpacking: "}, tc.want...)})
			// Refused while unpacking, before Processing: no ARK was minted
			// for it, and the message says what it says once.
			for _, j := range shared.main.jobs(t, bid) {
				if got := j.GetStatus().GetLastSuccessfulStatus(); got != queue.Provisioning {
					t.Errorf("job %s failed after %s, want it refused in Downloading", j.GetId(), queue.JobStateName(got))
				}
				if ark := j.GetIdentifiers().GetPrimaryId(); ark != "" {
					t.Errorf("job %s has an ARK (%s) for a refused container", j.GetId(), ark)
				}
				for _, w := range tc.want {
					if n := strings.Count(j.GetStatus().GetMessage(), w); n != 1 {
						t.Errorf("job %s message says %q %d times: %q", j.GetId(), w, n, j.GetStatus().GetMessage())
					}
				}
			}
			if tc.outside != "" {
				for _, j := range shared.main.jobs(t, bid) {
					target := filepath.Join(j.GetConfiguration().GetWorkingDir(), "producer", filepath.FromSlash(tc.outside))
					if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("the archive wrote outside the job's folder: %s (%v)", target, err)
					}
				}
			}
			shared.main.deleteBatch(t, bid)
		})
	}
}

// TestHostileContainerOfAManifestOfContainersFailsOnlyItsJob: one bad
// container among good ones fails its own job; the others complete.
func TestHostileContainerOfAManifestOfContainersFailsOnlyItsJob(t *testing.T) {
	t.Parallel()
	good := serve("/moc/good.zip", string(zipArchive(zipFile{name: "scans/page-1.txt", body: []byte("page one\n")})))
	bad := serve("/moc/slip.zip", string(zipArchive(zipFile{name: "../../outside.txt", body: []byte("owned")})))
	url := serve("/moc/batch.checkm", checkm.Header+"\n#%profile | "+checkm.ProfileContainerBatch+"\n"+
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:creator | mrt:title | mrt:date\n"+
		good+" | | | | | good.zip | Hale | Scans | 1960\n"+
		bad+" | | | | | slip.zip | Hale | Slip | 1960\n")
	bid := shared.main.submit(t, url, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS)
	shared.main.expectFailure(t, bid, outcome{failed: 1, completed: 1, job: []string{"slip.zip (" + bad + ")", `entry "../../outside.txt": path would leave the directory`}})
}

// TestAGitArchiveTarballIsIngested: what `git archive` makes (a tar whose
// first entry is a pax global header holding the commit id) is a container
// like any other; the header is metadata, not a file, and the tree is
// stored.
func TestAGitArchiveTarballIsIngested(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed (make deps installs it)")
	}
	repo := t.TempDir()
	for name, body := range map[string]string{"README.md": "readme\n", "scans/page-1.txt": "page one\n"} {
		p := filepath.Join(repo, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) []byte {
		cmd := exec.Command("git", append([]string{"-c", "user.name=Depositor", "-c", "user.email=depositor@example.org",
			"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = repo
		cmd.Env = testenv.GitEnv(repo)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return out
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "deposit")
	url := serve("/git/project.tar.gz", string(git("archive", "--format=tar.gz", "--prefix=project/", "HEAD")))
	bid := shared.main.submit(t, url, v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
	if b := shared.main.waitBatch(t, bid, queue.BatchCompleted, queue.BatchFailed); b.GetStatus().GetStatus() != queue.BatchCompleted {
		for _, j := range shared.main.jobs(t, bid) {
			t.Logf("job %s: %s", j.GetId(), j.GetStatus().GetMessage())
		}
		t.Fatalf("batch %s: %s", bid, b.GetStatus().GetMessage())
	}
	for _, j := range shared.main.jobs(t, bid) {
		shared.main.checkStored(t, j)
		path, err := checkm.FilePath(j.GetInventory().GetManifestUrl())
		if err != nil {
			t.Fatal(err)
		}
		manifest, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"producer/project/README.md", "producer/project/scans/page-1.txt"} {
			if !strings.Contains(string(manifest), want) {
				t.Errorf("the stored version lacks %s:\n%s", want, manifest)
			}
		}
		if strings.Contains(string(manifest), "pax_global_header") {
			t.Errorf("the pax header was stored as a file:\n%s", manifest)
		}
	}
}
