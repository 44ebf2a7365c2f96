package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
)

// sqliteURI is the data source of a database file, its path escaped (a
// URI filename ends at '?' or '#').
func sqliteURI(path string, query url.Values) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: query.Encode()}).String(), nil
}

// backupInventory copies the recorder's SQLite database with SQLite's
// online backup, which reads a consistent copy while the recorder keeps
// it open, then checks the copy's integrity.
func backupInventory(ctx context.Context, src, dest string) (pages int, err error) {
	if _, err := os.Stat(src); err != nil {
		return 0, fmt.Errorf("inventory: %w", err)
	}
	srcURI, err := sqliteURI(src, url.Values{"_pragma": {"busy_timeout(10000)"}})
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return 0, err
	}
	db, err := sql.Open("sqlite", srcURI)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("inventory %s: %w", src, err)
	}
	defer conn.Close()
	destAbs, err := filepath.Abs(dest)
	if err != nil {
		return 0, err
	}
	err = conn.Raw(func(dc any) error {
		b, ok := dc.(interface {
			NewBackup(string) (*sqlite.Backup, error)
		})
		if !ok {
			return errors.New("the SQLite driver has no online backup")
		}
		bk, err := b.NewBackup(destAbs)
		if err != nil {
			return err
		}
		// One step copies every page under one read transaction: a
		// consistent copy whatever the recorder commits meanwhile.
		if _, err := bk.Step(-1); err != nil {
			return errors.Join(err, bk.Finish())
		}
		pages = bk.PageCount()
		return bk.Finish()
	})
	if err != nil {
		return 0, fmt.Errorf("inventory %s: online backup: %w", src, err)
	}
	return pages, checkInventory(ctx, dest)
}

// checkInventory runs SQLite's integrity check on a copy.
func checkInventory(ctx context.Context, path string) error {
	uri, err := sqliteURI(path, url.Values{"mode": {"ro"}})
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return err
	}
	defer db.Close()
	var result string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&result); err != nil {
		return fmt.Errorf("inventory copy %s: %w", path, err)
	}
	if result != "ok" {
		return fmt.Errorf("inventory copy %s: integrity check: %s", path, result)
	}
	return nil
}
