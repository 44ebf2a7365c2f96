package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// BenchmarkBigDeposits is `make bench`'s run of deposits past the sizes of
// the others, each through the seven services as processes (a ZooKeeper of
// their own), from submission to Completed, ending with one BENCH line:
//
//   - files_100k_s: one object of INGESTQ_BENCH_OBJECT_FILES (100,000)
//     files of 256 bytes into the local store, and the peak resident
//     memory of each service meanwhile (rss_mb_<service>, rss_mb_max);
//     files_100k_s3_s the same object into S3 (versitygw on this machine);
//   - zip64_s: a zip container of INGESTQ_BENCH_ZIP64_BYTES (4.5 GiB), one
//     stored file that size and one after it (zip64 sizes and offsets);
//   - pax_s: a tar.gz container holding one file of INGESTQ_BENCH_PAX_BYTES
//     (8.5 GiB), its size in a pax header (the archive is small: the
//     bytes repeat).
func BenchmarkBigDeposits(b *testing.B) {
	dir := b.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "bin")
	if err := stack.Build(ctx, filepath.Join("..", ".."), bin); err != nil {
		b.Fatal(err)
	}
	files := envInt("INGESTQ_BENCH_OBJECT_FILES", 100_000)
	for range b.N {
		var line []string
		object := func(name string, s3 bool) *Result {
			res, err := Object(ctx, ObjectOptions{Dir: filepath.Join(dir, name), BinDir: bin, Files: files, FileBytes: 256, S3: s3})
			if res != nil {
				res.Stop(context.WithoutCancel(ctx))
			}
			if err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(filepath.Join(dir, name))
			return res
		}
		local := object("object", false)
		fmt.Printf("object:    %d files of 256 bytes, local store: %.1f s (%.0f files/s)\n", files, local.Elapsed.Seconds(), float64(files)/local.Elapsed.Seconds())
		fmt.Printf("           by state: %s\n", steps(local.Steps))
		var rss []string
		most := 0.0
		for _, service := range stack.Services {
			mb := local.PeakRSSMB[service]
			most = max(most, mb)
			rss = append(rss, fmt.Sprintf("%s %.0f", service, mb))
			line = append(line, fmt.Sprintf("rss_mb_%s=%.0f", service, mb))
		}
		fmt.Printf("           peak RSS MB: %s\n", strings.Join(rss, ", "))
		fmt.Printf("           largest ZooKeeper node of the job or its batch: %s\n", largestNode(local.NodeBytes))
		line = append([]string{fmt.Sprintf("files_100k_s=%.1f", local.Elapsed.Seconds()), fmt.Sprintf("rss_mb_max=%.0f", most)}, line...)

		s3 := object("object-s3", true)
		fmt.Printf("           into S3: %.1f s (%.0f files/s); by state: %s\n", s3.Elapsed.Seconds(), float64(files)/s3.Elapsed.Seconds(), steps(s3.Steps))
		line = append(line, fmt.Sprintf("files_100k_s3_s=%.1f", s3.Elapsed.Seconds()))

		container := func(name, archive string, write func(path string) error) *Result {
			run := filepath.Join(dir, name)
			deposits := filepath.Join(run, "deposits")
			if err := os.MkdirAll(deposits, 0o755); err != nil {
				b.Fatal(err)
			}
			if err := write(filepath.Join(deposits, archive)); err != nil {
				b.Fatal(err)
			}
			res, err := Deposit(ctx, DepositOptions{Dir: run, BinDir: bin, Deposits: deposits, Payload: archive,
				PayloadType: v1.PayloadType_PAYLOAD_TYPE_CONTAINER})
			if res != nil {
				res.Stop(context.WithoutCancel(ctx))
			}
			if err != nil {
				b.Fatal(err)
			}
			os.RemoveAll(run)
			return res
		}
		zipBytes := int64(envInt("INGESTQ_BENCH_ZIP64_BYTES", 4608<<20))
		z := container("zip64", "big.zip", func(path string) error { return WriteBigZip(path, "big.bin", zipBytes) })
		fmt.Printf("zip64:     a zip of one %.1f GiB file and one after it: %.1f s (%.0f MiB/s); by state: %s\n",
			float64(zipBytes)/(1<<30), z.Elapsed.Seconds(), float64(zipBytes)/(1<<20)/z.Elapsed.Seconds(), steps(z.Steps))
		paxBytes := int64(envInt("INGESTQ_BENCH_PAX_BYTES", 8704<<20))
		p := container("pax", "big.tar.gz", func(path string) error { return WriteBigTarGz(path, "big.bin", paxBytes) })
		fmt.Printf("pax:       a tar.gz of one %.1f GiB file: %.1f s (%.0f MiB/s); by state: %s\n",
			float64(paxBytes)/(1<<30), p.Elapsed.Seconds(), float64(paxBytes)/(1<<20)/p.Elapsed.Seconds(), steps(p.Steps))
		line = append(line, fmt.Sprintf("zip64_s=%.1f", z.Elapsed.Seconds()), fmt.Sprintf("pax_s=%.1f", p.Elapsed.Seconds()))
		fmt.Printf("BENCH %s\n", strings.Join(line, " "))
	}
}

// steps lists the time a job spent in each state.
func steps(ss []Step) string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s %.1f s", strings.ToLower(s.State), s.Took.Seconds()))
	}
	return strings.Join(out, ", ")
}

// largestNode names the largest node seen and its size.
func largestNode(sizes map[string]int) string {
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return sizes[b] - sizes[a] })
	if len(names) == 0 {
		return "none seen"
	}
	return fmt.Sprintf("%s, %d bytes", names[0], sizes[names[0]])
}
