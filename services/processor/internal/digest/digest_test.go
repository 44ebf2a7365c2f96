package digest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyComputesEachAlgorithmOnce(t *testing.T) {
	var out bytes.Buffer
	n, sums, err := Copy(context.Background(), &out, strings.NewReader("a"), "sha256", "md5", "", "sha256")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"sha256": "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb",
		"md5":    "0cc175b9c0f1b6a831c399e269772661",
	}
	if n != 1 || out.String() != "a" || len(sums) != 2 || sums["sha256"] != want["sha256"] || sums["md5"] != want["md5"] {
		t.Errorf("Copy = %d, %v, copied %q; want 1, %v", n, sums, out.String(), want)
	}
}

func TestCopyRefusesUnknownAlgorithms(t *testing.T) {
	_, _, err := Copy(context.Background(), &bytes.Buffer{}, strings.NewReader("a"), "crc32")
	if err == nil || !strings.Contains(err.Error(), `"crc32"`) {
		t.Errorf("Copy with crc32: %v", err)
	}
}

func TestCopyStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("job lost"))
	_, _, err := Copy(ctx, &bytes.Buffer{}, strings.NewReader("a"), "sha256")
	if err == nil || err.Error() != "job lost" {
		t.Errorf("Copy after cancel: %v, want the cause", err)
	}
}

func TestCopyDigestsFilesSmallerAndLargerThanItsBuffer(t *testing.T) {
	for _, size := range []int{0, 1, 511, 512, 513, 4096, 32<<10 - 1, 32 << 10, 100 << 10} {
		data := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		n, sums, err := Copy(context.Background(), &out, f, "sha256")
		f.Close()
		want := sha256.Sum256(data)
		if err != nil || n != int64(size) || !bytes.Equal(out.Bytes(), data) || sums["sha256"] != hex.EncodeToString(want[:]) {
			t.Errorf("Copy of a %d-byte file = %d, %v, %v; want %d bytes copied and digested", size, n, sums, err, size)
		}
	}
}
