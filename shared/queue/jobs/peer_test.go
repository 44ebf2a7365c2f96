package jobs_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// These tests put nodes into ZooKeeper exactly as Merritt's queue library
// and Merritt's ingest service write them (package merrittzk), and read
// what ingestq writes the way those programs read it
// (docs/queue-contract.md, "The peer library's keys").

func newPeer(t *testing.T, c *client) *merrittzk.Peer {
	t.Helper()
	return merrittzk.Connect(t, zktest.Servers(t), c.p.Root())
}

// peerBatch makes a batch as the peer library does before it creates its
// jobs (created, then acquired from Pending) and returns its bid.
func peerBatch(t *testing.T, peer *merrittzk.Peer) string {
	t.Helper()
	b, err := peer.CreateBatch(map[string]any{"profile_name": "demo_profile"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.AcquirePendingBatch(); err != nil {
		t.Fatal(err)
	}
	return b.ID
}

func TestTheSubmittersUUIDIsTheBatchIDThePeerLibraryReadsAndCleansUp(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	bid, jid := queuetest.SpawnWithUUID(t, c.s, "4f1c0a2e-uuid-of-the-submitter")

	b, err := peer.LoadBatch(bid)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.UUID(); err != nil || got != "4f1c0a2e-uuid-of-the-submitter" {
		t.Fatalf("the peer library's batchUuid() reads %q (%v), want the submitter's uuid", got, err)
	}

	completeBatch(t, c, bid, []string{jid})
	deleted, err := peer.DeleteCompletedBatches()
	if err != nil || len(deleted) != 1 || deleted[0] != bid {
		t.Fatalf("the peer's cleanup removed %v (%v), want %s", deleted, err, bid)
	}
	// Its uuid entry went with it: nothing dangles, and the uuid is free.
	if got, err := peer.FindBatchByUUID("4f1c0a2e-uuid-of-the-submitter"); err != nil || got != "" {
		t.Fatalf("/batch-uuids entry left behind, naming %q (%v)", got, err)
	}
	if _, err := c.b.BatchByUUID(ctx, "4f1c0a2e-uuid-of-the-submitter"); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("BatchByUUID after the peer's cleanup: %v, want ErrNotFound", err)
	}
	sub := queuetest.SampleSubmission()
	sub.BatchId = "4f1c0a2e-uuid-of-the-submitter"
	if _, err := c.b.CreateBatch(ctx, sub); err != nil {
		t.Errorf("the uuid cannot be submitted again after the peer's cleanup: %v", err)
	}
}

func TestASubmissionWithABatchIDKeyStillReadsItsUUID(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	b, err := peer.CreateBatch(map[string]any{"profile_name": "demo_profile", "payload_url": "http://127.0.0.1:1/a.txt",
		"type": "file", "batch_id": "batch-id-form-uuid"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.b.GetBatch(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSubmission().GetBatchId() != "batch-id-form-uuid" {
		t.Errorf("batch_id read as %q", got.GetSubmission().GetBatchId())
	}
}

// walkTo takes a job to the given state, writing on the way what the
// stages write: space_needed, identifiers, store and inventory.
func walkTo(t *testing.T, c *client, jid string, to queue.JobState) {
	t.Helper()
	space := int64(1234)
	ids := &v1.Identifiers{PrimaryId: "ark:/99999/fk4walk", LocalId: []string{"loc-1"}}
	for _, ch := range []jobs.Change{{To: queue.Estimating}, {To: queue.Provisioning, SpaceNeeded: &space}, {To: queue.Downloading}, {To: queue.Processing},
		{To: queue.Storing, Identifiers: ids, Store: &v1.Store{ManifestUrl: "file:///work/m.checkm", Mode: "add"}},
		{To: queue.Recording, Inventory: &v1.Inventory{ManifestUrl: "file:///store/m.checkm", Mode: "add", Version: 1}},
		{To: queue.Notify}, {To: queue.Completed}} {
		queuetest.Move(t, c.s, jid, ch)
		if ch.To == to {
			return
		}
	}
}

func TestEveryJobNodeIngestqWritesLoadsWithThePeerLibrarysTypes(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	_, jid := queuetest.SpawnWithUUID(t, c.s, "types-uuid")
	walkTo(t, c, jid, queue.Notify)

	j, err := peer.LoadJob(jid)
	if err != nil {
		t.Fatalf("the peer library cannot load a job ingestq processed: %v", err)
	}
	// Every key the library reads with getString must be a string.
	for node, keys := range map[string]map[string]any{
		"configuration": j.Configuration, "identifiers": j.Identifiers, "store": j.Store, "inventory": j.Inventory,
	} {
		want := map[string][]string{
			"configuration": {"profile_name", "submitter", "payload_url", "payload_type", "response_type", "jobID"},
			"identifiers":   {"primary_id"},
			"store":         {"manifest_url", "mode", "delete"},
			"inventory":     {"manifest_url", "mode"},
		}[node]
		for _, k := range want {
			if _, err := merrittzk.String(keys, k); err != nil {
				t.Errorf("%s: %v", node, err)
			}
		}
	}
	if del, err := j.StoreDelete(); err != nil || del != "" {
		t.Errorf("the peer library's storeDelete() = %q, %v; want \"\" (nothing to delete)", del, err)
	}
	if id, err := j.JobID(); err != nil || id != jid {
		t.Errorf("the peer library's jid() = %q, %v; want %s", id, err, jid)
	}
	if j.SpaceNeeded != 1234 || j.Priority != 5 || j.RetryCount != 0 {
		t.Errorf("space_needed %d, priority %d, retry_count %d", j.SpaceNeeded, j.Priority, j.RetryCount)
	}
}

func TestAStoresDeletionsAreTheStringTheLibraryReadsAndReadsBack(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	_, jid := queuetest.SpawnWithUUID(t, c.s, "delete-uuid")
	for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing} {
		queuetest.Move(t, c.s, jid, jobs.Change{To: to})
	}
	queuetest.Move(t, c.s, jid, jobs.Change{To: queue.Storing, Store: &v1.Store{ManifestUrl: "file:///s/m", Mode: "update", Deletions: []string{"producer/a.txt"}}})
	j, err := peer.LoadJob(jid)
	if err != nil {
		t.Fatal(err)
	}
	if del, err := j.StoreDelete(); err != nil || del != "producer/a.txt\n" {
		t.Fatalf("storeDelete() = %q, %v; want the file a line", del, err)
	}
	// The peer writes it back its way, as Merritt's ingest service writes
	// an update's deletions; ingestq reads it.
	if err := j.SetStore("file:///s/m2", "update", "producer/b.txt\nproducer/c.txt\n"); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetJob(ctx, jid)
	if err != nil || !slices.Equal(got.GetStore().GetDeletions(), []string{"producer/b.txt", "producer/c.txt"}) || got.GetStore().GetManifestUrl() != "file:///s/m2" {
		t.Errorf("store as the peer wrote it reads %v, %v", got.GetStore(), err)
	}
	if err := peer.Set("/jobs/"+jid+"/store", []byte(`{"manifest_url":"u","mode":"add","delete":true}`)); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetJob(ctx, jid); err != nil || len(got.GetStore().GetDeletions()) != 0 {
		t.Errorf("a boolean delete reads %v, %v", got.GetStore(), err)
	}
}

func TestKeysAnotherWriterPutInANodeSurviveIngestqsRewrites(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	b, err := peer.CreateBatch(map[string]any{"profile_name": "demo_profile", "batchID": "carry-uuid", "type": "file"})
	if err != nil {
		t.Fatal(err)
	}
	taken, err := peer.AcquirePendingBatch()
	if err != nil || taken == nil || taken.ID != b.ID {
		t.Fatalf("peer took %v, %v", taken, err)
	}
	conf := merrittzk.JobConfiguration("demo_profile", "peer", "http://127.0.0.1:1/a.txt", "file", "json")
	ids := merrittzk.JobIdentifiers("", "loc-carry")
	ids["minted_by"] = "peer-minter"
	j, err := peer.CreateJob(b.ID, 5, conf, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.SetStore("file:///s/old", "add", "false"); err != nil {
		t.Fatal(err)
	}
	// The peer's own keys in status nodes too.
	for _, p := range []string{"/jobs/" + j.ID + "/status", "/batches/" + b.ID + "/status"} {
		data, err := peer.Get(p)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data[:len(data)-1], []byte(`,"host":"ingest01"}`)...)
		if err := peer.Set(p, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := taken.Unlock(); err != nil {
		t.Fatal(err)
	}

	// ingestq rewrites each node: the job's status, identifiers and store;
	// the batch's status and status-report.
	cl, err := c.ClaimJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Estimating, Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4carry", LocalId: []string{"loc-carry"}},
		Store: &v1.Store{ManifestUrl: "file:///s/new", Mode: "add"}}); err != nil {
		t.Fatal(err)
	}
	bc, err := c.b.ClaimBatch(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchReporting, Report: &v1.StatusReport{}}); err != nil {
		t.Fatal(err)
	}
	if err := peer.Set("/batches/"+b.ID+"/status-report", []byte(`{"last_modified":"","failed_jobs":[],"successful_jobs":[],"mailed_to":["a@example.org"]}`)); err != nil {
		t.Fatal(err)
	}
	if bc, err = c.b.ClaimBatch(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchFailed, Report: &v1.StatusReport{FailedJobs: []string{j.ID}}}); err != nil {
		t.Fatal(err)
	}

	for p, want := range map[string]string{
		"/jobs/" + j.ID + "/status":           `"host":"ingest01"`,
		"/jobs/" + j.ID + "/identifiers":      `"minted_by":"peer-minter"`,
		"/batches/" + b.ID + "/status":        `"host":"ingest01"`,
		"/batches/" + b.ID + "/status-report": `"mailed_to":["a@example.org"]`,
	} {
		data, err := peer.Get(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lost %s: %s", p, want, data)
		}
	}
	// What ingestq wrote is there, once, beside it.
	if data, _ := peer.Get("/jobs/" + j.ID + "/identifiers"); !strings.Contains(string(data), `"primary_id":"ark:/99999/fk4carry"`) {
		t.Errorf("identifiers: %s", data)
	}
	if data, _ := peer.Get("/jobs/" + j.ID + "/store"); !strings.Contains(string(data), `"manifest_url":"file:///s/new"`) ||
		strings.Count(string(data), "manifest_url") != 1 {
		t.Errorf("store: %s", data)
	}
}

func TestAJobThePeerLibraryCreatedWithoutWorkingDirHasOneUnderTheWorkRoot(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	bid := peerBatch(t, peer)
	j, err := peer.CreateJob(bid, 5, merrittzk.JobConfiguration("demo_profile", "peer", "http://127.0.0.1:1/a.txt", "file", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A stage's claim reads the configuration only.
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	root := t.TempDir()
	wd, err := cl.WorkingDir(ctx, root)
	if want := filepath.Join(root, bid, j.ID); err != nil || wd != want {
		t.Fatalf("working folder %q, %v; want %s", wd, err, want)
	}
	// A job that names its own keeps it.
	_, jid := queuetest.SpawnWithUUID(t, c.s, "wd-uuid")
	got, err := c.GetJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if wd := queue.JobWorkingDir(root, got); wd != "/tmp/work/x" {
		t.Errorf("configured working_dir read as %q", wd)
	}
}

func TestMerrittsPayloadTypeWordsReadAsIngestqsAndAnUnknownOneIsNamed(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	bid := peerBatch(t, peer)
	for word, want := range map[string]v1.PayloadType{
		"file":                   v1.PayloadType_PAYLOAD_TYPE_FILE,
		"container":              v1.PayloadType_PAYLOAD_TYPE_CONTAINER,
		"manifest":               v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
		"batchManifest":          v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		"batchManifestContainer": v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS,
	} {
		j, err := peer.CreateJob(bid, 5, merrittzk.JobConfiguration("demo_profile", "peer", "http://127.0.0.1:1/x", word, "json"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.GetJob(ctx, j.ID)
		if err != nil || got.GetConfiguration().GetPayloadType() != want {
			t.Errorf("payload_type %q reads as %v, %v; want %v", word, got.GetConfiguration().GetPayloadType(), err, want)
		}
	}
	j, err := peer.CreateJob(bid, 5, merrittzk.JobConfiguration("demo_profile", "peer", "http://127.0.0.1:1/x", "floppy", "json"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.ClaimJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	if cl.LoadErr == nil || !strings.Contains(cl.LoadErr.Error(), `"floppy"`) || !strings.Contains(cl.LoadErr.Error(), "batchManifest") ||
		!strings.Contains(cl.LoadErr.Error(), "object_manifest") {
		t.Errorf("unknown word: %v; want an error naming it and the words accepted", cl.LoadErr)
	}
}

func TestASubmissionMerrittsIngestWroteReadsAsIngestqsOrSaysWhyNot(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	// As Merritt's ingest service writes a batch: its own keys and words.
	b, err := peer.CreateBatch(map[string]any{"batchID": "bid-7f3e", "profile": "demo_profile", "type": "batchManifest",
		"size": "512", "filename": "batch.checkm", "update": false, "submitter": "dana/Dana", "title": "Letters",
		"creator": "Dana", "date": "1921", "objectID": "ark:/99999/fk4given", "localID": "loc-a;loc-b",
		"digestType": "md5", "digestValue": "0cc175b9c0f1b6a831c399e269772661", "notificationFormat": "xml", "responseForm": "turtle",
		"submissionDate": "Sun Nov 22 03:51:07 UTC 2026"})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := c.b.ClaimBatch(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Release(ctx)
	sub := bc.Batch.GetSubmission()
	if bc.LoadErr != nil || sub.GetProfileName() != "demo_profile" || sub.GetType() != v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS ||
		sub.GetSubmissionMode() != v1.SubmissionMode_SUBMISSION_MODE_ADD || sub.GetBatchId() != "bid-7f3e" ||
		sub.GetMetadata().GetWhat() != "Letters" || sub.GetMetadata().GetWho() != "Dana" || sub.GetSubmissionDate() == nil {
		t.Errorf("read as %v (%v)", sub, bc.LoadErr)
	}
	m := bc.Merritt
	if m == nil || m.Filename != "batch.checkm" || m.PrimaryID != "ark:/99999/fk4given" || len(m.LocalIDs) != 2 ||
		m.DigestValue != "0cc175b9c0f1b6a831c399e269772661" || m.Size != 512 || m.ResponseForm != "turtle" {
		t.Errorf("Merritt's own keys read as %+v", m)
	}

	// A word ingestq does not know leaves the batch claimable, to be failed.
	odd, err := peer.CreateBatch(map[string]any{"profile": "demo_profile", "type": "floppy", "filename": "f.img"})
	if err != nil {
		t.Fatal(err)
	}
	bc2, err := c.b.ClaimBatch(ctx, odd.ID)
	if err != nil {
		t.Fatalf("a batch with an unknown type word cannot be claimed: %v", err)
	}
	defer bc2.Release(ctx)
	if bc2.LoadErr == nil || !strings.Contains(bc2.LoadErr.Error(), `"floppy"`) || bc2.Batch.GetSubmission().GetProfileName() != "demo_profile" {
		t.Errorf("LoadErr %v, submission %v", bc2.LoadErr, bc2.Batch.GetSubmission())
	}
	if got, err := c.b.GetBatch(ctx, odd.ID); err != nil || got.GetStatus().GetStatus() != queue.BatchPending {
		t.Errorf("its status cannot be read: %v, %v", got, err)
	}
}

func TestLocksUnderLocksAreTheNodesThePeerLibraryTakesForTheSameIDs(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	// A local id with a ':' of its own, as DOIs and other schemes have.
	l, err := c.LockLocalID(ctx, "doi:10.5072/FK2x", "ark:/99999/j2owner")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := peer.Locks().LocalID("doi:10.5072/FK2x_ark:/99999/j2owner"); ok || err != nil {
		t.Errorf("Merritt's ingest service could take the local id lock ingestq holds: %v, %v", ok, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := peer.Locks().LocalID("doi:10.5072/FK2x_ark:/99999/j2owner"); !ok || err != nil {
		t.Fatalf("peer lock after ingestq released it: %v, %v", ok, err)
	}
	if _, err := c.LockLocalID(ctx, "doi:10.5072/FK2x", "ark:/99999/j2owner"); !errors.Is(err, queue.ErrLocked) {
		t.Errorf("ingestq took the local id lock Merritt's ingest service holds: %v", err)
	}
	for _, ark := range []string{"ark:/99999/fk4x", "ark:/99999/fk4:y"} {
		s, err := c.LockStorage(ctx, ark)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := peer.Exists("/locks/storage/" + merrittzk.LockName(ark)); !ok || err != nil {
			t.Errorf("storage lock of %s is not where the peer library looks: %v, %v", ark, ok, err)
		}
		s.Unlock(ctx)
	}
}

// A job the peer library made with a payload type ingestq does not know is
// failed by the first stage that takes it, naming the word; operators
// must still see it, and delete it, as they do any failed job.
func TestAJobWithAPayloadTypeIngestqDoesNotKnowIsStillShownAndDeletedOnceFailed(t *testing.T) {
	c := newClient(t)
	peer := newPeer(t, c)
	ctx := testCtx(t)
	bid := peerBatch(t, peer)
	j, err := peer.CreateJob(bid, 5, merrittzk.JobConfiguration("demo_profile", "peer", "http://127.0.0.1:1/x", "bogus", "xml"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.NewConsumer(queue.Pending, jobs.ConsumerOptions{Parts: queue.PartConfiguration}).Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cl.LoadErr == nil || !strings.Contains(cl.LoadErr.Error(), `"bogus"`) {
		t.Fatalf("the stage's claim: %v; want an error naming the word", cl.LoadErr)
	}
	if err := cl.Commit(ctx, jobs.Change{To: queue.Failed, Message: cl.LoadErr.Error()}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatalf("GetJob of the failed job: %v", err)
	}
	if got.GetStatus().GetStatus() != queue.Failed || !strings.Contains(got.GetStatus().GetMessage(), `"bogus"`) ||
		got.GetBid() != bid || got.GetConfiguration().GetPayloadUrl() != "http://127.0.0.1:1/x" || got.GetConfiguration().GetResponseType() != "xml" {
		t.Errorf("GetJob: %v", got)
	}
	if _, err := admin.New(c.s).Jobs.Delete(ctx, j.ID, true); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	if _, err := c.GetJob(ctx, j.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("GetJob after DeleteJob: %v", err)
	}
}
