package traffic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	_ "modernc.org/sqlite"
)

// Clients are the stack's gRPC services, one of each per replica: a call
// goes to whichever answers.
type Clients struct {
	Batchers  []v1.BatchServiceClient
	Admins    []v1.AdminServiceClient
	Recorders []v1.RecordingServiceClient
	// AdminCtx adds the admin token to a call's context.
	AdminCtx func(context.Context) context.Context
}

// Traffic drives the load of one run.
type Traffic struct {
	c       Clients
	batches []*Batch
	base    string
	peer    *merrittzk.Peer
	// inventory is the SQLite inventory the external recorder records into
	// (the recorder's own, shared as an inventory is).
	inventory string
	rng       *rand.Rand
	logf      func(format string, args ...any)

	mu      sync.Mutex
	bids    map[int]string // batch index → bid
	actions map[string]int // operator's actions and the external recorder's, by kind
	deleted map[string]bool
	// deleteFailed: batches the operator asked to delete and was not told
	// yes. The delete may have gone through in part or in full.
	deleteFailed map[string]bool
	// mayBeHeld: the operator asked to hold the collection and no release
	// has been answered since.
	mayBeHeld bool
	// updated counts the update reports asked for, by batch.
	updated map[string]int
	// awaiting says what Submit waits for ("" once it has ended).
	awaiting string
}

// New prepares the traffic of batches served at base.
func New(c Clients, batches []*Batch, base string, peer *merrittzk.Peer, inventory string, seed uint64, logf func(string, ...any)) *Traffic {
	return &Traffic{c: c, batches: batches, base: base, peer: peer, inventory: inventory, rng: rand.New(rand.NewPCG(seed, 7)),
		logf: logf, bids: map[int]string{}, actions: map[string]int{}, deleted: map[string]bool{}, deleteFailed: map[string]bool{},
		updated: map[string]int{}, awaiting: "the first batch's submission"}
}

// Awaiting says what the submission of the batches waits for, in words;
// "" once every batch was submitted, or the submission ended.
func (t *Traffic) Awaiting() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.awaiting
}

func (t *Traffic) await(what string) {
	t.mu.Lock()
	t.awaiting = what
	t.mu.Unlock()
}

// Batches are the deposits.
func (t *Traffic) Batches() []*Batch { return t.batches }

// Bid is a batch's id once it was submitted.
func (t *Traffic) Bid(i int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	bid, ok := t.bids[i]
	return bid, ok
}

// Deleted reports whether the operator deleted batch bid.
func (t *Traffic) Deleted(bid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deleted[bid]
}

// Actions counts what the operator and the external recorder did.
func (t *Traffic) Actions() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for k, v := range t.actions {
		out[k] = v
	}
	return out
}

// ActionsLine is Actions in words.
func (t *Traffic) ActionsLine() string {
	a := t.Actions()
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d", k, a[k])
	}
	return s
}

// countErr counts a refused call of the external recorder by its code:
// a lease that ended under it (its recorder killed, say) is one thing, a
// call refused for want of a token another.
func (t *Traffic) countErr(call string, err error) {
	t.count(fmt.Sprintf("%s refused (%s)", call, status.Code(err)))
}

func (t *Traffic) count(kind string) {
	t.mu.Lock()
	t.actions[kind]++
	t.mu.Unlock()
}

