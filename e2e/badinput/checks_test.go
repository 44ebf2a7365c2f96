package badinput

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	_ "modernc.org/sqlite"
)

// waitFor bounds every wait of the suite on the pipeline.
const waitFor = 3 * time.Minute

// adminCtx carries the admin token.
func adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
}

// submit submits a payload of the demo profile and returns the bid.
func (p *pipeline) submit(t *testing.T, url string, typ v1.PayloadType) string {
	t.Helper()
	resp, err := p.batches.Submit(context.Background(), &v1.SubmitRequest{
		Submitter: "badinput", Profile: demoProfile, PayloadUrl: url, PayloadType: typ,
		Metadata: &v1.Metadata{Who: "Bad Input", What: t.Name(), When: "2026"},
	})
	if err != nil {
		t.Fatalf("submit %s: %v", url, err)
	}
	return resp.GetBatchId()
}

// waitBatch waits until batch bid is in one of states and returns it.
func (p *pipeline) waitBatch(t *testing.T, bid string, states ...queue.BatchState) *v1.Batch {
	t.Helper()
	var b *v1.Batch
	eventually(t, "batch "+bid+" reaching one of "+batchStateNames(states), func(ctx context.Context) error {
		resp, err := p.batches.GetBatchStatus(ctx, &v1.GetBatchStatusRequest{Batch: &v1.GetBatchStatusRequest_BatchId{BatchId: bid}})
		if err != nil {
			return err
		}
		if b = resp.GetBatch(); !slices.Contains(states, b.GetStatus().GetStatus()) {
			return errors.New("it is " + queue.BatchStateName(b.GetStatus().GetStatus()) + ": " + b.GetStatus().GetMessage())
		}
		return nil
	})
	return b
}

func batchStateNames(states []queue.BatchState) string {
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = queue.BatchStateName(s)
	}
	return strings.Join(names, ", ")
}

// eventually polls check until it returns nil, failing the test with its
// last error after waitFor.
func eventually(t *testing.T, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// jobs reads the jobs of a batch from the queue.
func (p *pipeline) jobs(t *testing.T, bid string) []*v1.Job {
	t.Helper()
	listed, _, err := jobs.NewReader(p.q).ListJobs(context.Background(), jobs.JobFilter{Batch: bid, PageSize: 1000})
	if err != nil {
		t.Fatalf("jobs of %s: %v", bid, err)
	}
	return listed
}

// wantStatus checks that err is a gRPC status with code and a message
// holding every one of want.
func wantStatus(t *testing.T, err error, code codes.Code, want ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("got %v, want a %s status", err, code)
	}
	if st.Code() != code {
		t.Errorf("code %s, want %s (message %q)", st.Code(), code, st.Message())
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("message %q does not say %q", st.Message(), w)
		}
	}
}

// wantMessage checks that a batch's or job's status message says every one
// of want.
func wantMessage(t *testing.T, what, msg string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s message %q does not say %q", what, msg, w)
		}
	}
}

// outcome is how a bad payload must end: the batch Failed with a message
// saying batch (when its payload is refused before any job exists), or with
// failed jobs whose messages say job, beside completed ones.
type outcome struct {
	batch     []string
	failed    int
	job       []string
	completed int
}

// expectFailure is checkFailed, then deleteBatch.
func (p *pipeline) expectFailure(t *testing.T, bid string, want outcome) {
	t.Helper()
	p.checkFailed(t, bid, want)
	p.deleteBatch(t, bid)
}

// checkFailed waits for the batch to fail, checks what the user sees
// against want, and checks that nothing of the bad input is left
// half-written (see checkNothingKept).
func (p *pipeline) checkFailed(t *testing.T, bid string, want outcome) {
	t.Helper()
	b := p.waitBatch(t, bid, queue.BatchFailed, queue.BatchCompleted)
	if b.GetStatus().GetStatus() != queue.BatchFailed {
		t.Fatalf("batch %s ended %s (%q); want Failed", bid, queue.BatchStateName(b.GetStatus().GetStatus()), b.GetStatus().GetMessage())
	}
	t.Logf("batch %s: %s", bid, b.GetStatus().GetMessage())
	wantMessage(t, "batch "+bid, b.GetStatus().GetMessage(), want.batch)
	var failed, completed int
	for _, j := range p.jobs(t, bid) {
		switch j.GetStatus().GetStatus() {
		case queue.Failed:
			failed++
			t.Logf("job %s: %s", j.GetId(), j.GetStatus().GetMessage())
			wantMessage(t, "job "+j.GetId(), j.GetStatus().GetMessage(), want.job)
		case queue.Completed:
			completed++
			p.checkStored(t, j)
		default:
			t.Errorf("job %s of failed batch %s is %s", j.GetId(), bid, queue.JobStateName(j.GetStatus().GetStatus()))
		}
	}
	if failed != want.failed || completed != want.completed {
		t.Errorf("batch %s: %d failed and %d completed jobs, want %d and %d", bid, failed, completed, want.failed, want.completed)
	}
	p.checkNothingKept(t, bid)
}

// checkNothingKept checks that a failed batch left nothing half-written:
// the batch and its jobs are unlocked; a failed job has no store or
// inventory node, no row in the inventory, no partial download and no file
// under producer/ (the folder the processor would store from); a job that
// never reached Downloading has no working directory at all, and a batch
// refused before it had jobs has no directory either.
func (p *pipeline) checkNothingKept(t *testing.T, bid string) {
	t.Helper()
	p.checkUnlocked(t, bid)
	jobs := p.jobs(t, bid)
	if len(jobs) == 0 {
		if _, err := os.Stat(filepath.Join(p.stack.WorkRoot, bid)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("batch %s was refused before it had jobs, but its directory exists (%v)", bid, err)
		}
	}
	for _, j := range jobs {
		if j.GetStatus().GetStatus() != queue.Failed {
			continue
		}
		if j.GetStore() != nil || j.GetInventory() != nil {
			t.Errorf("failed job %s has store %v and inventory %v", j.GetId(), j.GetStore(), j.GetInventory())
		}
		if n := p.inventoryRows(t, j.GetId()); n > 0 {
			t.Errorf("failed job %s has %d version rows in the inventory", j.GetId(), n)
		}
		p.checkWorkingDir(t, j)
	}
}

// checkUnlocked waits until neither the batch nor any of its jobs is locked.
func (p *pipeline) checkUnlocked(t *testing.T, bid string) {
	t.Helper()
	eventually(t, "batch "+bid+" and its jobs unlocked", func(ctx context.Context) error {
		b, err := batches.New(p.q).GetBatch(ctx, bid)
		if err != nil {
			return err
		}
		if b.GetLocked() {
			return errors.New("batch still locked")
		}
		listed, _, err := jobs.NewReader(p.q).ListJobs(ctx, jobs.JobFilter{Batch: bid, PageSize: 1000})
		if err != nil {
			return err
		}
		for _, j := range listed {
			if j.GetLocked() {
				return errors.New("job " + j.GetId() + " still locked")
			}
		}
		return nil
	})
}

// checkWorkingDir checks a failed job's working directory: none unless the
// job got to Downloading; then no partial download but one kept for a
// requeue to resume (a .part with its .state beside it), and nothing in
// producer/. (The downloader keeps a fetched container outside producer/
// for an admin resume; DeleteBatch and DeleteJob remove it.)
func (p *pipeline) checkWorkingDir(t *testing.T, j *v1.Job) {
	t.Helper()
	dir := j.GetConfiguration().GetWorkingDir()
	if !strings.HasPrefix(dir, p.stack.WorkRoot+string(filepath.Separator)) {
		t.Errorf("job %s: working_dir %q is not under the work root %s", j.GetId(), dir, p.stack.WorkRoot)
		return
	}
	reachedDownloading := j.GetStatus().GetLastSuccessfulStatus() == queue.Provisioning
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == dir {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case !reachedDownloading:
			t.Errorf("job %s failed before Downloading, but %s exists", j.GetId(), path)
			return filepath.SkipAll
		case strings.HasSuffix(path, ".tmp"):
			t.Errorf("job %s: partial download left: %s", j.GetId(), rel)
		case strings.HasSuffix(path, ".part"):
			if _, err := os.Stat(strings.TrimSuffix(path, ".part") + ".state"); err != nil {
				t.Errorf("job %s: partial download left without a state to resume it from: %s", j.GetId(), rel)
			}
		case strings.HasPrefix(rel, "producer"+string(filepath.Separator)) && !d.IsDir():
			t.Errorf("job %s: %s kept in producer/ of a failed job", j.GetId(), rel)
		}
		return nil
	})
	if err != nil {
		t.Errorf("job %s: reading its working directory: %v", j.GetId(), err)
	}
}

// inventoryRows counts the version rows recorded for a job.
func (p *pipeline) inventoryRows(t *testing.T, jid string) int {
	t.Helper()
	db, err := sql.Open("sqlite", p.stack.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM versions WHERE jid = ?`, jid).Scan(&n); err != nil {
		t.Fatalf("reading the inventory: %v", err)
	}
	return n
}

// checkStored checks that a completed job's version manifest is in the
// object store, its version recorded once, and its working directory gone.
func (p *pipeline) checkStored(t *testing.T, j *v1.Job) {
	t.Helper()
	manifest, err := checkm.FilePath(j.GetInventory().GetManifestUrl())
	if err != nil {
		t.Errorf("completed job %s: %v", j.GetId(), err)
	}
	if !strings.HasPrefix(manifest, p.stack.StoreRoot) {
		t.Errorf("completed job %s stored outside the store: %q", j.GetId(), manifest)
	} else if _, err := os.Stat(manifest); err != nil {
		t.Errorf("completed job %s: stored version manifest: %v", j.GetId(), err)
	}
	if n := p.inventoryRows(t, j.GetId()); n != 1 {
		t.Errorf("completed job %s has %d version rows in the inventory, want 1", j.GetId(), n)
	}
	if _, err := os.Stat(j.GetConfiguration().GetWorkingDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("completed job %s: working directory not removed (%v)", j.GetId(), err)
	}
}

// deleteBatch deletes a failed batch through the admin API and checks that
// nothing of it remains: neither in the queue nor in the working storage.
func (p *pipeline) deleteBatch(t *testing.T, bid string) {
	t.Helper()
	if _, err := p.admin.DeleteBatch(adminCtx(context.Background()), &v1.DeleteBatchRequest{BatchId: bid}); err != nil {
		t.Fatalf("deleting failed batch %s: %v", bid, err)
	}
	if _, err := batches.New(p.q).GetBatch(context.Background(), bid); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("batch %s after DeleteBatch: %v, want not found", bid, err)
	}
	if _, err := os.Stat(filepath.Join(p.stack.WorkRoot, bid)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("batch %s deleted, but its directory remains (%v)", bid, err)
	}
}
