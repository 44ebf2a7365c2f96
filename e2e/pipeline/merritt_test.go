package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/session"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// merrittQueueFolder is where the depositor's server plays Merritt's ingest
// service's queue folder (INGESTQ_MERRITT_QUEUE_URL).
const merrittQueueFolder = "merritt-queue"

// peerLibraryBatch makes a batch and its jobs as a Merritt program does
// with the peer library's API: createBatch, acquirePendingBatch, createJob
// with createJobConfiguration (no working_dir), then the batch unlocked.
func peerLibraryBatch(t *testing.T, peer *merrittzk.Peer, uuid string, jobs ...map[string]any) (string, []string) {
	t.Helper()
	created, err := peer.CreateBatch(map[string]any{"batchID": uuid, "profile": "demo", "submitter": "e2e-peer"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := peer.AcquirePendingBatch()
	if err != nil || b == nil || b.ID != created.ID {
		t.Fatalf("the peer took batch %v (%v), not its own %s", b, err, created.ID)
	}
	var jids []string
	for i, conf := range jobs {
		var ids map[string]any
		if i == 0 {
			ids = merrittzk.JobIdentifiers("", "loc-e2e-"+uuid)
		}
		j, err := peer.CreateJob(b.ID, 5, conf, ids, merrittzk.JobMetadata("E2E", "made by "+uuid, "2026", ""))
		if err != nil {
			t.Fatal(err)
		}
		jids = append(jids, j.ID)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	return b.ID, jids
}

// TestBatchesAndJobsMerrittsProgramsMakeCompleteOrFailClearly carries work
// made in each of Merritt's forms through the seven services: a batch and
// jobs made with the peer library's API (a file, a container and an object
// manifest, in Merritt's type words), a batch manifest submitted through
// Merritt's ingest service (its payload in that service's queue folder),
// and jobs ingestq cannot use (a type word it does not know, a job as
// Merritt's ingest service configures its own), which fail at once with a
// message and are reported. Not parallel: the producer holds the ingest
// queue while it makes its batches (ingestq's batcher takes every pending
// batch), which would hold up the other tests.
func TestBatchesAndJobsMerrittsProgramsMakeCompleteOrFailClearly(t *testing.T) {
	ctx := context.Background()
	peer := merrittzk.Connect(t, shared.stack.Servers, shared.stack.Root)
	q, err := session.Connect(ctx, session.Options{Servers: shared.stack.Servers, Root: shared.stack.Root})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	dep := shared.deposits.URL

	// Merritt's ingest service kept the uploaded batch manifest in its
	// queue folder, under the batch's batchID.
	const ingestUUID = "e2e-merritt-ingest-batch"
	folder := filepath.Join(shared.depDir, merrittQueueFolder, ingestUUID)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	batchManifest := "#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:primaryIdentifier | mrt:localIdentifier | mrt:creator | mrt:title | mrt:date\n" +
		"{{base}}/letters-1921.checkm | | | | | letters-1921.checkm | | loc-e2e-merritt-letters | Hale, Margaret | Letters | 1921\n" +
		"{{base}}/map-1880.checkm | | | | | map-1880.checkm | | loc-e2e-merritt-map | County Survey Office | Map | 1880\n#%eof\n"
	if err := os.WriteFile(filepath.Join(folder, "batch.checkm"), []byte(batchManifest), 0o644); err != nil {
		t.Fatal(err)
	}

	if ok, err := peer.Locks().IngestQueue(); !ok || err != nil {
		t.Fatalf("holding the ingest queue: %v, %v", ok, err)
	}
	libBid, libJobs := peerLibraryBatch(t, peer, "e2e-peer-library-batch",
		merrittzk.JobConfiguration("demo", "e2e-peer", dep+"/objects/map-1880/notes.txt", "file", "json"),
		merrittzk.JobConfiguration("demo", "e2e-peer", dep+"/scans-1960.zip", "container", "json"),
		merrittzk.JobConfiguration("demo", "e2e-peer", dep+"/report-1955.checkm", "manifest", "json"))
	oddBid, oddJobs := peerLibraryBatch(t, peer, "e2e-peer-odd-batch",
		merrittzk.JobConfiguration("demo", "e2e-peer", dep+"/objects/map-1880/notes.txt", "floppy", "json"),
		// As Merritt's ingest service configures the jobs it makes itself.
		map[string]any{"batchID": "e2e-peer-odd-batch", "profile": "demo", "type": "file", "jobID": "jid-merritt-own",
			"filename": "notes.txt", "update": false, "submitter": "e2e-peer"})
	ingest, err := peer.CreateBatch(map[string]any{"batchID": ingestUUID, "profile": "demo", "type": "batchManifest",
		"filename": "batch.checkm", "size": "512", "update": false, "submitter": "e2e/Merritt depositor",
		"notificationFormat": "xml", "submissionDate": time.Now().UTC().Format(time.UnixDate)})
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.Locks().UnlockIngestQueue(); err != nil {
		t.Fatal(err)
	}

	t.Run("a batch and jobs made with the peer library's API complete", func(t *testing.T) {
		b := waitBatch(t, libBid, queue.BatchCompleted, queue.BatchFailed)
		if b.GetStatus().GetStatus() != queue.BatchCompleted {
			t.Fatalf("batch %s ended %s: %q", libBid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
		}
		for _, j := range batchJobs(t, libBid) {
			if j.GetStatus().GetStatus() != queue.Completed {
				t.Errorf("%s is %s: %s", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()), j.GetStatus().GetMessage())
				continue
			}
			checkStoredAndRecorded(t, j)
			if _, err := os.Stat(filepath.Join(shared.stack.WorkRoot, libBid, j.GetId())); !os.IsNotExist(err) {
				t.Errorf("%s: working folder under the work root not removed: %v", j.GetId(), err)
			}
			// What the processor wrote, the peer library reads.
			pj, err := peer.LoadJob(j.GetId())
			if err != nil {
				t.Fatalf("the peer library cannot load %s: %v", j.GetId(), err)
			}
			if del, err := pj.StoreDelete(); err != nil || del != "" {
				t.Errorf("%s: storeDelete() = %q, %v", j.GetId(), del, err)
			}
		}
		if r := b.GetStatusReport(); len(r.GetSuccessfulJobs()) != len(libJobs) {
			t.Errorf("status-report %v, want %d successful jobs", r, len(libJobs))
		}
		if emails(t, libBid)[libBid+"-report.eml"] == "" {
			t.Errorf("no report mailed for %s", libBid)
		}
	})

	t.Run("a batch manifest Merritt's ingest service submitted completes", func(t *testing.T) {
		b := waitBatch(t, ingest.ID, queue.BatchCompleted, queue.BatchFailed)
		jobs := batchJobs(t, ingest.ID)
		if b.GetStatus().GetStatus() != queue.BatchCompleted || len(jobs) != 2 {
			t.Fatalf("batch %s ended %s (%q) with %d jobs", ingest.ID, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage(), len(jobs))
		}
		for _, j := range jobs {
			checkStoredAndRecorded(t, j)
			if !strings.HasPrefix(j.GetIdentifiers().GetLocalId()[0], "loc-e2e-merritt-") {
				t.Errorf("%s: local ids %v", j.GetId(), j.GetIdentifiers().GetLocalId())
			}
		}
	})

	t.Run("jobs ingestq cannot use fail at once, saying why, and are reported", func(t *testing.T) {
		b := waitBatch(t, oddBid, queue.BatchCompleted, queue.BatchFailed)
		if b.GetStatus().GetStatus() != queue.BatchFailed || len(b.GetStatusReport().GetFailedJobs()) != 2 {
			t.Fatalf("batch %s: %v, report %v", oddBid, b.GetStatus(), b.GetStatusReport())
		}
		for jid, want := range map[string][]string{
			oddJobs[0]: {`"floppy"`, "object_manifest", "batchManifest"},
			oddJobs[1]: {"payload_url", "Merritt"},
		} {
			st, err := jobs.NewReader(q).JobStatus(ctx, jid)
			if err != nil {
				t.Fatal(err)
			}
			if st.GetStatus() != queue.Failed {
				t.Errorf("%s is %s", jid, queue.JobStateName(st.GetStatus()))
			}
			for _, w := range want {
				if !strings.Contains(st.GetMessage(), w) {
					t.Errorf("%s: message %q lacks %s", jid, st.GetMessage(), w)
				}
			}
		}
		mail := emails(t, oddBid)[oddBid+"-report.eml"]
		if !strings.Contains(mail, oddJobs[0]) || !strings.Contains(mail, "floppy") {
			t.Errorf("the report mail does not name the failed job and why:\n%s", mail)
		}
	})

	// The peer library's cleanup removes the completed batches with their
	// uuid entries, found through the batchID ingestq kept.
	deleted, err := peer.DeleteCompletedBatches()
	if err != nil {
		t.Fatal(err)
	}
	for uuid, bid := range map[string]string{"e2e-peer-library-batch": libBid, ingestUUID: ingest.ID} {
		found := false
		for _, d := range deleted {
			found = found || d == bid
		}
		if !found {
			t.Errorf("the peer's cleanup did not remove completed batch %s (removed %v)", bid, deleted)
		}
		if got, err := peer.FindBatchByUUID(uuid); err != nil || got != "" {
			t.Errorf("/batch-uuids/%s left behind, naming %q (%v)", uuid, got, err)
		}
		_, err := shared.batches.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchUuid{BatchUuid: uuid}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("GetBatchStatus by uuid %s after the cleanup: %v, want NotFound", uuid, err)
		}
	}
	if _, err := batches.New(q).GetBatch(ctx, oddBid); errors.Is(err, queue.ErrNotFound) {
		t.Errorf("the peer's cleanup removed the failed batch %s", oddBid)
	}
}