// Submit submits the batches: the first all but reserve of them spacing
// apart, the last reserve only when nudged (a batcher's failpoint is
// reached only by a batch arriving, and one armed late in a run must find
// one), and whatever is left once done is closed, until ctx ends.
func (t *Traffic) Submit(ctx context.Context, spacing time.Duration, reserve int, nudge, done <-chan struct{}) error {
	defer t.await("")
	regular := max(1, len(t.batches)-reserve)
	for i, b := range t.batches {
		switch {
		case i == 0:
		case i < regular:
			t.await(fmt.Sprintf("batch %d of %d: its turn (one every %s) or a nudge", i+1, len(t.batches), spacing))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(spacing):
			case <-nudge:
			}
		default:
			t.await(fmt.Sprintf("batch %d of %d, kept for a failpoint: a nudge (a failpoint armed) or the end of the faults", i+1, len(t.batches)))
			select {
			case <-ctx.Done():
				return nil
			case <-nudge:
			case <-done:
			}
		}
		t.await(fmt.Sprintf("batch %d of %d (%s): its submission", i+1, len(t.batches), b.UUID))
		var bid string
		var err error
		if b.Peer {
			bid, err = t.submitAsPeer(b)
		} else {
			bid, err = t.submit(ctx, b)
		}
		if err != nil {
			return fmt.Errorf("submitting batch %d (%s): %w", i, b.UUID, err)
		}
		t.mu.Lock()
		t.bids[i] = bid
		t.mu.Unlock()
		how := "BatchService"
		if b.Peer {
			how = "Merritt's queue library"
		}
		t.logf("submitted batch %d as %s through %s: %s, %s files, %d objects%s", i, bid, how, b.Type, b.Size, len(b.Objects),
			map[bool]string{true: " (its payload is missing: it must fail)"}[b.Doomed])
	}
	return nil
}

// submit submits one batch to whichever batcher answers; its uuid finds
// a submission whose answer was lost.
func (t *Traffic) submit(ctx context.Context, b *Batch) (string, error) {
	req := &v1.SubmitRequest{Submitter: "robustness", Profile: Profile, PayloadUrl: t.base + b.URLPath, PayloadType: b.Type,
		BatchUuid: b.UUID, Metadata: &v1.Metadata{Who: "Robustness", What: "batch " + b.UUID, When: "2026"}}
	for attempt := 0; ; attempt++ {
		c := t.c.Batchers[attempt%len(t.c.Batchers)]
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Submit(callCtx, req)
		cancel()
		t.await(fmt.Sprintf("batch %s: its submission, tried %d time(s) (last answer: %v)", b.UUID, attempt+1, err))
		switch status.Code(err) {
		case codes.OK:
			return resp.GetBatchId(), nil
		case codes.AlreadyExists:
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := c.GetBatchStatus(callCtx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchUuid{BatchUuid: b.UUID}})
			cancel()
			if err == nil {
				return st.GetBatch().GetId(), nil
			}
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// merrittWords are the payload types as Merritt's ingest service writes them.
var merrittWords = map[v1.PayloadType]string{
	v1.PayloadType_PAYLOAD_TYPE_FILE:                   "file",
	v1.PayloadType_PAYLOAD_TYPE_CONTAINER:              "container",
	v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST:        "manifest",
	v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS:  "batchManifest",
	v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS: "batchManifestContainer",
}

// submitAsPeer writes the batch into the queue as Merritt's library's
// createBatch does; ingestq's batcher takes it from there.
func (t *Traffic) submitAsPeer(b *Batch) (string, error) {
	created, err := t.peer.CreateBatch(map[string]any{"batchID": b.UUID, "profile": Profile, "type": merrittWords[b.Type],
		"payload_url": t.base + b.URLPath, "submitter": "robustness (Merritt library)", "title": "batch " + b.UUID,
		"creator": "Robustness", "date": "2026"})
	if err != nil {
		return "", err
	}
	return created.ID, nil
}

// Operate plays an operator until ctx ends: it requeues failed jobs (one
// by one and in bulk), holds the collection for a moment and releases it,
// and deletes the doomed batch once it failed.
//
// An action whose answer is an error may have gone through all the same
// (the batcher's connection to ZooKeeper cut after its commit): the
// operator does not take a refusal for "nothing happened". A hold is
// released whatever it answered, and again at every tick until a release
// is answered; a delete is tried again, as the refusal says to.
func (t *Traffic) Operate(ctx context.Context) {
	defer t.releaseAtEnd(ctx)
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(700+t.rng.IntN(800)) * time.Millisecond):
		}
		actx, cancel := context.WithTimeout(t.c.AdminCtx(ctx), 10*time.Second)
		t.act(actx, tick)
		cancel()
	}
}

