// Command singlepass is the single-pass limit of bringing a file to disk
// checked: one GET of a URL, its bytes written once to a file and digested
// with SHA-256 on the way, the file synced. It prints the bytes, the
// seconds and the digest ("<bytes> <seconds> <sha256>"): the least any
// pipeline does with a deposit's file, which make bench sets the
// pipeline's big-file rate against (BENCHMARKS.md).
//
//	singlepass -url http://127.0.0.1:port/big.bin -out /work/limit.bin
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	url := flag.String("url", "", "the file to fetch")
	out := flag.String("out", "", "where to write it")
	flag.Parse()
	if *url == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: singlepass -url URL -out FILE")
		os.Exit(2)
	}
	n, took, sum, err := fetch(*url, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "singlepass:", err)
		os.Exit(1)
	}
	fmt.Printf("%d %.3f %s\n", n, took.Seconds(), sum)
}

func fetch(url, out string) (int64, time.Duration, string, error) {
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(out)
	if err != nil {
		return 0, 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	// The downloader's buffer size: one read from the network, one write.
	n, err := io.CopyBuffer(io.MultiWriter(f, h), resp.Body, make([]byte, 256<<10))
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return 0, 0, "", err
	}
	return n, time.Since(start), hex.EncodeToString(h.Sum(nil)), nil
}
