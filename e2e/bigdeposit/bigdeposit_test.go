// Package bigdeposit tests big files end to end: the seven services as
// processes on a real ZooKeeper, fetching files of 64 MiB from a
// depositor's server on loopback that cuts its answers, ignores Range,
// changes a file between attempts, or serves slowly while a downloader is
// killed mid-file. What each test proves is counted at the server: the
// bytes it sent, answer by answer. (The full sizes, 4 GiB cut every 400
// MiB, run in make bench: BenchmarkBigFile.)
package bigdeposit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/bigfile"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/testenv"
	"github.com/ingestq/ingestq/shared/waittest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

const (
	adminToken = "bigdeposit-admin-token"
	fileSize   = 64 << 20
	syncEvery  = 8 << 20
)

// env is the running pipeline the tests share.
type env struct {
	stack   *stack.Stack
	files   *bigfile.Server
	batches v1.BatchServiceClient
	admin   v1.AdminServiceClient
}

var shared *env

func TestMain(m *testing.M) {
	testenv.Isolate()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	dir, err := testenv.MkdirTemp("ingestq-bigdeposit-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e, err := start(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bigdeposit:", err)
		return 1
	}
	shared = e
	code := m.Run()
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := e.stack.Stop(stopCtx); err != nil {
		fmt.Fprintln(os.Stderr, "bigdeposit: stopping:", err)
		code = 1
	}
	e.files.Close()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "bigdeposit: logs and data kept in", dir)
	}
	return code
}

func start(ctx context.Context, dir string) (*env, error) {
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, filepath.Join("..", ".."), bin); err != nil {
		return nil, err
	}
	files, err := bigfile.Start("127.0.0.1")
	if err != nil {
		return nil, err
	}
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(profiles, "big.yaml"),
		[]byte("name: big\ncollection: big\nowner: ark:/99999/fk4owner\nnotification_addresses: [big@example.org]\n"), 0o644); err != nil {
		return nil, err
	}
	s, err := stack.Start(ctx, stack.Options{Dir: dir, BinDir: bin, ProfilesDir: profiles, AdminToken: adminToken,
		Env: map[string]string{
			"INGESTQ_DOWNLOAD_SYNC_BYTES": fmt.Sprint(syncEvery),
			"INGESTQ_PROGRESS_INTERVAL":   "300ms",
			"INGESTQ_DOWNLOAD_BACKOFF":    "100ms",
			// A killed downloader's job is free again sooner.
			"INGESTQ_ZK_SESSION_TIMEOUT": "4s",
		}})
	if err != nil {
		files.Close()
		return nil, err
	}
	conn, err := grpc.NewClient(s.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &env{stack: s, files: files, batches: v1.NewBatchServiceClient(conn), admin: v1.NewAdminServiceClient(conn)}, nil
}

func adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
}

