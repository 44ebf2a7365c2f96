// Package digest computes the digests checkm manifests carry (md5, sha1,
// sha256, sha512) while a file is read or copied.
package digest

import (
	"context"
	"encoding/hex"
	"hash"
	"io"
	"io/fs"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/ctxio"
)

// Copy copies r to w and returns the bytes copied and the lower-case hex
// digest of each algorithm in algs ("" entries are skipped). It stops with
// ctx's error when ctx ends.
func Copy(ctx context.Context, w io.Writer, r io.Reader, algs ...string) (int64, map[string]string, error) {
	hashes := map[string]hash.Hash{}
	writers := []io.Writer{w}
	for _, alg := range algs {
		if alg == "" || hashes[alg] != nil {
			continue
		}
		h, err := checkm.NewHash(alg)
		if err != nil {
			return 0, nil, err
		}
		hashes[alg] = h
		writers = append(writers, h)
	}
	n, err := io.CopyBuffer(io.MultiWriter(writers...), ctxio.Reader(ctx, r), make([]byte, bufferSize(r)))
	if err != nil {
		return n, nil, err
	}
	sums := make(map[string]string, len(hashes))
	for alg, h := range hashes {
		sums[alg] = hex.EncodeToString(h.Sum(nil))
	}
	return n, sums, nil
}

// bufferSize is io.Copy's 32 KiB, or less for a smaller file: most files
// digested are small (system files, manifests), and a buffer allocated and
// cleared per copy was a measurable share of the processor's CPU.
func bufferSize(r io.Reader) int {
	const most, least = 32 << 10, 512
	if f, ok := r.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() < most {
			return max(int(fi.Size()), least)
		}
	}
	return most
}
