package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
)

// BenchmarkDownloadLargeFile streams a multi-GB file from a loopback server
// (which generates it on the fly, storing nothing) through the fetcher to
// disk, with its SHA-256 checked and its partial file saved every 64 MiB
// (INGESTQ_DOWNLOAD_SYNC_BYTES's default), and reports the throughput and
// the peak heap: the heap must stay flat however large the file.
// INGESTQ_BENCH_DOWNLOAD_BYTES sets the size (default 2 GiB).
func BenchmarkDownloadLargeFile(b *testing.B) {
	size := int64(2 << 30)
	if v := os.Getenv("INGESTQ_BENCH_DOWNLOAD_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("INGESTQ_BENCH_DOWNLOAD_BYTES=%q is not a positive number of bytes", v)
		}
		size = n
	}
	block := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(block)
	// content writes the file: the block over and over, cut at size.
	content := func(write func([]byte) error) error {
		for left := size; left > 0; {
			n := min(left, int64(len(block)))
			if err := write(block[:n]); err != nil {
				return err
			}
			left -= n
		}
		return nil
	}
	h := sha256.New()
	content(func(p []byte) error { h.Write(p); return nil })
	digest := hex.EncodeToString(h.Sum(nil))

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		content(func(p []byte) error { _, err := w.Write(p); return err })
	}))
	defer srv.Close()
	dir := b.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	fe := &Fetcher{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 1, Backoff: time.Second, Max: time.Second, Jitter: 0.5}, MaxBytes: size, TempDir: ".download", SyncEvery: 64 << 20}

	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	runtime.GC()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		res, err := fe.Fetch(context.Background(), root, "big.bin", File{URL: srv.URL + "/big.bin", Size: size, HashAlgorithm: "sha256", HashValue: digest})
		if err != nil || res.Size != size {
			b.Fatalf("Fetch: %+v, %v", res, err)
		}
		b.StopTimer()
		os.Remove(filepath.Join(dir, "big.bin"))
		b.StartTimer()
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(size)/(1<<30), "file-GiB")
}

// BenchmarkDownloadSmallFiles fetches 1 KiB files, each to a name of its
// own, with their SHA-256 checked: what a deposit of many small files
// costs the fetcher per file (no sync, no state saved: they are smaller
// than the sync interval).
func BenchmarkDownloadSmallFiles(b *testing.B) {
	body := make([]byte, 1024)
	rand.NewChaCha8([32]byte{2}).Read(body)
	sum := sha256.Sum256(body)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	root, err := os.OpenRoot(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	fe := &Fetcher{Client: fetch.New(fetch.Policy{Allow: fetch.LoopbackRanges()}), Retry: retry.Policy{Attempts: 1},
		MaxBytes: 1 << 20, TempDir: ".download", SyncEvery: 64 << 20}
	f := File{URL: srv.URL + "/f", Size: int64(len(body)), HashAlgorithm: "sha256", HashValue: hex.EncodeToString(sum[:])}
	i := 0
	for b.Loop() {
		i++
		if _, err := fe.Fetch(context.Background(), root, "producer/f"+strconv.Itoa(i), f); err != nil {
			b.Fatal(err)
		}
	}
}
