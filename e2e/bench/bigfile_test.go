package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/bigfile"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkBigFile is make bench's big-file figures, in one run on one
// machine:
//
//   - big_file_mib_per_s: one file of INGESTQ_BENCH_BIG_FILE_BYTES (default
//     4 GiB) through the whole pipeline on the local store, from its
//     submission to Completed, served from loopback by a server that makes
//     it as it goes (package bigfile);
//   - the single-pass limit: the same bytes from the same server, written
//     to the same disk once and digested with SHA-256 on the way, synced
//     (e2e/cmd/singlepass), and big_file_ratio, the pipeline over it;
//   - resume_overhead: the bytes the server sent for the same file cut
//     every INGESTQ_BENCH_BIG_FILE_CUT (default 400 MiB), over the file's.
//
// INGESTQ_BENCH_PROFILE_DIR keeps a CPU profile of every service over the
// whole file's run, and prints where each service's went.
//
// go test -run '^$' -bench BigFile -benchtime 1x ./bench/
func BenchmarkBigFile(b *testing.B) {
	dir := b.TempDir()
	size := envInt64("INGESTQ_BENCH_BIG_FILE_BYTES", 4<<30)
	cut := envInt64("INGESTQ_BENCH_BIG_FILE_CUT", 400<<20)
	ctx, srv := startZooKeeper(b, dir, 60*time.Minute, "1g")
	bin := filepath.Join(dir, "bin")
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	must(stack.Build(ctx, filepath.Join("..", ".."), bin))
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "singlepass"), "../cmd/singlepass")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building singlepass: %v\n%s", err, out)
	}
	files, err := bigfile.Start("127.0.0.1")
	must(err)
	defer files.Close()
	f := bigfile.File{Size: size, Seed: 4242}
	files.Put("/limit/big.bin", f)
	files.Put("/whole/big.bin", f)
	files.Put("/cut/big.bin", f)
	files.CutEvery("/cut/big.bin", cut)

	run := filepath.Join(dir, "run")
	cpuProfiles := os.Getenv("INGESTQ_BENCH_PROFILE_DIR")
	profiles := filepath.Join(dir, "profiles")
	must(os.MkdirAll(profiles, 0o755))
	must(os.WriteFile(filepath.Join(profiles, "bench.yaml"),
		[]byte("name: bench\ncollection: bench\nnotification_addresses: [bench@example.org]\n"), 0o644))
	s, err := stack.Start(ctx, stack.Options{Dir: run, BinDir: bin, ProfilesDir: profiles, ZooKeeper: []string{srv.Addr},
		Root: root("bigfile"), Env: map[string]string{"INGESTQ_LOG_LEVEL": "warn", "INGESTQ_PPROF": strconv.FormatBool(cpuProfiles != "")}})
	must(err)
	defer s.Stop(context.WithoutCancel(ctx))
	conn, err := grpc.NewClient(s.Addr("batcher"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(err)
	defer conn.Close()
	batches, admin := v1.NewBatchServiceClient(conn), v1.NewAdminServiceClient(conn)

	for range b.N {
		// The limit, on the disk of the stack's working storage, its file
		// removed before the pipeline's run.
		out := filepath.Join(s.WorkRoot, "singlepass.bin")
		limitOut, err := exec.CommandContext(ctx, filepath.Join(bin, "singlepass"), "-url", files.URL+"/limit/big.bin", "-out", out).Output()
		must(err)
		must(os.Remove(out))
		var n int64
		var secs float64
		var sum string
		if _, err := fmt.Sscan(string(limitOut), &n, &secs, &sum); err != nil || n != size {
			b.Fatalf("singlepass printed %q (%v)", limitOut, err)
		}
		limit := float64(size) / (1 << 20) / secs

		profiled := make(chan error, 1)
		if cpuProfiles != "" {
			// Long enough for the whole run, however loaded the machine.
			go func() { profiled <- profileFor(ctx, s, cpuProfiles, int(3*secs)+10) }()
		}
		took, bid, err := bigFileRun(ctx, batches, files, "whole", size, sum, s.LogDir)
		must(err)
		if cpuProfiles != "" {
			must(<-profiled)
			fmt.Print(ProfileTop(ctx, cpuProfiles, bin, 15))
		}
		states, err := timeInStates(ctx, admin, bid)
		must(err)
		pipeline := float64(size) / (1 << 20) / took.Seconds()

		sentBefore := files.Sent()
		if _, _, err := bigFileRun(ctx, batches, files, "cut", size, sum, s.LogDir); err != nil {
			b.Fatal(err)
		}
		overhead := float64(files.Sent()-sentBefore) / float64(size)

		fmt.Printf("big file:  %.0f MiB/s end to end = %.2f of the single-pass limit, %.0f MiB/s (one file of %d MiB, submitted to Completed,\n"+
			"           local store; the limit: the same bytes from the same server written once and digested with SHA-256, synced)\n",
			pipeline, pipeline/limit, limit, size>>20)
		fmt.Printf("           time in each state: %s\n", states)
		fmt.Printf("resume:    the server sent %.3f of the file's bytes with every answer cut after %d MiB\n", overhead, cut>>20)
		fmt.Printf("BENCH big_file_mib_per_s=%.0f big_file_limit_mib_per_s=%.0f big_file_ratio=%.2f resume_overhead=%.3f\n",
			pipeline, limit, pipeline/limit, overhead)
	}
}

// bigFileRun submits an object manifest of the one file the server has at
// /<name>/big.bin, declaring its size and SHA-256, and returns how long it
// took from the submission to Completed, and the batch's id.
func bigFileRun(ctx context.Context, batches v1.BatchServiceClient, files *bigfile.Server, name string, size int64, sum, logs string) (time.Duration, string, error) {
	manifest := fmt.Sprintf("#%%checkm_0.7\n#%%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n"+
		"%s/%s/big.bin | sha256 | %s | %d | | big.bin\n#%%eof\n", files.URL, name, sum, size)
	files.PutDoc("/"+name+"/object.checkm", []byte(manifest))
	start := time.Now()
	resp, err := batches.Submit(ctx, &v1.SubmitRequest{Submitter: "bench", Profile: "bench",
		PayloadUrl: files.URL + "/" + name + "/object.checkm", PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST})
	if err != nil {
		return 0, "", err
	}
	if err := waitCompleted(ctx, batches, resp.GetBatchId(), 1, logs); err != nil {
		return 0, "", err
	}
	return time.Since(start), resp.GetBatchId(), nil
}

// timeInStates says how long the batch's one job spent in each state it
// went through, from its history: where the time of a big file goes.
func timeInStates(ctx context.Context, admin v1.AdminServiceClient, bid string) (string, error) {
	resp, err := admin.ListJobs(ctx, &v1.ListJobsRequest{BatchId: bid})
	if err != nil {
		return "", err
	}
	if len(resp.GetJobs()) != 1 {
		return "", fmt.Errorf("batch %s has %d jobs, want 1", bid, len(resp.GetJobs()))
	}
	var parts []string
	for _, h := range resp.GetJobs()[0].GetStatus().GetHistory() {
		if h.GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
			parts = append(parts, fmt.Sprintf("%s %.1f s", queue.JobStateName(h.GetFrom()), h.GetInState().AsDuration().Seconds()))
		}
	}
	return strings.Join(parts, ", "), nil
}

func envInt64(name string, def int64) int64 {
	if n, err := strconv.ParseInt(strings.TrimSpace(os.Getenv(name)), 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}
