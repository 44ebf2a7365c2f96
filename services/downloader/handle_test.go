package main

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
	"github.com/ingestq/ingestq/shared/workdir"
)

// The handler's decisions, tried on jobs held in memory (stagetest): how
// the queue reads and commits a job is not what these tests are about.

var handled atomic.Int64

// handle runs the downloader's handler once on j, held in memory in
// Downloading, and returns its outcome and the job's working directory.
func handle(t *testing.T, d *Downloader, j job) (stage.Outcome, string) {
	t.Helper()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	n := handled.Add(1)
	payload := j.payload
	if payload == 0 {
		payload = v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST
	}
	wd := j.workingDir
	if wd == "" {
		wd = filepath.Join(d.WorkRoot.Dir(), "bid0000000001", fmt.Sprintf("jid%010d", n))
	}
	job := &v1.Job{Id: fmt.Sprintf("jid%010d", n), Bid: "bid0000000001", Priority: 5, Manifest: &v1.Manifest{Files: j.files},
		Configuration: &v1.JobConfiguration{PayloadUrl: "http://example.org/object", PayloadType: payload, WorkingDir: wd}}
	return d.Handle(context.Background(), stagetest.New(job, queue.Downloading)), wd
}

func TestFailuresFailTheJobNamingTheFileTheURLAndTheReason(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	content := []byte("the real content")
	d.put("a.txt", content)
	wrong := strings.Repeat("1f", 32)
	dl := testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()})
	for _, tc := range []struct {
		name string
		job  job
		want string
	}{
		{"digest mismatch", job{files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "a.txt", HashAlgorithm: "sha256", HashValue: wrong, Size: -1}}},
			"a.txt (" + d.URL + "/files/a.txt): sha256 expected " + wrong + ", got " + sha256Hex(content)},
		{"size mismatch", job{files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "a.txt", Size: 3}}},
			"a.txt (" + d.URL + "/files/a.txt): size expected 3 bytes, got 16"},
		{"missing file", job{files: []*v1.ManifestFile{declared(d.URL+"/files/a.txt", "a.txt", content), {Url: d.URL + "/missing/a.txt", Name: "b.txt", Size: -1}}},
			"b.txt (" + d.URL + "/missing/a.txt): GET " + d.URL + "/missing/a.txt: HTTP 404 Not Found"},
		{"traversal name", job{files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "../../evil.txt", Size: -1}}},
			"../../evil.txt (" + d.URL + "/files/a.txt): refused, the file would not land inside producer/: file name \"../../evil.txt\" has a \"..\" segment"},
		{"absolute name", job{files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "/etc/evil.txt", Size: -1}}},
			"/etc/evil.txt (" + d.URL + "/files/a.txt): refused, the file would not land inside producer/: file name \"/etc/evil.txt\" is an absolute path"},
		{"name listed twice", job{files: []*v1.ManifestFile{declared(d.URL+"/files/a.txt", "a.txt", content), declared(d.URL+"/files/a.txt", "a.txt", content)}},
			"a.txt (" + d.URL + "/files/a.txt): file name listed twice (files 1 and 2)"},
		{"working directory outside the work root", job{workingDir: filepath.Join(filepath.Dir(work), "elsewhere"), files: []*v1.ManifestFile{declared(d.URL+"/files/a.txt", "a.txt", content)}},
			"working_dir " + filepath.Join(filepath.Dir(work), "elsewhere") + " is not inside the work root " + work},
		{"a scheme other than http", job{files: []*v1.ManifestFile{{Url: "file:///etc/passwd", Name: "passwd", Size: -1}}},
			"passwd (file:///etc/passwd): fetch: file:///etc/passwd: scheme not allowed: \"file\" (allowed: http, https)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, wd := handle(t, dl, tc.job)
			if got := out.String(); !strings.HasPrefix(got, "to Failed: "+tc.want) {
				t.Errorf("outcome\n %q\nwant\n %q", got, "to Failed: "+tc.want)
			}
			for _, p := range []string{filepath.Join(filepath.Dir(wd), "evil.txt"), filepath.Join(wd, "evil.txt")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
}

func TestADeniedAddressFailsTheJobNamingTheURL(t *testing.T) {
	d := newDepositor(t)
	d.put("a.txt", []byte("x"))
	deny, err := fetch.ParseDeny("loopback")
	if err != nil {
		t.Fatal(err)
	}
	// Denied, loopback is refused though it is allowed: the deny list wins.
	dl := testDownloader(t.TempDir(), fetch.Policy{Deny: deny, Allow: fetch.LoopbackRanges()})
	out, _ := handle(t, dl, job{files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "a.txt", Size: -1}}})
	if msg := out.String(); !strings.HasPrefix(msg, "to Failed: a.txt ("+d.URL+"/files/a.txt): ") || !strings.Contains(msg, "address denied by policy: 127.0.0.1 is in 127.0.0.0/8") {
		t.Errorf("outcome %q", msg)
	}
	if n := d.requests("/files/a.txt"); n != 0 {
		t.Errorf("the denied server got %d requests", n)
	}
}

