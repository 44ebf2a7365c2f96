package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// examplesProfiles is the sample profile directory the repository ships.
func examplesProfiles(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "profiles"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_PROFILES_DIR", examplesProfiles(t))
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "batcher")
}

// runToExit runs the built batcher against the test ZooKeeper with env
// added, for a start that is meant to fail, and returns its output and exit.
func runToExit(t *testing.T, bin string, env ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(append(os.Environ(),
		"INGESTQ_ZK_SERVERS="+strings.Join(zktest.Servers(t), ","),
		"INGESTQ_ZK_ROOT="+zktest.Root(t),
		"INGESTQ_LISTEN="+servicetest.FreeAddr(t),
		"INGESTQ_METRICS_LISTEN=",
		"INGESTQ_PROFILES_DIR="+examplesProfiles(t),
		"INGESTQ_WORK_ROOT="+t.TempDir(),
	), env...)
	return cmd.CombinedOutput()
}

func TestBinaryRefusesUnusableSettingsSayingWhich(t *testing.T) {
	bin := servicetest.Build(t, ".")
	for _, tc := range []struct{ env, want string }{
		{"INGESTQ_MAX_QUEUED_JOBS=-1", "INGESTQ_MAX_QUEUED_JOBS -1: want 0 (no bound) or more"},
		{"INGESTQ_RETENTION=0s", "INGESTQ_RETENTION and INGESTQ_CLEANUP_INTERVAL must be positive"},
		{"INGESTQ_RECLAIM_GRACE=30s", "INGESTQ_RECLAIM_GRACE 30s: want 1m or more"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			out, err := runToExit(t, bin, "INGESTQ_ADMIN_TOKEN=t", tc.env)
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("exit %v, output:\n%s\nwant a failure saying %q", err, out, tc.want)
			}
		})
	}
}

