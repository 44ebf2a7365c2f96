package main

import (
	"os"
	"path/filepath"
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
	servicetest.Start(t, servicetest.Build(t, "."), root, "INGESTQ_WORK_ROOT="+work)
	j := queuetest.WaitState(t, q, jids[0], queue.Processing)
	if got, err := os.ReadFile(filepath.Join(dirs[0], producerDir, "a.txt")); err != nil || string(got) != string(content) {
		t.Errorf("producer/a.txt: %q, %v", got, err)
	}
	if j.GetSpaceNeeded() != int64(len(content)) {
		t.Errorf("space_needed %d", j.GetSpaceNeeded())
	}
}
