package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/stage"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// cutWriter aborts its answer after left bytes of body, pausing between
// writes so that the transfer lasts a few seconds (the registry entry is
// written at most once a second).
type cutWriter struct {
	http.ResponseWriter
	left int64
}

func (c *cutWriter) Write(p []byte) (int, error) {
	time.Sleep(15 * time.Millisecond) // a slow server: its slowness is the point
	if int64(len(p)) >= c.left {
		c.ResponseWriter.Write(p[:c.left])
		c.ResponseWriter.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	c.left -= int64(len(p))
	return c.ResponseWriter.Write(p)
}

// TestAFileCutByItsServerArrivesResumedAndTheJobSaysHow: a server that
// closes every answer after 1 MiB and a bit; the job reaches Processing,
// its history names the resumes, and the replica's registry entry showed
// the bytes moving while it was in flight.
func TestAFileCutByItsServerArrivesResumedAndTheJobSaysHow(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 5<<16) // 5 MiB
	var sent atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"big-1"`)
		cw := &cutWriter{ResponseWriter: &countingWriter{ResponseWriter: w, n: &sent}, left: 1<<20 + 4321}
		http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(content))
	}))
	defer counted.Close()

	work := t.TempDir()
	q := queuetest.Connect(t, zktest.Root(t))
	jids, dirs := createJobs(t, q, work, job{files: []*v1.ManifestFile{declared(counted.URL+"/big.bin", "big.bin", content)}})
	dl := testDownloader(work, fetch.Policy{Allow: fetch.LoopbackRanges()})
	dl.Files.MaxBytes = 1 << 30
	dl.Files.SyncEvery = 1 << 20
	dl.Files.Retry.Attempts = 2 // without resuming, the file could not arrive
	cfg := dl.StageConfig()
	cfg.Service, cfg.ProgressInterval = "downloader", 20*time.Millisecond
	r, err := stage.New(jobs.New(q), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); <-r.Done() }()
	go r.Run(ctx)

	// The job's progress, as its registry entry says it, sampled until
	// the job is downloaded.
	var seen []*v1.Progress
	waittest.Until(t, time.Minute, func() error {
		ws, _ := admin.New(q).Queue.ListWorkers(ctx)
		for _, w := range ws {
			for _, f := range w.GetInFlight() {
				if p := f.GetProgress(); p != nil && f.GetJobId() == jids[0] {
					seen = append(seen, p)
				}
			}
		}
		j, err := jobs.NewReader(q).GetJob(ctx, jids[0])
		if err != nil {
			t.Fatal(err)
		}
		switch s := j.GetStatus().GetStatus(); s {
		case queue.Processing:
			return nil
		case queue.Failed:
			t.Fatalf("failed: %s", j.GetStatus().GetMessage())
		}
		return fmt.Errorf("job %s is %s", jids[0], queue.JobStateName(j.GetStatus().GetStatus()))
	})
	j, _ := jobs.NewReader(q).GetJob(ctx, jids[0])
	if msg := j.GetStatus().GetMessage(); !strings.Contains(msg, "big.bin resumed 4 times where a transfer stopped") {
		t.Errorf("message %q; want it to name the resumes", msg)
	}
	if got, _ := os.ReadFile(filepath.Join(dirs[0], producerDir, "big.bin")); !bytes.Equal(got, content) {
		t.Error("big.bin did not arrive whole")
	}
	if n := sent.Load(); n != int64(len(content)) {
		t.Errorf("the server sent %d bytes for a file of %d", n, len(content))
	}
	moving := false
	for _, p := range seen {
		if p.GetBytesExpected() != int64(len(content)) || p.GetPhase() != "downloading" {
			t.Fatalf("progress %v", p)
		}
		moving = moving || (p.GetBytesPerSecond() > 0 && p.GetBytesDone() > 0 && p.GetResumes() > 0)
	}
	if !moving {
		t.Errorf("the worker entry never showed the download moving and resumed: %v", seen)
	}
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }
