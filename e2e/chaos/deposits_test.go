package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ingestq/ingestq/e2e/leftovers"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// profileName is the collection profile every batch is submitted under.
const profileName = "chaos"

// depositBatch is one batch as deposited: its manifest of manifests, and
// for each object its local identifier and files.
type depositBatch struct {
	index   int
	uuid    string // the submitter's batch uuid: a submission retried after a crash is not a second batch
	path    string // URL path of the batch manifest
	objects []depositObject
}

type depositObject struct {
	localID string
	files   map[string]string // file name → hex SHA-256
}

// writeDeposits writes set.jobs objects of one to three files each, in
// set.batches manifests of manifests numbered from first, under dir as
// served from base.
func writeDeposits(dir, base string, set settings, first int, rng *rand.Rand) ([]*depositBatch, error) {
	var out []*depositBatch
	for b := first; b < first+set.batches; b++ {
		n := set.jobs / set.batches
		if b == first+set.batches-1 {
			n = set.jobs - n*(set.batches-1)
		}
		db := &depositBatch{index: b, uuid: fmt.Sprintf("chaos-%d-batch-%d", set.seed, b), path: fmt.Sprintf("/batches/b%d.checkm", b)}
		var rows []checkm.Entry
		for i := range n {
			obj := depositObject{localID: fmt.Sprintf("chaos-%d-%d-%03d", set.seed, b, i), files: map[string]string{}}
			objDir := fmt.Sprintf("objects/b%d/o%03d", b, i)
			var entries []checkm.Entry
			for f := range 1 + rng.IntN(3) {
				name := fmt.Sprintf("part-%d.txt", f)
				body := fileBody(rng, obj.localID, name)
				if err := writeFile(filepath.Join(dir, objDir, name), body); err != nil {
					return nil, err
				}
				sum := sha256.Sum256(body)
				obj.files[name] = hex.EncodeToString(sum[:])
				entries = append(entries, checkm.Entry{FileURL: base + "/" + path.Join(objDir, name), HashAlgorithm: "sha256",
					HashValue: obj.files[name], FileSize: int64(len(body)), FileName: name})
			}
			manifest := objDir + ".checkm"
			if err := writeManifest(filepath.Join(dir, manifest), checkm.ProfileObject,
				[]string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}, entries); err != nil {
				return nil, err
			}
			rows = append(rows, checkm.Entry{FileURL: base + "/" + manifest, FileSize: -1, FileName: path.Base(manifest),
				LocalIdentifier: obj.localID, Title: "chaos object " + obj.localID})
			db.objects = append(db.objects, obj)
		}
		if err := writeManifest(filepath.Join(dir, strings.TrimPrefix(db.path, "/")), checkm.ProfileBatch,
			[]string{"nfo:fileUrl", "nfo:fileName", "mrt:localIdentifier", "mrt:title"}, rows); err != nil {
			return nil, err
		}
		out = append(out, db)
	}
	return out, nil
}

// fileBody is a file of 1 KiB to 2 MiB (as many of each order of
// magnitude) that names its object, so that two objects never share
// content. The larger ones keep the downloader and the processor (digests,
// copies, fsyncs) at work long enough for kills to interrupt them.
func fileBody(rng *rand.Rand, localID, name string) []byte {
	line := fmt.Sprintf("%s %s %016x\n", localID, name, rng.Uint64())
	size := int(math.Exp2(10 + 11*rng.Float64()))
	return []byte(strings.Repeat(line, size/len(line)+1)[:size])
}

func writeFile(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

func writeManifest(p, profile string, fields []string, entries []checkm.Entry) error {
	var b strings.Builder
	if err := checkm.Write(&b, profile, fields, entries); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return writeFile(p, []byte(b.String()))
}

func writeProfile(dir string) error {
	return writeFile(filepath.Join(dir, profileName+".yaml"), []byte("name: "+profileName+
		"\ncollection: chaos\nowner: ark:/99999/fk4owner\nnotification_addresses: [depositor@example.org]\n"))
}

// submitAll submits the batches one after the other, set.spacing apart.
// The last one waits for the faults (faultsMade: the one-off faults, and
// every service killed), unless every job submitted before it has ended:
// those faults need work going on, and then they get it. (The probes of a
// hung ZooKeeper server, after them in r.batches, are its own.)
func (r *run) submitAll(ctx context.Context, faultsMade <-chan struct{}, mon *monitor) error {
	submitted := 0
	for i, b := range r.batches[:r.set.batches] {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(r.set.spacing):
			}
		}
		if i == r.set.batches-1 {
			for mon.ended() < submitted {
				select {
				case <-ctx.Done():
					return nil
				case <-faultsMade:
				case <-mon.changed():
					continue
				}
				break
			}
		}
		bid, err := r.submit(ctx, b)
		if err != nil {
			return fmt.Errorf("submitting batch %d: %w", i, err)
		}
		r.mu.Lock()
		r.bids[i] = bid
		r.mu.Unlock()
		submitted += len(b.objects)
		r.logf("submitted batch %d as %s (%d jobs)", i, bid, len(b.objects))
	}
	return nil
}