// act is the operator's tick-th round.
func (t *Traffic) act(ctx context.Context, tick int) {
	admin := t.c.Admins[tick%len(t.c.Admins)]
	t.releaseIfHeld(ctx, admin)
	switch {
	case tick%9 == 0:
		t.holdCollection(ctx, admin)
	case tick%3 == 0:
		resp, err := admin.BulkAction(ctx, &v1.BulkActionRequest{Verb: v1.BulkVerb_BULK_VERB_REQUEUE,
			Filter: &v1.JobFilter{State: v1.JobState_JOB_STATE_FAILED, Collection: Collection}, Message: "requeued in bulk by the robustness operator"})
		if err == nil && resp.GetMatched() > 0 {
			t.count("bulk requeue")
		}
	default:
		t.requeueFailed(ctx, admin)
	}
	t.deleteDoomed(ctx, admin)
	t.reportAgain(ctx, admin)
}

func (t *Traffic) requeueFailed(ctx context.Context, admin v1.AdminServiceClient) {
	resp, err := admin.ListJobs(ctx, &v1.ListJobsRequest{State: v1.JobState_JOB_STATE_FAILED, PageSize: 100})
	if err != nil {
		return
	}
	for _, j := range resp.GetJobs() {
		if _, err := admin.RequeueJob(ctx, &v1.RequeueJobRequest{JobId: j.GetId(), Message: "requeued by the robustness operator"}); err == nil {
			t.count("requeue")
		}
	}
}

