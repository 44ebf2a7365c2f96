package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// peerBatch is a Processing batch a Merritt producer made with the peer
// library (createBatch, acquirePendingBatch), still locked by it.
func peerBatch(t *testing.T, peer *merrittzk.Peer) *merrittzk.Batch {
	t.Helper()
	if _, err := peer.CreateBatch(map[string]any{"batchID": t.Name(), "profile": "demo", "submitter": "peer"}); err != nil {
		t.Fatal(err)
	}
	b, err := peer.AcquirePendingBatch()
	if err != nil || b == nil {
		t.Fatalf("peer took %v, %v", b, err)
	}
	t.Cleanup(func() { b.Unlock() })
	return b
}

func TestJobsThePeerLibraryMadeInMerrittsWordsGetTheirFileLists(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	peer := merrittzk.Connect(t, zktest.Servers(t), root)
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	b := peerBatch(t, peer)
	url := d.putManifest(t, "peer.checkm", checkm.ProfileObject,
		checkm.Entry{FileURL: d.URL + "/sized/5", HashAlgorithm: "md5", HashValue: strings.Repeat("0", 32), FileSize: 5, FileName: "a.txt"})
	manifestJob, err := peer.CreateJob(b.ID, 5, merrittzk.JobConfiguration("demo", "peer", url, "manifest", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	containerJob, err := peer.CreateJob(b.ID, 5, merrittzk.JobConfiguration("demo", "peer", d.URL+"/sized/9", "container", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	queuetest.WaitState(t, q, manifestJob.ID, queue.Provisioning)
	m, err := jobs.NewReader(q).GetManifest(context.Background(), manifestJob.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.GetFiles()); got != fmt.Sprint([]*v1.ManifestFile{{Url: d.URL + "/sized/5", HashAlgorithm: "md5",
		HashValue: strings.Repeat("0", 32), Size: 5, Name: "a.txt"}}) {
		t.Errorf("a job of payload type \"manifest\" has the file list %s", got)
	}
	if job := queuetest.WaitState(t, q, containerJob.ID, queue.Provisioning); job.GetSpaceNeeded() != 9 {
		t.Errorf("container job space_needed %d", job.GetSpaceNeeded())
	}
}

func TestAJobWithATypeWordIngestqDoesNotKnowFailsAtOnceNamingItAndTheWordsAccepted(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	peer := merrittzk.Connect(t, zktest.Servers(t), root)
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	b := peerBatch(t, peer)
	j, err := peer.CreateJob(b.ID, 5, merrittzk.JobConfiguration("demo", "peer", d.URL+"/sized/3", "floppy", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	queuetest.Eventually(t, j.ID+" fails", func() bool {
		st := queuetest.Status(t, q, j.ID)
		msg = st.GetMessage()
		return st.GetStatus() == queue.Failed
	})
	for _, want := range []string{`"floppy"`, "file, container, object_manifest", "batchManifest"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q lacks %s", msg, want)
		}
	}
}

func TestAJobMerrittsIngestMadeWithoutAPayloadURLFailsSayingSo(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	peer := merrittzk.Connect(t, zktest.Servers(t), root)
	startEstimator(t, q, testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()}))
	b := peerBatch(t, peer)
	// As Merritt's ingest service configures the jobs it makes from a batch.
	conf := map[string]any{"submissionDate": "Sun Nov 22 03:51:07 UTC 2026", "batchID": "bid-merritt", "profile": "demo",
		"type": "file", "submitter": "peer", "jobID": "jid-merritt-uuid", "filename": "letter.pdf", "update": false}
	j, err := peer.CreateJob(b.ID, 5, conf, merrittzk.JobIdentifiers("", "loc-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	job := queuetest.WaitState(t, q, j.ID, queue.Failed)
	if msg := job.GetStatus().GetMessage(); !strings.Contains(msg, "payload_url") || !strings.Contains(msg, "Merritt") {
		t.Errorf("failure message %q does not say the job has no payload_url", msg)
	}
}