// TestBuiltBatcherTurnsASubmissionIntoJobsAndReportsIt runs the built
// binary: a manifest of manifests submitted over gRPC becomes one job per
// row in ZooKeeper, the "batch queued" mail lands in the outbox, and once
// the jobs are driven to Completed the report does too.
func TestBuiltBatcherTurnsASubmissionIntoJobsAndReportsIt(t *testing.T) {
	bin := servicetest.Build(t, ".")
	dep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/batch.checkm" {
			http.NotFound(w, r)
			return
		}
		base := "http://" + r.Host
		io.WriteString(w, "#%checkm_0.7\n"+
			"#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest\n"+
			"#%fields | nfo:fileUrl | nfo:fileName | mrt:localIdentifier | mrt:title\n"+
			base+"/one.checkm | one.checkm | loc-1 | One\n"+
			base+"/two.checkm | two.checkm | loc-2 | Two\n"+
			"#%eof\n")
	}))
	defer dep.Close()

	zkRoot := zktest.Root(t)
	workRoot, outbox := t.TempDir(), t.TempDir()
	const token = "e2e-token"
	p := servicetest.Start(t, bin, zkRoot,
		"INGESTQ_CONSOLE_LISTEN=",
		"INGESTQ_ADMIN_TOKEN="+token,
		"INGESTQ_PROFILES_DIR="+examplesProfiles(t),
		"INGESTQ_WORK_ROOT="+workRoot,
		"INGESTQ_OUTBOX_DIR="+outbox,
		"INGESTQ_FETCH_ALLOW=loopback",
	)
	conn := servicetest.Dial(t, p.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := v1.NewBatchServiceClient(conn).Submit(ctx, &v1.SubmitRequest{
		Submitter: "jdoe", Profile: "demo", PayloadUrl: dep.URL + "/batch.checkm",
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
	})
	if err != nil {
		t.Fatal(err)
	}
	bid := resp.GetBatchId()

	q, err := session.Connect(ctx, session.Options{Servers: zktest.Servers(t), Root: zkRoot, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	waittest.Until(t, time.Until(deadline(t, ctx)), func() error {
		b, err := batches.New(q).GetBatch(ctx, bid)
		if err != nil {
			t.Fatal(err)
		}
		if b.GetStatus().GetStatus() != queue.BatchProcessing || b.GetLocked() {
			return fmt.Errorf("batch %s is %s (%s)", bid, b.GetStatus().GetStatus(), b.GetStatus().GetMessage())
		}
		return nil
	})
	listed, _, err := jobs.NewReader(q).ListJobs(ctx, jobs.JobFilter{Batch: bid})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].GetIdentifiers().GetLocalId()[0] != "loc-1" || listed[1].GetMetadata().GetWhat() != "Two" {
		t.Fatalf("jobs %v", listed)
	}
	for _, j := range listed {
		if c := j.GetConfiguration(); c.GetCollection() != "demo" || !strings.HasPrefix(c.GetWorkingDir(), filepath.Join(workRoot, bid)) ||
			c.GetTraceparent() == "" {
			t.Errorf("job %s configuration %v", j.GetId(), c)
		}
	}
	waitFile(t, ctx, filepath.Join(outbox, bid+"-queued.eml"))

	// The other stages, played here: every job completes.
	for _, j := range listed {
		for _, to := range []queue.JobState{queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing,
			queue.Storing, queue.Recording, queue.Notify, queue.Completed} {
			cl, err := jobs.New(q).ClaimJob(ctx, j.GetId())
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.Commit(ctx, jobs.Change{To: to}); err != nil {
				t.Fatal(err)
			}
		}
	}
	report := waitFile(t, ctx, filepath.Join(outbox, bid+"-report.eml"))
	if !strings.Contains(report, "completed: all 2 object(s) completed") {
		t.Errorf("report:\n%s", report)
	}
	admin := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	got, err := v1.NewAdminServiceClient(conn).GetBatch(admin, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchUuid{BatchUuid: resp.GetBatchUuid()}})
	waittest.True(t, time.Until(deadline(t, ctx)), "the batch Completed", func() bool {
		if err != nil || got.GetBatch().GetStatus().GetStatus() == queue.BatchCompleted {
			return true
		}
		got, err = v1.NewAdminServiceClient(conn).GetBatch(admin, &v1.GetBatchRequest{Batch: &v1.GetBatchRequest_BatchId{BatchId: bid}})
		return false
	})
	if err != nil || got.GetBatch().GetStatus().GetStatus() != queue.BatchCompleted {
		t.Errorf("batch after its report: %v %v", got, err)
	}
}

// waitFile waits for a file and returns its decoded text.
func waitFile(t *testing.T, ctx context.Context, path string) string {
	t.Helper()
	var data []byte
	waittest.Until(t, time.Until(deadline(t, ctx)), func() error {
		var err error
		data, err = os.ReadFile(path)
		return err
	})
	text, _ := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(data)))
	return string(text)
}

// deadline is ctx's deadline, which the test's waits keep to.
func deadline(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	d, ok := ctx.Deadline()
	if !ok {
		t.Fatal("the test's context has no deadline")
	}
	return d
}

// TestBuiltBatcherAnswersItsRetentionInTheAggregates runs the built
// binary with a retention of its own: GetAggregates answers it, and its
// daily counts go back as many days, which the console's collections page
// says ("the last 3 days").
func TestBuiltBatcherAnswersItsRetentionInTheAggregates(t *testing.T) {
	bin := servicetest.Build(t, ".")
	p := servicetest.Start(t, bin, zktest.Root(t),
		"INGESTQ_CONSOLE_LISTEN=",
		"INGESTQ_PROFILES_DIR="+examplesProfiles(t),
		"INGESTQ_WORK_ROOT="+t.TempDir(),
		"INGESTQ_RETENTION=72h",
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agg, err := v1.NewAdminServiceClient(servicetest.Dial(t, p.Addr)).GetAggregates(ctx, &v1.GetAggregatesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := agg.GetRetention().AsDuration(); got != 72*time.Hour || len(agg.GetDays()) != 3 {
		t.Errorf("GetAggregates: retention %v, %d days; want 72h and 3 days", agg.GetRetention(), len(agg.GetDays()))
	}
}
