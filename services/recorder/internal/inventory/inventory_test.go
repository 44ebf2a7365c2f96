package inventory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func open(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), filepath.Join(t.TempDir(), "inventory.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db *DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func version(ark, jid string, number int, files ...File) Version {
	return Version{ARK: ark, Number: number, ManifestURL: "file:///store/" + jid, Mode: "add", JobID: jid, LocalIDs: []string{"loc-" + jid}, Files: files}
}

func TestRecordWritesObjectVersionAndFilesOnceWhateverTheRetries(t *testing.T) {
	db := open(t)
	ctx := context.Background()
	v := version("ark:/99999/fk4x", "jid0000000001", 1,
		File{Name: "producer/a.txt", Size: 5, DigestAlg: "sha256", Digest: "aa"},
		File{Name: "system/mrt-erc.txt", Size: 9, DigestAlg: "sha256", Digest: "bb"})
	for i := 0; i < 3; i++ {
		n, err := db.Record(ctx, v)
		if err != nil || n != 1 {
			t.Fatalf("Record #%d = %d, %v; want 1", i+1, n, err)
		}
	}
	if got := count(t, db, `SELECT COUNT(*) FROM objects`); got != 1 {
		t.Errorf("%d objects", got)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM versions WHERE ark = ? AND number = 1 AND jid = ? AND manifest_url = ? AND mode = 'add'`,
		v.ARK, v.JobID, v.ManifestURL); got != 1 {
		t.Errorf("%d matching version rows, want 1", got)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM files WHERE ark = ? AND version = 1`, v.ARK); got != 2 {
		t.Errorf("%d file rows, want 2", got)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM files WHERE name = 'producer/a.txt' AND size = 5 AND digest_alg = 'sha256' AND digest = 'aa'`); got != 1 {
		t.Errorf("producer/a.txt row missing or wrong")
	}
}

func TestRecordNumbersVersionsAndMergesLocalIDs(t *testing.T) {
	db := open(t)
	ctx := context.Background()
	const ark = "ark:/99999/fk4x"
	if _, err := db.Record(ctx, version(ark, "jid0000000001", 1)); err != nil {
		t.Fatal(err)
	}
	// A storage that does not say the number: the next one is taken.
	n, err := db.Record(ctx, version(ark, "jid0000000002", 0))
	if err != nil || n != 2 {
		t.Fatalf("unnumbered version recorded as %d, %v; want 2", n, err)
	}
	var ids string
	db.db.QueryRow(`SELECT local_ids FROM objects WHERE ark = ?`, ark).Scan(&ids)
	if ids != `["loc-jid0000000001","loc-jid0000000002"]` {
		t.Errorf("local ids %s", ids)
	}
	_, err = db.Record(ctx, version(ark, "jid0000000003", 2))
	if !errors.Is(err, ErrConflict) {
		t.Errorf("a second job's version 2: %v, want ErrConflict", err)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM versions WHERE jid = 'jid0000000003'`); got != 0 {
		t.Errorf("the conflicting version left %d rows", got)
	}
}

func TestOpenAppliesThePragmas(t *testing.T) {
	db := open(t)
	var mode string
	if err := db.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", mode, err)
	}
	if got := count(t, db, `PRAGMA foreign_keys`); got != 1 {
		t.Errorf("foreign_keys = %d, want 1", got)
	}
}

// The path is a file name, not a URL: a folder named with what a URL or
// SQLite's URI filenames give a meaning to ('?', '#', '%', a space) holds
// the inventory, and nothing is made beside it.
func TestOpenTakesAPathWhoseFolderHoldsURLCharacters(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a b#c%20d?e")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "inventory.db")
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("no inventory at %s: %v", path, err)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %q, want only the inventory's folder", base, names)
	}
}

// TestTwoRecordersSharingTheDatabaseRecordAtOnceWithoutBusyErrors: two
// recorder replicas open the one inventory file and record at the same
// time. Each waits its turn to write; none fails with SQLITE_BUSY (a
// transaction that read first and then wrote could not wait: another
// writer had moved the database on since its read).
func TestTwoRecordersSharingTheDatabaseRecordAtOnceWithoutBusyErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.db")
	ctx := context.Background()
	const perRecorder = 100
	errs := make(chan error, 2*perRecorder)
	var wg sync.WaitGroup
	for r := range 2 {
		db, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		wg.Go(func() {
			for i := range perRecorder {
				jid := fmt.Sprintf("jid%d%09d", r, i)
				v := version(fmt.Sprintf("ark:/99999/fk4r%d%d", r, i), jid, 0,
					File{Name: "producer/a.txt", Size: 1, DigestAlg: "sha256", Digest: "aa"})
				if _, err := db.Record(ctx, v); err != nil {
					errs <- fmt.Errorf("recorder %d, %s: %w", r, jid, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	check, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	if got := count(t, check, `SELECT COUNT(*) FROM versions`); got != 2*perRecorder {
		t.Errorf("%d version rows, want %d", got, 2*perRecorder)
	}
}

func TestVersionsRecordedAtOnceShareTransactionsAndAFailureLeavesTheOthers(t *testing.T) {
	db := open(t)
	ctx := context.Background()
	const ark = "ark:/99999/fk4shared"
	if _, err := db.Record(ctx, version(ark, "jid0000000001", 1)); err != nil {
		t.Fatal(err)
	}
	before := db.commits.Load()
	const n = 40
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v := version(fmt.Sprintf("ark:/99999/fk4s%d", i), fmt.Sprintf("jid1%09d", i), 0,
				File{Name: "producer/a.txt", Size: 1, DigestAlg: "sha256", Digest: "aa"})
			if i == n/2 {
				v = version(ark, "jid0000000099", 1) // version 1 is another job's
			}
			_, errs[i] = db.Record(ctx, v)
		})
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == n/2 && !errors.Is(err, ErrConflict):
			t.Errorf("the conflicting version: %v, want ErrConflict", err)
		case i != n/2 && err != nil:
			t.Errorf("version %d: %v", i, err)
		}
	}
	if got := count(t, db, `SELECT COUNT(*) FROM versions`); got != n {
		t.Errorf("%d version rows, want %d (the first, and all but the conflicting one)", got, n)
	}
	if got := count(t, db, `SELECT COUNT(*) FROM files`); got != n-1 {
		t.Errorf("%d file rows, want %d", got, n-1)
	}
	if commits := db.commits.Load() - before; commits >= n/2 {
		t.Errorf("%d transactions for %d versions recorded at once; want them to share", commits, n)
	}
}
