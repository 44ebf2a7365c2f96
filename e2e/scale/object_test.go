// Package scale tests deposits past the sizes most tests use, end to end:
// the seven services as processes on a ZooKeeper of their own, a depositor
// on loopback, the store (a folder, a bucket of a real S3-compatible
// server, or a node of the stand-in for Merritt's storage service) read
// back and checked.
package scale

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/bench"
	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/testenv"
	_ "modernc.org/sqlite"
)

var binDir string // the services, built once by TestMain

func TestMain(m *testing.M) {
	testenv.Isolate()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := testenv.MkdirTemp("ingestq-scale-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = filepath.Join(dir, "bin")
	if err := stack.Build(context.Background(), filepath.Join("..", ".."), binDir); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	return m.Run()
}

// objectFiles is the size of the object the tests send through: 10,000
// files by default (INGESTQ_TEST_OBJECT_FILES); `make bench` sends 100,000
// through the same code (files_100k_s).
func objectFiles(t *testing.T) int {
	n := 10_000
	if v := os.Getenv("INGESTQ_TEST_OBJECT_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("INGESTQ_TEST_OBJECT_FILES=%q: want a positive number", v)
		}
	}
	return n
}

// The bounds an object of many files must keep in every service and in
// ZooKeeper, whatever its number of files.
const (
	maxRSSMB = 256
	// maxNodeBytes bounds each node of the job and its batch: a few
	// kilobytes of status, history and references, nothing per file
	// (10,000 files would list ~1.5 MB).
	maxNodeBytes = 16 << 10
)

// TestAnObjectOfManyFilesIsStoredLocallyWithNothingPerFileInZooKeeper: an
// object manifest of 10,000 files goes through every stage into the local
// store; the stored version holds every file, each with the digest its
// manifest declared (read back and checked), the inventory records each,
// no node of the job or its batch grew with the files, and no service's
// memory did either.
func TestAnObjectOfManyFilesIsStoredLocallyWithNothingPerFileInZooKeeper(t *testing.T) {
	sendObject(t, storeLocal)
}

// TestAnObjectOfManyFilesIsStoredInS3: the same object into a bucket of a
// real S3-compatible server.
func TestAnObjectOfManyFilesIsStoredInS3(t *testing.T) {
	sendObject(t, storeS3)
}

// TestAnObjectOfManyFilesIsStoredInMerrittsStorageService: the same object
// into a node of the stand-in for Merritt's storage service, which fetches
// each file from the processor; the inventory records each file as the
// service's manifest of the object gives it.
func TestAnObjectOfManyFilesIsStoredInMerrittsStorageService(t *testing.T) {
	sendObject(t, storeMerritt)
}

type storeKind int

const (
	storeLocal storeKind = iota
	storeS3
	storeMerritt
)

