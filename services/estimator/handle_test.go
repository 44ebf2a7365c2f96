package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
)

// What Estimate decides from the job's file list and the files' servers,
// and from a file list it cannot read, without ZooKeeper: the job is
// held in memory.
func TestEstimateDecidesFromTheFilesAndFromAnUnreadableFileList(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sized" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", "100")
	}))
	t.Cleanup(srv.Close)
	e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()})
	ctx := context.Background()
	job := func() *v1.Job {
		return &v1.Job{Id: "jid0000000001", Priority: 5,
			Manifest: &v1.Manifest{Files: []*v1.ManifestFile{file(srv.URL+"/sized", -1), file(srv.URL+"/gone", -1)}}}
	}

	out := e.Estimate(ctx, stagetest.New(job(), queue.Estimating))
	if want := "next: estimated 100 bytes for 2 files; priority 5 → 15 (1 of 2 files without a usable size)"; out.String() != want {
		t.Errorf("outcome %q, want %q", out, want)
	}
	if ch := out.Change(); ch.SpaceNeeded == nil || *ch.SpaceNeeded != 100 || ch.Priority == nil || *ch.Priority != 15 || ch.Manifest != nil {
		t.Errorf("change %+v, want space_needed 100, priority 15 and the file list left as it is", ch)
	}

	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("manifest: %w", queue.ErrCorrupt), "to Failed: file list of the job unreadable: manifest: " + queue.ErrCorrupt.Error()},
		// Not known to be broken (the session went, say): another try.
		{errors.New("connection lost"), "release"},
	} {
		claim := stagetest.New(job(), queue.Estimating)
		claim.Err = tt.err
		if got := e.Estimate(ctx, claim).String(); got != tt.want {
			t.Errorf("file list read failing with %v: outcome %q, want %q", tt.err, got, tt.want)
		}
	}
}

// A redirect the client does not follow (one too many: here it follows
// none) was an answer: its host is not given up on for it.
func TestAHostWhoseRedirectsAreNotFollowedIsStillAsked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sized" {
			w.Header().Set("Content-Length", "100")
			return
		}
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges(), MaxRedirects: -1})
	e.Concurrency = 1 // the loops first, then the sized file
	var files []*v1.ManifestFile
	for i := range e.HostFailures + 1 {
		files = append(files, file(fmt.Sprintf("%s/loop%d", srv.URL, i), 5))
	}
	files = append(files, file(srv.URL+"/sized", -1))
	job := &v1.Job{Id: "jid0000000001", Manifest: &v1.Manifest{Files: files}}

	out := e.Estimate(t.Context(), stagetest.New(job, queue.Estimating))
	if want := "next: estimated 120 bytes for 5 files"; out.String() != want {
		t.Errorf("outcome %q, want %q: the loops' declared sizes and the sized file's HEAD", out, want)
	}
}
