package digest

import (
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDigestLargeFile digests a 256 MiB file read from the page
// cache, as processing reads a file the downloader has just written: with
// SHA-256 alone (a declared SHA-256), and with MD5 too (a declared MD5).
func BenchmarkDigestLargeFile(b *testing.B) {
	const size = 256 << 20
	path := filepath.Join(b.TempDir(), "f")
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.CopyN(out, rand.NewChaCha8([32]byte{3}), size); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	for _, algs := range [][]string{{"sha256"}, {"sha256", "md5"}} {
		b.Run(algs[len(algs)-1], func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := Copy(context.Background(), io.Discard, f, algs...); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
