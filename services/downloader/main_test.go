package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "downloader")
}

func TestBinaryDownloadsAJobAndMovesItToProcessing(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	work := t.TempDir()
	q := queuetest.Connect(t, root)
	content := []byte("a file the binary fetches")
	d.put("a.txt", content)
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{declared(d.URL+"/files/a.txt", "a.txt", content)}})
	servicetest.Start(t, servicetest.Build(t, "."), root, "INGESTQ_WORK_ROOT="+work, "INGESTQ_FETCH_ALLOW=loopback")
	j := queuetest.WaitState(t, q, jids[0], queue.Processing)
	if got, err := os.ReadFile(filepath.Join(dirs[0], producerDir, "a.txt")); err != nil || string(got) != string(content) {
		t.Errorf("producer/a.txt: %q, %v", got, err)
	}
	if j.GetSpaceNeeded() != int64(len(content)) {
		t.Errorf("space_needed %d", j.GetSpaceNeeded())
	}
}

func TestBinaryRefusesInternalAddressesUnlessAllowed(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	work := t.TempDir()
	q := queuetest.Connect(t, root)
	d.put("a.txt", []byte("x"))
	_, port, _ := net.SplitHostPort(d.Listener.Addr().String())
	refused := []struct{ url, why string }{
		{d.URL + "/files/a.txt", "127.0.0.1 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)"},
		{"http://localhost:" + port + "/files/a.txt", "an internal range denied unless allowed (INGESTQ_FETCH_ALLOW="},
		{"http://10.1.2.3/a.txt", "10.1.2.3 is in 10.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=10.0.0.0/8 allows it)"},
		{"http://172.16.0.1/a.txt", "(INGESTQ_FETCH_ALLOW=172.16.0.0/12 allows it)"},
		{"http://192.168.1.1/a.txt", "(INGESTQ_FETCH_ALLOW=192.168.0.0/16 allows it)"},
		{"http://100.64.0.1/a.txt", "(INGESTQ_FETCH_ALLOW=100.64.0.0/10 allows it)"},
		{"http://[fd00::1]/a.txt", "(INGESTQ_FETCH_ALLOW=fc00::/7 allows it)"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is in 169.254.0.0/16"},
		{"http://[fe80::1]/a.txt", "fe80::1 is in fe80::/10"},
	}
	var jobs []job
	for _, r := range refused {
		jobs = append(jobs, job{files: []*v1.ManifestFile{{Url: r.url, Name: "a.txt", Size: -1}}})
	}
	jids, _ := createJobs(t, q, work, jobs...)
	servicetest.Start(t, servicetest.Build(t, "."), root, "INGESTQ_WORK_ROOT="+work)
	for i, r := range refused {
		msg := queuetest.WaitState(t, q, jids[i], queue.Failed).GetStatus().GetMessage()
		if !strings.HasPrefix(msg, "a.txt ("+r.url+"): ") || !strings.Contains(msg, "address denied by policy: ") || !strings.Contains(msg, r.why) {
			t.Errorf("%s: message %q, want it denied: %q", r.url, msg, r.why)
		}
	}
	if n := d.requests("/files/a.txt"); n != 0 {
		t.Errorf("the depositor on loopback got %d requests under the default settings", n)
	}
}