// TestAJobWhoseFileListCannotBeReadIsFailedOrReleased: a file list that
// cannot be decoded, or that lists nothing, fails the job, saying so; any
// other failure to read it (the session lost, say) gives the job back for
// another try. Nothing is fetched either way.
func TestAJobWhoseFileListCannotBeReadIsFailedOrReleased(t *testing.T) {
	d := newDepositor(t)
	d.put("a.txt", []byte("x"))
	dl := testDownloader(t.TempDir(), fetch.Policy{Allow: fetch.LoopbackRanges()})
	corrupt := fmt.Errorf("jobs/jid0000000001/manifest: %w", queue.ErrCorrupt)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{corrupt, "to Failed: file list of the job unreadable: " + corrupt.Error()},
		{errors.New("zk: connection closed"), "release"},
	} {
		job := &v1.Job{Id: "jid0000000001", Bid: "bid0000000001",
			Manifest: &v1.Manifest{Files: []*v1.ManifestFile{{Url: d.URL + "/files/a.txt", Name: "a.txt", Size: -1}}}}
		claim := stagetest.New(job, queue.Downloading)
		claim.Err = tt.err
		if out := dl.Handle(context.Background(), claim); out.String() != tt.want {
			t.Errorf("reading the file list failing with %v: outcome %q, want %q", tt.err, out, tt.want)
		}
	}
	if out, _ := handle(t, dl, job{}); out.String() != "to Failed: the job has no file list to download" {
		t.Errorf("a job without files: outcome %q", out)
	}
	if n := d.requests("/files/a.txt"); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
}

// TestAContainerBooksWhatItUnpacksToAndOneThatCanNeverFitFails: before a
// container's files are written, the job's space_needed becomes its
// archive's size and what its headers declare (the provisioner books that
// for a job in Downloading); a container whose headers declare more than the
// working storage holds fails, saying how much it needs and how much the
// storage has, with nothing written.
func TestAContainerBooksWhatItUnpacksToAndOneThatCanNeverFitFails(t *testing.T) {
	d := newDepositor(t)
	work := t.TempDir()
	dl := testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()})
	files := map[string]string{"a.txt": "alpha", "sub/b.txt": "beta beta"}
	small := zipBytes(t, files)
	d.put("small.zip", small)
	job := &v1.Job{Id: "jid0000000001", Bid: "bid0000000001", SpaceNeeded: int64(len(small)),
		Manifest:      &v1.Manifest{Files: []*v1.ManifestFile{declared(d.URL+"/files/small.zip", "small.zip", small)}},
		Configuration: &v1.JobConfiguration{PayloadType: v1.PayloadType_PAYLOAD_TYPE_CONTAINER, WorkingDir: filepath.Join(work, "bid0000000001", "jid0000000001")}}
	claim := stagetest.New(job, queue.Downloading)
	out := dl.Handle(context.Background(), claim)
	if !strings.HasPrefix(out.String(), "next: unpacked zip container small.zip: 2 files") {
		t.Fatalf("outcome %q", out)
	}
	ups := claim.Updates()
	if len(ups) != 1 || ups[0].SpaceNeeded == nil || *ups[0].SpaceNeeded != int64(len(small))+14 {
		t.Errorf("updates before unpacking %+v; want space_needed %d, the archive and its 14 bytes", ups, int64(len(small))+14)
	}

	// A header may declare what it likes: the declaration is what is
	// booked, and one past the storage's size is refused before writing.
	u, err := workdir.DiskUsage(work)
	if err != nil {
		t.Fatal(err)
	}
	huge := zipDeclaring(t, "huge.bin", u.Total+1)
	d.put("huge.zip", huge)
	dl.Unpack.MaxBytes = 1 << 62
	job = &v1.Job{Id: "jid0000000002", Bid: "bid0000000001",
		Manifest:      &v1.Manifest{Files: []*v1.ManifestFile{declared(d.URL+"/files/huge.zip", "huge.zip", huge)}},
		Configuration: &v1.JobConfiguration{PayloadType: v1.PayloadType_PAYLOAD_TYPE_CONTAINER, WorkingDir: filepath.Join(work, "bid0000000001", "jid0000000002")}}
	out = dl.Handle(context.Background(), stagetest.New(job, queue.Downloading))
	want := fmt.Sprintf("the zip container unpacks to %s in 1 files; with its archive of %s it needs %s, more than the working storage holds (%s)",
		workdir.FormatBytes(int64(u.Total+1)), workdir.FormatBytes(int64(len(huge))), workdir.FormatBytes(int64(u.Total+1)+int64(len(huge))), workdir.FormatBytes(int64(u.Total)))
	if !strings.HasPrefix(out.String(), "to Failed: huge.zip (") || !strings.Contains(out.String(), want) {
		t.Errorf("outcome\n %q\nwant it to say\n %q", out, want)
	}
	if got := producer(t, job.GetConfiguration().GetWorkingDir()); len(got) != 0 {
		t.Errorf("producer/ holds %v", got)
	}
}

// zipDeclaring is a zip of one stored entry whose header declares size
// bytes, far more than it holds.
func zipDeclaring(t *testing.T, name string, size uint64) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: name, Method: zip.Store, CompressedSize64: 5, UncompressedSize64: size, CRC32: 0})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("short"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