// deposit serves f as <name>/big.bin with an object manifest declaring
// declared's size and SHA-256, and submits it; it returns the batch's id
// and the file's path on the server.
func deposit(t *testing.T, name string, f, declared bigfile.File) (string, string) {
	t.Helper()
	path := "/" + name + "/big.bin"
	shared.files.Put(path, f)
	manifest := fmt.Sprintf("#%%checkm_0.7\n#%%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n"+
		"%s%s | sha256 | %s | %d | | big.bin\n#%%eof\n", shared.files.URL, path, declared.SHA256(), declared.Size)
	shared.files.PutDoc("/"+name+"/object.checkm", []byte(manifest))
	resp, err := shared.batches.Submit(context.Background(), &v1.SubmitRequest{Submitter: "bigdeposit", Profile: "big",
		PayloadUrl: shared.files.URL + "/" + name + "/object.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
		Metadata: &v1.Metadata{Who: "Big", What: name, When: "2026"}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetBatchId(), path
}

// ended waits for the batch's one job to end and returns it.
func ended(t *testing.T, bid string) *v1.Job {
	t.Helper()
	var job *v1.Job
	waittest.Until(t, 4*time.Minute, func() error {
		resp, err := shared.admin.ListJobs(adminCtx(context.Background()), &v1.ListJobsRequest{BatchId: bid})
		if err != nil {
			t.Fatal(err)
		}
		if js := resp.GetJobs(); len(js) == 1 && !queue.IsLive(js[0].GetStatus().GetStatus()) {
			job = js[0]
			return nil
		}
		return fmt.Errorf("batch %s's job never ended (logs in %s)", bid, shared.stack.LogDir)
	})
	return job
}

// storedWhole fails the test unless job j completed with big.bin stored
// as f.
func storedWhole(t *testing.T, j *v1.Job, f bigfile.File) {
	t.Helper()
	if j.GetStatus().GetStatus() != queue.Completed {
		t.Fatalf("job %s: %s: %s", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()), j.GetStatus().GetMessage())
	}
	if got := storedDigest(t, j); got != f.SHA256() {
		t.Errorf("stored big.bin has sha256 %s, want %s", got, f.SHA256())
	}
}

// storedDigest is the SHA-256 of big.bin as the local store holds it.
func storedDigest(t *testing.T, j *v1.Job) string {
	t.Helper()
	p, err := checkm.FilePath(j.GetInventory().GetManifestUrl())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(filepath.Dir(p), "producer", "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// downloaded is the message of the job's move from Downloading: what its
// history says of the download.
func downloaded(j *v1.Job) string {
	for _, h := range j.GetStatus().GetHistory() {
		if h.GetFrom() == queue.Downloading {
			return h.GetMessage()
		}
	}
	return ""
}

func answersFor(path string) []bigfile.Answer {
	var out []bigfile.Answer
	for _, a := range shared.files.Answers() {
		if a.Path == path {
			out = append(out, a)
		}
	}
	return out
}

func sentFor(path string) int64 {
	var n int64
	for _, a := range answersFor(path) {
		n += a.Sent
	}
	return n
}

func TestAFileCutEvery8MiBArrivesWithAtMostAFewPercentMoreBytesSent(t *testing.T) {
	f := bigfile.File{Size: fileSize, Seed: 1}
	path := "/cut/big.bin"
	shared.files.CutEvery(path, 8<<20+12345)
	bid, _ := deposit(t, "cut", f, f)
	j := ended(t, bid)
	storedWhole(t, j, f)
	sent := sentFor(path)
	if ratio := float64(sent) / fileSize; ratio > 1.05 {
		t.Errorf("the server sent %d bytes for a file of %d: %.3f of it, more than 1.05", sent, fileSize, ratio)
	}
	if msg := downloaded(j); !strings.Contains(msg, "big.bin resumed 7 times where a transfer stopped") {
		t.Errorf("the history's download message %q does not name the 7 resumes", msg)
	}
	for i, a := range answersFor(path)[1:] {
		if want := fmt.Sprintf("bytes=%d-", int64(i+1)*(8<<20+12345)); a.Range != want || a.IfRange != f.ETag() || a.Status != 206 {
			t.Errorf("answer %d: %+v; want Range %s, If-Range %s, 206", i+2, a, want, f.ETag())
		}
	}
}

func TestAServerThatIgnoresRangeStillDeliversTheFileFetchedAgainWhole(t *testing.T) {
	f := bigfile.File{Size: fileSize, Seed: 2}
	path := "/ignores/big.bin"
	shared.files.CutOnce(path, 20<<20)
	shared.files.IgnoreRange(path, true)
	bid, _ := deposit(t, "ignores", f, f)
	j := ended(t, bid)
	storedWhole(t, j, f)
	answers := answersFor(path)
	if len(answers) != 2 || answers[1].Range != "bytes=20971520-" || answers[1].Status != 200 || answers[1].Sent != fileSize {
		t.Errorf("answers %+v; want a cut one, then a ranged request answered whole", answers)
	}
	if msg := downloaded(j); !strings.Contains(msg, "big.bin started again from its first byte: the server ignored the range from byte 20971520 (HTTP 200)") {
		t.Errorf("the history's download message %q does not say the file was started again and why", msg)
	}
}

func TestAFileChangedBetweenAttemptsIsFetchedAgainWholeAndItsDigestChecked(t *testing.T) {
	old, changed := bigfile.File{Size: fileSize, Seed: 3}, bigfile.File{Size: fileSize, Seed: 4}
	why := fmt.Sprintf("the file changed on the server (now %s, was %s)", changed.ETag(), old.ETag())
	t.Run("the declared digest is the new file's: it completes", func(t *testing.T) {
		shared.files.CutOnceThen("/changed/big.bin", 20<<20, changed)
		bid, path := deposit(t, "changed", old, changed)
		j := ended(t, bid)
		if j.GetStatus().GetStatus() != queue.Completed {
			t.Fatalf("job %s: %s: %s", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()), j.GetStatus().GetMessage())
		}
		if got := storedDigest(t, j); got != changed.SHA256() {
			t.Errorf("stored big.bin has sha256 %s, want the new file's %s", got, changed.SHA256())
		}
		answers := answersFor(path)
		if len(answers) != 2 || answers[1].IfRange != old.ETag() || answers[1].Status != 200 || answers[1].Sent != fileSize {
			t.Errorf("answers %+v; want the resume refused by If-Range, the new file sent whole", answers)
		}
		if msg := downloaded(j); !strings.Contains(msg, "big.bin started again from its first byte: "+why) {
			t.Errorf("the history's download message %q does not say %q", msg, why)
		}
	})
	t.Run("the declared digest is the old file's: it fails saying why", func(t *testing.T) {
		shared.files.CutOnceThen("/changed-back/big.bin", 20<<20, changed)
		bid, _ := deposit(t, "changed-back", old, old)
		j := ended(t, bid)
		msg := j.GetStatus().GetMessage()
		if j.GetStatus().GetStatus() != queue.Failed || !strings.Contains(msg, "sha256 expected "+old.SHA256()+", got "+changed.SHA256()) ||
			!strings.Contains(msg, "(it was started again from its first byte: "+why+")") {
			t.Errorf("job %s: %s: %q; want it failed naming both digests and the change", j.GetId(), queue.JobStateName(j.GetStatus().GetStatus()), msg)
		}
	})
}

// savedState reads the offset of the saved state of the one partial file
// under the work root's job folders.
func savedState(t *testing.T) (string, int64) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(shared.stack.WorkRoot, "*", "*", ".download", "*.state"))
	if len(paths) != 1 {
		return "", 0
	}
	data, err := os.ReadFile(paths[0])
	if err != nil {
		return "", 0
	}
	var st struct {
		Offset int64 `json:"offset"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("%s: %v", paths[0], err)
	}
	return paths[0], st.Offset
}

func TestADownloaderKilledMidFileResumesFromItsLastSyncPoint(t *testing.T) {
	f := bigfile.File{Size: fileSize, Seed: 5}
	path := "/killed/big.bin"
	shared.files.SetRate(12 << 20)
	defer shared.files.SetRate(0)
	bid, _ := deposit(t, "killed", f, f)

	// While it downloads, GetJob shows it moving.
	var seen *v1.Progress
	var state string
	waittest.Until(t, 2*time.Minute, func() error {
		if resp, err := shared.admin.ListJobs(adminCtx(context.Background()), &v1.ListJobsRequest{BatchId: bid}); err == nil && len(resp.GetJobs()) == 1 {
			if p := resp.GetJobs()[0].GetProgress(); p.GetBytesPerSecond() > 0 && p.GetBytesDone() > 0 {
				seen = p
			}
		}
		if p, off := savedState(t); off >= 24<<20 {
			state = p
		}
		if state == "" || seen == nil {
			return fmt.Errorf("no progress %v, or no state synced past 24 MiB %q, in time", seen, state)
		}
		return nil
	})
	if seen.GetBytesExpected() != fileSize || seen.GetPhase() != "downloading" || seen.GetRemaining() == nil {
		t.Errorf("progress while downloading: %v", seen)
	}

	downloader := shared.stack.Procs("downloader")[0]
	downloader.Kill()
	_, synced := savedState(t)
	before := answersFor(path)
	// The replica cannot have synced more than the server sent (it may be
	// killed right at a sync point: as much).
	if len(before) != 1 || before[0].Sent < synced {
		t.Fatalf("before the kill: answers %+v, synced %d", before, synced)
	}
	restartCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := downloader.Restart(restartCtx); err != nil {
		t.Fatal(err)
	}
	j := ended(t, bid)
	storedWhole(t, j, f)
	answers := answersFor(path)
	want := fmt.Sprintf("bytes=%d-", synced)
	if len(answers) != 2 || answers[1].Range != want || answers[1].IfRange != f.ETag() || answers[1].Status != 206 || answers[1].Sent != fileSize-synced {
		t.Fatalf("answers %+v; want the second to ask %s and get the %d bytes after the last sync point", answers, want, fileSize-synced)
	}
	if msg := downloaded(j); !strings.Contains(msg, fmt.Sprintf("big.bin continued from byte %d of an earlier attempt's partial file", synced)) {
		t.Errorf("the history's download message %q does not say where it continued", msg)
	}
	t.Logf("killed after %d bytes were sent, %d synced: the survivor asked for %d more (%.2f of the file in all)",
		answers[0].Sent, synced, answers[1].Sent, float64(answers[0].Sent+answers[1].Sent)/fileSize)
}