// submit submits one batch to whichever batcher answers. A submission whose
// answer was lost (its batcher killed) may have been written: its uuid then
// finds it, so retrying never makes a second batch.
func (r *run) submit(ctx context.Context, b *depositBatch) (string, error) {
	req := &v1.SubmitRequest{Submitter: "chaos", Profile: profileName, PayloadUrl: r.deposits.URL + b.path,
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, BatchUuid: b.uuid,
		Metadata: &v1.Metadata{Who: "Chaos", What: fmt.Sprintf("chaos batch %d", b.index), When: "2026"}}
	for attempt := 0; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := r.batchers[attempt%len(r.batchers)].Submit(callCtx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return resp.GetBatchId(), nil
		case codes.AlreadyExists:
			bid, err := batches.New(r.q).BatchByUUID(ctx, b.uuid)
			if err != nil {
				return "", fmt.Errorf("batch uuid %s was submitted, but: %w", b.uuid, err)
			}
			return bid, nil
		case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitAllCompleted waits until every batch has been submitted and ended
// Completed. A failed job or batch ends the wait at once: under faults
// nothing may fail. So does a pipeline stuck for stuckAfter.
func (r *run) waitAllCompleted(ctx context.Context, mon *monitor) error {
	for {
		done, err := r.allCompleted(ctx)
		if err != nil || done {
			return err
		}
		if stuck := mon.stuckFor(); stuck > stuckAfter {
			counts, _ := admin.New(r.q).Jobs.Counts(ctx)
			return fmt.Errorf("stuck: no job changed state for %s; jobs by state %v; locks held: %v; logs in %s",
				stuck.Round(time.Second), countNames(counts), leftovers.Locks(ctx, r.q), r.stack.LogDir)
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, ctx.Err()) {
				return cause
			}
			counts, _ := admin.New(r.q).Jobs.Counts(context.Background())
			return fmt.Errorf("not every job completed in time (%w): jobs by state %v; logs in %s", ctx.Err(), countNames(counts), r.stack.LogDir)
		case <-mon.changed():
		case <-time.After(2 * time.Second):
		}
	}
}

// allCompleted reports whether every batch is Completed, and fails on a
// Failed job or batch.
func (r *run) allCompleted(ctx context.Context) (bool, error) {
	counts, err := admin.New(r.q).Jobs.Counts(ctx)
	if err != nil {
		return false, nil // the ensemble may be electing: look again
	}
	if counts[queue.Failed] > 0 {
		return false, r.failedJobs(ctx)
	}
	r.mu.Lock()
	bids := make([]string, 0, len(r.bids))
	for _, bid := range r.bids {
		bids = append(bids, bid)
	}
	r.mu.Unlock()
	if len(bids) < len(r.batches) {
		return false, nil
	}
	for _, bid := range bids {
		b, err := batches.New(r.q).GetBatch(ctx, bid)
		if err != nil {
			return false, nil
		}
		switch b.GetStatus().GetStatus() {
		case queue.BatchCompleted:
		case queue.BatchFailed:
			return false, fmt.Errorf("batch %s failed: %s", bid, b.GetStatus().GetMessage())
		default:
			return false, nil
		}
	}
	return true, nil
}

// failedJobs names the failed jobs and their messages.
func (r *run) failedJobs(ctx context.Context) error {
	jobs, _, err := jobs.NewReader(r.q).ListJobs(ctx, jobs.JobFilter{State: queue.Failed, PageSize: 1000})
	if err != nil {
		return fmt.Errorf("a job failed; listing failed jobs: %w", err)
	}
	var errs []error
	for _, j := range jobs {
		errs = append(errs, fmt.Errorf("job %s failed (last successful state %s): %s", j.GetId(),
			queue.JobStateName(j.GetStatus().GetLastSuccessfulStatus()), j.GetStatus().GetMessage()))
	}
	return fmt.Errorf("under faults no job may fail (logs in %s): %w", r.stack.LogDir, errors.Join(errs...))
}

// countNames spells job counts by state name.
func countNames(counts map[queue.JobState]int) map[string]int {
	out := map[string]int{}
	for s, n := range counts {
		if n > 0 {
			out[queue.JobStateName(s)] = n
		}
	}
	return out
}
