package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
)

// BenchmarkStoreSmallVersion stores versions of one 1 KB producer file and
// two system files, 16 at once (the processor's default concurrency): the
// processor's file system cost per job.
func BenchmarkStoreSmallVersion(b *testing.B) {
	files := map[string]string{"producer/file.txt": string(make([]byte, 1024)),
		"system/mrt-erc.txt": "erc:\nwho: x\n", "system/mrt-dc.xml": "<dc/>\n"}
	manifests := make([]string, 64)
	for i := range manifests {
		manifests[i] = stage(b, files)
	}
	s := Local{Root: b.TempDir()}
	var n atomic.Int64
	b.SetParallelism(8) // 16 on two cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := s.Store(context.Background(), Request{ARK: fmt.Sprintf("ark:/99999/b%d", i), JobID: fmt.Sprintf("jid%010d", i),
				Mode: "add", ManifestURL: manifests[i%int64(len(manifests))]})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkS3StoreLargeFile stores one large file into a real gateway
// (INGESTQ_BENCH_FILE_MIB, default 64) and reports the peak Go heap while
// it goes up: with multipart uploads streamed from the file it stays near
// PartSize×(Concurrency+1), whatever the file's size.
func BenchmarkS3StoreLargeFile(b *testing.B) {
	mib := 64
	if v := os.Getenv("INGESTQ_BENCH_FILE_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("INGESTQ_BENCH_FILE_MIB=%q", v)
		}
		mib = n
	}
	srv := s3test.Start(b)
	bucket := srv.CreateBucket(b)
	c, err := s3store.Client(context.Background(), srv.Settings(bucket))
	if err != nil {
		b.Fatal(err)
	}
	s := S3{Client: c, Bucket: bucket}
	manifest := stageLarge(b, int64(mib)<<20)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Store(context.Background(), Request{ARK: fmt.Sprintf("ark:/99999/big%d", i), JobID: fmt.Sprintf("jid%010d", i),
			Mode: "add", ManifestURL: manifest}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(done)
	<-sampled
	b.SetBytes(int64(mib) << 20)
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(base.HeapInuse)/(1<<20), "heap-before-MiB")
}

// stageLarge writes one file of size bytes, a MiB at a time, and its
// storage manifest.
func stageLarge(b *testing.B, size int64) string {
	dir := b.TempDir()
	p := filepath.Join(dir, "big.bin")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	chunk := make([]byte, 1<<20)
	for written := int64(0); written < size; written += int64(len(chunk)) {
		for i := range chunk {
			chunk[i] = byte(written>>20) ^ byte(i)
		}
		if _, err := io.MultiWriter(f, h).Write(chunk[:min(int64(len(chunk)), size-written)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	m := filepath.Join(dir, "storage-manifest.checkm")
	if err := WriteManifest(m, []checkm.Entry{{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256",
		HashValue: hex.EncodeToString(h.Sum(nil)), FileSize: size, FileName: "producer/big.bin"}}); err != nil {
		b.Fatal(err)
	}
	return checkm.FileURL(m)
}

// BenchmarkDeposits stores versions of one producer file (1 MiB and 16
// MiB) and two system files into the local store and into S3 (a real
// gateway on loopback), 4 at once, and reports deposits per hour: what
// the storing step alone allows, in one run for both stores.
func BenchmarkDeposits(b *testing.B) {
	srv := s3test.Start(b)
	for _, size := range []int{1 << 20, 16 << 20} {
		dir := b.TempDir()
		manifest := stageSized(b, dir, size)
		for _, kind := range []string{"local", "s3"} {
			b.Run(fmt.Sprintf("%s/%dMiB", kind, size>>20), func(b *testing.B) {
				var s Storage = Local{Root: b.TempDir()}
				if kind == "s3" {
					bucket := srv.CreateBucket(b)
					c, err := s3store.Client(context.Background(), srv.Settings(bucket))
					if err != nil {
						b.Fatal(err)
					}
					s = S3{Client: c, Bucket: bucket}
				}
				var n atomic.Int64
				b.SetParallelism(2) // 4 on two cores
				start := time.Now()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := n.Add(1)
						if _, err := s.Store(context.Background(), Request{ARK: fmt.Sprintf("ark:/99999/d%d", i), JobID: fmt.Sprintf("jid%010d", i),
							Mode: "add", ManifestURL: manifest}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(n.Load())/time.Since(start).Hours(), "deposits/h")
			})
		}
	}
}

// stageSized writes a producer file of size bytes and two system files
// into dir, and their storage manifest.
func stageSized(b *testing.B, dir string, size int) string {
	content := map[string][]byte{"producer/file.bin": make([]byte, size), "system/mrt-erc.txt": []byte("erc:\nwho: x\n"), "system/mrt-dc.xml": []byte("<dc/>\n")}
	for i := range content["producer/file.bin"] {
		content["producer/file.bin"][i] = byte(i * 31)
	}
	var entries []checkm.Entry
	for _, name := range []string{"producer/file.bin", "system/mrt-dc.xml", "system/mrt-erc.txt"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, content[name], 0o644); err != nil {
			b.Fatal(err)
		}
		sum := sha256.Sum256(content[name])
		entries = append(entries, checkm.Entry{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256", HashValue: hex.EncodeToString(sum[:]),
			FileSize: int64(len(content[name])), FileName: name})
	}
	m := filepath.Join(dir, "storage-manifest.checkm")
	if err := WriteManifest(m, entries); err != nil {
		b.Fatal(err)
	}
	return checkm.FileURL(m)
}