// holdCollection holds the collection for a second, then releases it. A
// hold answered with an error may stand: the release comes whatever the
// hold answered, and until one is answered each tick asks again
// (releaseIfHeld).
func (t *Traffic) holdCollection(ctx context.Context, admin v1.AdminServiceClient) {
	t.mu.Lock()
	t.mayBeHeld = true
	t.mu.Unlock()
	if _, err := admin.HoldCollection(ctx, &v1.HoldCollectionRequest{Collection: Collection}); err == nil {
		t.count("hold collection")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	rctx, cancel := context.WithTimeout(t.c.AdminCtx(context.WithoutCancel(ctx)), 10*time.Second)
	defer cancel()
	t.releaseIfHeld(rctx, admin)
}

// releaseIfHeld releases the collection when the operator's hold may
// stand. Releasing a collection not held is no error.
func (t *Traffic) releaseIfHeld(ctx context.Context, admin v1.AdminServiceClient) bool {
	t.mu.Lock()
	held := t.mayBeHeld
	t.mu.Unlock()
	if !held {
		return true
	}
	if _, err := admin.ReleaseCollection(ctx, &v1.ReleaseCollectionRequest{Collection: Collection}); err != nil {
		t.countErr("release collection", err)
		return false
	}
	t.mu.Lock()
	t.mayBeHeld = false
	t.mu.Unlock()
	t.count("release collection")
	return true
}

// releaseAtEnd releases the collection, when the operator's hold may
// stand, as the operator stops: a collection left held holds the run's
// end. It tries every batcher in turn for a minute.
func (t *Traffic) releaseAtEnd(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		cctx, ccancel := context.WithTimeout(t.c.AdminCtx(ctx), 10*time.Second)
		released := t.releaseIfHeld(cctx, t.c.Admins[attempt%len(t.c.Admins)])
		ccancel()
		if released {
			return
		}
		select {
		case <-ctx.Done():
			t.logf("the collection could not be released: %v", ctx.Err())
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deleteDoomed deletes the doomed batch once it failed. A delete answered
// with an error may have gone through in part, leaving the batch Deleted
// with its nodes, or in full: the operator deletes a Deleted batch again
// (which finishes it), and counts a batch gone after a delete it was not
// told succeeded as deleted.
func (t *Traffic) deleteDoomed(ctx context.Context, admin v1.AdminServiceClient) {
	for i, b := range t.batches {
		bid, ok := t.Bid(i)
		if !b.Doomed || !ok || t.Deleted(bid) {
			continue
		}
		resp, err := admin.GetBatch(ctx, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
		if status.Code(err) == codes.NotFound && t.deleteTried(bid) {
			t.markDeleted(bid, "gone after a delete answered with an error")
			continue
		}
		if err != nil {
			continue
		}
		switch st := resp.GetBatch().GetStatus().GetStatus(); st {
		case v1.BatchState_BATCH_STATE_FAILED, v1.BatchState_BATCH_STATE_DELETED:
		default:
			continue
		}
		_, err = admin.DeleteBatch(ctx, &v1.DeleteBatchRequest{BatchId: bid})
		switch {
		case err == nil:
			t.markDeleted(bid, "deleted")
		case status.Code(err) == codes.NotFound && t.deleteTried(bid):
			t.markDeleted(bid, "gone after a delete answered with an error")
		default:
			t.mu.Lock()
			t.deleteFailed[bid] = true
			t.mu.Unlock()
			t.countErr("delete batch", err)
			t.logf("operator: deleting batch %s: %v (tried again)", bid, err)
		}
	}
}

func (t *Traffic) deleteTried(bid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deleteFailed[bid]
}

func (t *Traffic) markDeleted(bid, how string) {
	t.mu.Lock()
	t.deleted[bid] = true
	t.mu.Unlock()
	t.count("delete batch")
	t.logf("operator: batch %s %s", bid, how)
}

// Record plays an external inventory until ctx ends: it leases jobs in
// Recording through RecordingService, records each version into the
// inventory database (idempotent per ARK and job, as the built-in
// recorder's), and completes the lease.
func (t *Traffic) Record(ctx context.Context) {
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: t.inventory,
		RawQuery: url.Values{"_pragma": {"busy_timeout(10000)", "journal_mode(WAL)"}, "_txlock": {"immediate"}}.Encode()}).String())
	if err != nil {
		t.logf("external recorder: %v", err)
		return
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for i := 0; ctx.Err() == nil; i++ {
		rec := t.c.Recorders[i%len(t.c.Recorders)]
		// RecordingService is behind the admin token, as an inventory's
		// client holds it.
		lctx, cancel := context.WithTimeout(t.c.AdminCtx(ctx), 5*time.Second)
		l, err := rec.Lease(lctx, &v1.LeaseRequest{Wait: durationpb.New(2 * time.Second), LeaseDuration: durationpb.New(30 * time.Second)})
		cancel()
		if err != nil && ctx.Err() == nil {
			t.countErr("lease", err)
		}
		if err != nil || l.GetLeaseId() == "" {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(200+t.rng.IntN(800)) * time.Millisecond):
			}
			continue
		}
		t.count("leases")
		if err := record(ctx, db, l); err != nil {
			t.logf("external recorder: %s: %v", l.GetJobId(), err)
			fctx, cancel := context.WithTimeout(t.c.AdminCtx(context.WithoutCancel(ctx)), 10*time.Second)
			rec.Fail(fctx, &v1.FailRequest{LeaseId: l.GetLeaseId(), Message: "external inventory: " + err.Error()})
			cancel()
			continue
		}
		cctx, cancel := context.WithTimeout(t.c.AdminCtx(context.WithoutCancel(ctx)), 10*time.Second)
		_, err = rec.Complete(cctx, &v1.CompleteRequest{LeaseId: l.GetLeaseId()})
		cancel()
		if err == nil {
			t.count("leases completed")
		} else {
			t.countErr("complete", err)
		}
	}
}

