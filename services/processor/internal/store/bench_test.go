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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

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
// the storing step alone allows, in one run for both stores. Beside them
// the AWS SDK alone uploads the same three files to the same gateway, 4
// deposits at once, as fast as it can (each file in one PutObject from the
// open file; a large one also in parts, by the SDK's transfer manager,
// the faster of the two counting): the rate S3 is measured against
// (s3_sdk_ratio). The stores take turns, in rounds of
// INGESTQ_BENCH_DEPOSITS deposits each (default 40 of 1 MiB, 12 of 16
// MiB), three rounds, so that a machine whose load changes meanwhile
// weighs on each alike.
func BenchmarkDeposits(b *testing.B) {
	srv := s3test.Start(b)
	var bench []string // the machine-readable figures, printed last
	for _, size := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			manifest, files := stageSized(b, b.TempDir(), size)
			var n atomic.Int64 // numbers the deposits, across stores
			local := Local{Root: b.TempDir()}
			bucket := srv.CreateBucket(b)
			c, err := s3store.Client(context.Background(), srv.Settings(bucket))
			if err != nil {
				b.Fatal(err)
			}
			s3s := S3{Client: c, Bucket: bucket}
			viaStore := func(s Storage) func(context.Context) error {
				return func(ctx context.Context) error {
					i := n.Add(1)
					_, err := s.Store(ctx, Request{ARK: fmt.Sprintf("ark:/99999/d%d", i), JobID: fmt.Sprintf("jid%010d", i),
						Mode: "add", ManifestURL: manifest})
					return err
				}
			}
			stores := map[string]func(context.Context) error{"local": viaStore(local), "s3": viaStore(s3s),
				"sdk-put": sdkUploads(b, srv, files, false, &n)}
			kinds := []string{"local", "s3", "sdk-put"}
			if int64(size) >= DefaultPartSize {
				stores["sdk-parts"] = sdkUploads(b, srv, files, true, &n)
				kinds = append(kinds, "sdk-parts")
			}
			per := envInt("INGESTQ_BENCH_DEPOSITS", map[int]int{1 << 20: 40, 16 << 20: 12}[size])
			took := map[string]time.Duration{}
			b.ResetTimer()
			for range b.N {
				for range 3 {
					for _, kind := range kinds {
						d, err := depositsAtOnce(stores[kind], per, 4)
						if err != nil {
							b.Fatalf("%s: %v", kind, err)
						}
						took[kind] += d
					}
				}
			}
			rate := func(kind string) float64 {
				if took[kind] == 0 {
					return 0
				}
				return float64(3*b.N*per) / took[kind].Hours()
			}
			sdk := max(rate("sdk-put"), rate("sdk-parts"))
			for _, kind := range kinds {
				b.ReportMetric(rate(kind), kind+"_deposits/h")
			}
			b.ReportMetric(rate("s3")/sdk, "s3_sdk_ratio")
			fmt.Printf("s3, %d MiB: %.0f deposits/h = %.2f of the SDK's own %.0f (local store %.0f)\n",
				size>>20, rate("s3"), rate("s3")/sdk, sdk, rate("local"))
			bench = append(bench, fmt.Sprintf("s3_deposits_per_h_%dmib=%.0f s3_sdk_ratio_%dmib=%.2f", size>>20, rate("s3"), size>>20, rate("s3")/sdk))
		})
	}
	fmt.Println("BENCH " + strings.Join(bench, " "))
}

// depositsAtOnce makes n deposits, at most at once at a time, and returns
// how long they took.
func depositsAtOnce(deposit func(context.Context) error, n, at int) (time.Duration, error) {
	start := time.Now()
	errs := make(chan error, n)
	sem := make(chan struct{}, at)
	for range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- deposit(context.Background())
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// sdkUploads is a deposit as the AWS SDK alone makes it, for
// BenchmarkDeposits to measure against: each of files (path → name in the
// version) uploaded from its open file by a client with the SDK's
// defaults, into a bucket of its own, in one PutObject, or with parts by
// the transfer manager, in parts of DefaultPartSize, DefaultConcurrency at
// once. n numbers the deposits.
func sdkUploads(b *testing.B, srv *s3test.Server, files map[string]string, parts bool, n *atomic.Int64) func(context.Context) error {
	bucket := srv.CreateBucket(b)
	c := s3.New(s3.Options{Region: srv.Region, BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.Access, srv.Secret, "")})
	tm := transfermanager.New(c, func(o *transfermanager.Options) {
		o.PartSizeBytes = DefaultPartSize
		o.MultipartUploadThreshold = DefaultPartSize
		o.Concurrency = DefaultConcurrency
	})
	return func(ctx context.Context) error {
		i := n.Add(1)
		for path, name := range files {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			key := aws.String(fmt.Sprintf("d%d/v1/%s", i, name))
			if parts && fi.Size() >= DefaultPartSize {
				_, err = tm.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(bucket), Key: key, Body: f})
			} else {
				_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: key, Body: f, ContentLength: aws.Int64(fi.Size())})
			}
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// stageSized writes a producer file of size bytes and two system files
// into dir, and their storage manifest; files maps each file's path to
// its name in the version.
func stageSized(b *testing.B, dir string, size int) (manifest string, files map[string]string) {
	files = map[string]string{}
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
		files[p] = name
	}
	m := filepath.Join(dir, "storage-manifest.checkm")
	if err := WriteManifest(m, entries); err != nil {
		b.Fatal(err)
	}
	return checkm.FileURL(m), files
}
