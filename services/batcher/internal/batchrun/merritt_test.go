package batchrun

import (
	"context"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
)

// Batches as Merritt's programs write them (package merrittzk):
// submissions of Merritt's ingest service, and batches and jobs made with
// the peer library's API.

// merrittIngestBatch writes a pending batch as Merritt's ingest service
// submits one: its own keys and package type word, and the payload kept
// in its queue folder under batchID, named by filename.
func (h *harness) merrittIngestBatch(peer *merrittzk.Peer, uuid, typ, filename string) string {
	h.t.Helper()
	b, err := peer.CreateBatch(map[string]any{"batchID": uuid, "profile": "demo", "type": typ, "size": "2048",
		"filename": filename, "update": false, "submitter": "jdoe/Jane Doe", "title": "Letters", "creator": "Hale, Margaret",
		"date": "1921", "responseForm": "json", "notificationFormat": "xml", "submissionDate": "Sun Nov 22 03:51:07 UTC 2026"})
	if err != nil {
		h.t.Fatal(err)
	}
	return b.ID
}

func TestABatchMerrittsIngestSubmittedIsTakenFromItsQueueFolder(t *testing.T) {
	h := newHarness(t)
	peer := merrittzk.Connect(t, h.servers, h.zkRoot)
	// Merritt's ingest service kept the uploaded batch manifest in its
	// queue folder, served here.
	h.dep.put("/ingest/queue/bid-7f3e-merritt/batch.checkm", manifestOfManifests)
	h.cfg.Planner.MerrittQueueURL = h.dep.url("/ingest/queue")
	h.start()
	bid := h.merrittIngestBatch(peer, "bid-7f3e-merritt", "batchManifest", "batch.checkm")
	b := h.waitBatch(bid, queue.BatchProcessing)
	if b.GetSubmission().GetProfileName() != "demo" || b.GetSubmission().GetBatchId() != "bid-7f3e-merritt" {
		t.Errorf("submission read as %v", b.GetSubmission())
	}
	jobs := h.jobs(bid)
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want one per row of the manifest (3)", len(jobs))
	}
	for _, j := range jobs {
		c := j.GetConfiguration()
		if c.GetPayloadType() != v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST || !strings.HasPrefix(c.GetPayloadUrl(), h.dep.url("/")) ||
			c.GetProfileName() != "demo" || c.GetSubmitter() != "jdoe/Jane Doe" || c.GetSubmissionMode() != v1.SubmissionMode_SUBMISSION_MODE_ADD ||
			c.GetResponseType() != "json" {
			t.Errorf("job %s: %v", j.GetId(), c)
		}
	}
	if got := jobs[1].GetIdentifiers(); got.GetPrimaryId() != "ark:/99999/fk4diary" {
		t.Errorf("row identifiers %v", got)
	}
}

func TestABatchMerrittsIngestSubmittedFailsAtOnceNamingItsFileWhenItsQueueFolderIsNotServed(t *testing.T) {
	h := newHarness(t)
	peer := merrittzk.Connect(t, h.servers, h.zkRoot)
	h.start()
	bid := h.merrittIngestBatch(peer, "bid-0a1b-merritt", "batchManifest", "batch.checkm")
	b := h.waitBatch(bid, queue.BatchFailed)
	msg := b.GetStatus().GetMessage()
	for _, want := range []string{`"batch.checkm"`, `"bid-0a1b-merritt"`, "INGESTQ_MERRITT_QUEUE_URL", "no job was created"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q lacks %s", msg, want)
		}
	}
	if n := len(h.jobs(bid)); n != 0 {
		t.Errorf("%d jobs created", n)
	}
}

func TestABatchWithATypeWordIngestqDoesNotKnowFailsAtOnceNamingItAndTheWordsAccepted(t *testing.T) {
	h := newHarness(t)
	peer := merrittzk.Connect(t, h.servers, h.zkRoot)
	h.cfg.Planner.MerrittQueueURL = h.dep.url("/ingest/queue")
	h.start()
	for _, typ := range []string{"floppy", "batchManifestFile"} {
		bid := h.merrittIngestBatch(peer, "bid-"+typ, typ, "disk.img")
		b := h.waitBatch(bid, queue.BatchFailed)
		msg := b.GetStatus().GetMessage()
		for _, want := range []string{`"` + typ + `"`, "object_manifest", "batchManifestContainer", "no job was created"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: failure message %q lacks %s", typ, msg, want)
			}
		}
	}
}

func TestABatchAndJobsMadeWithThePeerLibrarysAPIAreReportedWhenTheirJobsEnd(t *testing.T) {
	h := newHarness(t)
	peer := merrittzk.Connect(t, h.servers, h.zkRoot)
	h.start()
	ctx := context.Background()
	// A Merritt producer: createBatch, acquirePendingBatch, createJob with
	// createJobConfiguration, in Merritt's words; one job's word is unknown.
	created, err := peer.CreateBatch(map[string]any{"batchID": "lib-uuid-1", "profile": "demo", "type": "manifest", "submitter": "jdoe"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := peer.AcquirePendingBatch()
	if err != nil || b == nil || b.ID != created.ID {
		t.Fatalf("peer took %v, %v", b, err)
	}
	good, err := peer.CreateJob(b.ID, 5, merrittzk.JobConfiguration("demo", "jdoe", h.dep.url("/object.checkm"), "manifest", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	odd, err := peer.CreateJob(b.ID, 5, merrittzk.JobConfiguration("demo", "jdoe", h.dep.url("/disk.img"), "floppy", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}

	h.finish(good.ID, "ark:/99999/fk4lib", "")
	// The first stage to take the other job fails it, as the stage runner
	// fails a job whose nodes it cannot read.
	cl, err := jobs.New(h.q).ClaimJob(ctx, odd.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cl.LoadErr == nil || !strings.Contains(cl.LoadErr.Error(), `"floppy"`) {
		t.Fatalf("LoadErr %v, want one naming the word", cl.LoadErr)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: "job data unreadable: " + cl.LoadErr.Error()}); err != nil {
		t.Fatal(err)
	}

	rep := h.waitBatch(b.ID, queue.BatchFailed)
	if r := rep.GetStatusReport(); len(r.GetSuccessfulJobs()) != 1 || r.GetSuccessfulJobs()[0] != good.ID ||
		len(r.GetFailedJobs()) != 1 || r.GetFailedJobs()[0] != odd.ID {
		t.Errorf("status-report %v", r)
	}
	text := body(t, reportMail(t, h, b.ID+"-report"))
	for _, want := range []string{odd.ID, `"floppy"`, good.ID + "  ark:/99999/fk4lib"} {
		if !strings.Contains(text, want) {
			t.Errorf("report mail lacks %q:\n%s", want, text)
		}
	}
	// The peer library finds the batch by the submitter's uuid still.
	if bid, err := peer.FindBatchByUUID("lib-uuid-1"); err != nil || bid != b.ID {
		t.Errorf("batch by uuid: %q, %v", bid, err)
	}
}