func sendObject(t *testing.T, kind storeKind) {
	n := objectFiles(t)
	const size = 256
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env := map[string]string{"INGESTQ_LOG_LEVEL": "info"}
	if kind == storeMerritt {
		const node = 9501
		svc, err := merritttest.Run(node)
		if err != nil {
			t.Fatal(err)
		}
		defer svc.Close()
		maps.Copy(env, map[string]string{"INGESTQ_STORE": "merritt", "INGESTQ_MERRITT_STORAGE_URL": svc.URL,
			"INGESTQ_MERRITT_NODE": strconv.Itoa(node)})
	}
	res, err := bench.Object(ctx, bench.ObjectOptions{Dir: t.TempDir(), BinDir: binDir, Files: n, FileBytes: size, S3: kind == storeS3,
		Env: env})
	if res != nil {
		defer res.Stop(context.WithoutCancel(ctx))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files of %d bytes in %s; steps %v; peak RSS MB %v", n, size, res.Elapsed.Round(time.Millisecond), res.Steps, res.PeakRSSMB)

	for service, mb := range res.PeakRSSMB {
		if mb > maxRSSMB {
			t.Errorf("%s: peak resident memory %.0f MB, over %d MB", service, mb, maxRSSMB)
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range res.NodeBytes {
			if !yield(k) {
				return
			}
		}
	}) {
		if b := res.NodeBytes[name]; b > maxNodeBytes {
			t.Errorf("ZooKeeper node %s held %d bytes, over %d", name, b, maxNodeBytes)
		}
	}
	if res.NodeBytes["job/"+queue.NodeManifest] == 0 {
		t.Errorf("the job's manifest node was never seen (nodes %v)", res.NodeBytes)
	}

	db, err := sql.Open("sqlite", res.Stack.InventoryReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recorded := map[string]string{}
	rows, err := db.QueryContext(ctx, `SELECT name, digest FROM files WHERE name LIKE 'producer/%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, digest string
		if err := rows.Scan(&name, &digest); err != nil {
			t.Fatal(err)
		}
		recorded[name] = digest
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	wrong := 0
	for i := range n {
		name, body := bench.ObjectFile(i, size)
		sum := sha256.Sum256(body)
		if got := recorded["producer/"+name]; got != hex.EncodeToString(sum[:]) {
			if wrong++; wrong <= 3 {
				t.Errorf("the inventory records producer/%s with digest %q, want %s", name, got, hex.EncodeToString(sum[:]))
			}
		}
	}
	if wrong > 0 || len(recorded) != n {
		t.Fatalf("the inventory records %d producer files, %d of the %d deposited not as deposited", len(recorded), wrong, n)
	}
	if kind == storeLocal {
		// The console's job page says where the list is, and how long.
		page := consolePage(t, ctx, res.Stack.ConsoleAddr(), "/jobs/"+res.JobID)
		if want := fmt.Sprintf("%d files, listed in the working folder's <code>file-list.json</code>", n); !strings.Contains(page, want) {
			t.Errorf("the console's job page does not say %q", want)
		}
	}
	if kind == storeMerritt {
		// The stored version is the service's to keep and check.
		return
	}

	c, err := bench.Connect(ctx, res.Stack.Servers, res.Stack.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data, _, err := c.Nodes().Get(ctx, c.Paths().Job(res.JobID).Node(queue.NodeInventory))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := queue.DecodeInventory("inventory", data)
	if err != nil {
		t.Fatal(err)
	}
	var reader fixity.Reader
	if kind == storeS3 {
		want := "s3://"
		if !strings.HasPrefix(inv.GetManifestUrl(), want) {
			t.Fatalf("stored version %s; want it in the bucket", inv.GetManifestUrl())
		}
		client, err := s3store.Client(ctx, res.S3.Settings("unused"))
		if err != nil {
			t.Fatal(err)
		}
		reader.S3 = client
	}
	m, err := reader.Manifest(ctx, inv.GetManifestUrl())
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{}
	for _, e := range m.Entries {
		stored[e.FileName] = e.HashValue
	}
	missing := 0
	for i := range n {
		name, body := bench.ObjectFile(i, size)
		sum := sha256.Sum256(body)
		if got, ok := stored["producer/"+name]; !ok || got != hex.EncodeToString(sum[:]) {
			if missing++; missing <= 3 {
				t.Errorf("producer/%s: stored with digest %q (listed: %v), want %s", name, got, ok, hex.EncodeToString(sum[:]))
			}
		}
	}
	if missing > 0 || len(m.Entries) < n {
		t.Fatalf("%d of %d files not stored as deposited; the version lists %d files", missing, n, len(m.Entries))
	}
	rep, err := reader.Verify(ctx, inv.GetManifestUrl())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Files != len(m.Entries) || len(rep.Mismatches) > 0 {
		t.Errorf("read back: %d files, %d mismatches (first: %v)", rep.Files, len(rep.Mismatches), rep.Mismatches[:min(3, len(rep.Mismatches))])
	}
}

// consolePage is a page of the console, as a browser gets it.
func consolePage(t *testing.T, ctx context.Context, addr, path string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", path, resp.Status, err)
	}
	return string(body)
}
