package main

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// TestTheInventoryBackupIsConsistentWhileTheRecorderCommits: a writer
// commits two rows a transaction throughout the backup; the copy passes
// SQLite's integrity check and holds whole transactions only (an even
// count), at least those committed before it started.
func TestTheInventoryBackupIsConsistentWhileTheRecorderCommits(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "inventory.db")
	uri, err := sqliteURI(src, url.Values{"_pragma": {"busy_timeout(10000)", "journal_mode(WAL)"}})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE versions (ark TEXT, n INTEGER, blob TEXT)"); err != nil {
		t.Fatal(err)
	}
	commit := func() error {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		for range 2 {
			if _, err := tx.Exec("INSERT INTO versions VALUES ('ark:/99999/fk4x', 1, printf('%.2000c', 'x'))"); err != nil {
				tx.Rollback()
				return err
			}
		}
		return tx.Commit()
	}
	for range 500 {
		if err := commit(); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() {
		for !stop.Load() {
			if err := commit(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	dest := filepath.Join(t.TempDir(), "backup", "inventory.db")
	pages, err := backupInventory(ctx, src, dest)
	stop.Store(true)
	if werr := <-done; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if pages == 0 {
		t.Error("the backup copied no page")
	}
	copyURI, _ := sqliteURI(dest, url.Values{"mode": {"ro"}})
	cdb, err := sql.Open("sqlite", copyURI)
	if err != nil {
		t.Fatal(err)
	}
	defer cdb.Close()
	var n int
	if err := cdb.QueryRow("SELECT count(*) FROM versions").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < 1000 || n%2 != 0 {
		t.Errorf("the copy holds %d rows: want at least the 1000 committed before it, in whole transactions of 2", n)
	}
}

func TestAnInventoryThatIsNotThereIsAnError(t *testing.T) {
	if _, err := backupInventory(context.Background(), filepath.Join(t.TempDir(), "none.db"), filepath.Join(t.TempDir(), "x.db")); err == nil {
		t.Error("backed up a database that does not exist")
	}
}