// record writes a leased version into the inventory, once per ARK and job.
func record(ctx context.Context, db *sql.DB, l *v1.LeaseResponse) error {
	entries, err := leasedFiles(ctx, l)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var n int
	err = tx.QueryRowContext(ctx, `SELECT number FROM versions WHERE ark = ? AND jid = ?`, l.GetArk(), l.GetJobId()).Scan(&n)
	if err == nil {
		return nil // recorded already: a lease of the same job again
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	if _, err := tx.ExecContext(ctx, `INSERT INTO objects (ark, local_ids, created) VALUES (?, '[]', ?) ON CONFLICT (ark) DO NOTHING`, l.GetArk(), now); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO versions (ark, number, manifest_url, mode, jid, recorded_at) VALUES (?, ?, ?, ?, ?, ?)`,
		l.GetArk(), l.GetVersion(), l.GetManifestUrl(), l.GetMode(), l.GetJobId(), now); err != nil {
		return err
	}
	for _, e := range entries {
		if _, err := tx.ExecContext(ctx, `INSERT INTO files (ark, version, name, size, digest_alg, digest) VALUES (?, ?, ?, ?, ?, ?)`,
			l.GetArk(), l.GetVersion(), e.FileName, e.FileSize, e.HashAlgorithm, e.HashValue); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// leasedFiles reads the files of a leased version where the lease says:
// a version manifest on the shared file system (file://), or the object's
// manifest in Merritt's storage service (http://…/manifest/<node>/<ARK>),
// read as Merritt's inventory service reads it.
func leasedFiles(ctx context.Context, l *v1.LeaseResponse) ([]checkm.Entry, error) {
	u := l.GetManifestUrl()
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		path, err := checkm.FilePath(u)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		m, err := checkm.Parse(f, checkm.Limits{})
		if err != nil {
			return nil, err
		}
		return m.Entries, nil
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(gctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	obj, err := merrittstore.ParseObjectInfo(resp.Body)
	if err != nil {
		return nil, err
	}
	v, ok := obj.Version(int(l.GetVersion()))
	if !ok {
		return nil, fmt.Errorf("%s has no version %d", u, l.GetVersion())
	}
	out := make([]checkm.Entry, 0, len(v.Files))
	for _, f := range v.Files {
		out = append(out, checkm.Entry{FileName: f.Name, FileSize: f.Size, HashAlgorithm: f.HashAlgorithm, HashValue: f.HashValue})
	}
	return out, nil
}

// UpdateReports is how many update reports the operator asked for batch bid.
func (t *Traffic) UpdateReports(bid string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.updated[bid]
}

// reportAgain asks for an update report of each failed batch (but the
// doomed one) whose jobs have all completed since: a job failed by an
// injected error fails its batch when it was the last live one, and is
// requeued and completes afterwards.
func (t *Traffic) reportAgain(ctx context.Context, admin v1.AdminServiceClient) {
	resp, err := admin.ListBatches(ctx, &v1.ListBatchesRequest{Status: v1.BatchState_BATCH_STATE_FAILED, PageSize: 100})
	if err != nil {
		return
	}
	for _, b := range resp.GetBatches() {
		if t.doomed(b.GetId()) {
			continue
		}
		js, err := admin.ListJobs(ctx, &v1.ListJobsRequest{BatchId: b.GetId(), PageSize: 500})
		if err != nil {
			continue
		}
		done := len(js.GetJobs()) > 0
		for _, j := range js.GetJobs() {
			done = done && j.GetStatus().GetStatus() == v1.JobState_JOB_STATE_COMPLETED
		}
		if !done {
			continue
		}
		if _, err := admin.UpdateReportBatch(ctx, &v1.UpdateReportBatchRequest{BatchId: b.GetId()}); err == nil {
			t.mu.Lock()
			t.updated[b.GetId()]++
			t.mu.Unlock()
			t.count("update report")
		}
	}
}

func (t *Traffic) doomed(bid string) bool {
	for i, b := range t.batches {
		if got, ok := t.Bid(i); ok && got == bid {
			return b.Doomed
		}
	}
	return false
}
