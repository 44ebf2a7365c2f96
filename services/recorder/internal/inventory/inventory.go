// Package inventory is the built-in recorder's inventory: an embedded
// SQLite database (modernc.org/sqlite, pure Go) of objects, their versions
// and each version's files.
package inventory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

const schema = `
CREATE TABLE IF NOT EXISTS objects (
	ark       TEXT PRIMARY KEY,
	local_ids TEXT NOT NULL DEFAULT '[]', -- JSON array, every local id ever given
	created   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
	ark          TEXT NOT NULL REFERENCES objects(ark),
	number       INTEGER NOT NULL,
	manifest_url TEXT NOT NULL,
	mode         TEXT NOT NULL,
	jid          TEXT NOT NULL,
	recorded_at  TEXT NOT NULL,
	UNIQUE (ark, number),
	UNIQUE (ark, jid)
);
CREATE TABLE IF NOT EXISTS files (
	ark        TEXT NOT NULL,
	version    INTEGER NOT NULL,
	name       TEXT NOT NULL,
	size       INTEGER NOT NULL,
	digest_alg TEXT NOT NULL,
	digest     TEXT NOT NULL,
	UNIQUE (ark, version, name),
	FOREIGN KEY (ark, version) REFERENCES versions(ark, number)
);
`

// DB is an open inventory.
type DB struct {
	db *sql.DB
}

// Open opens (creating if needed) the inventory at path.
func Open(ctx context.Context, path string) (*DB, error) {
	// Transactions begin IMMEDIATE, taking the write lock first: every
	// transaction here writes, and one that read first could not wait for
	// the lock once another process (a second recorder replica on the same
	// file) had written since its read; SQLite fails it at once with
	// SQLITE_BUSY, whatever the busy timeout.
	dsn := (&url.URL{Scheme: "file", Opaque: path, RawQuery: url.Values{"_pragma": {
		"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(FULL)"},
		"_txlock": {"immediate"}}.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening inventory %s: %w", path, err)
	}
	// One writer at a time is SQLite's rule; one connection keeps it simple.
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening inventory %s: %w", path, err)
	}
	return &DB{db: db}, nil
}

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// Version is one stored version of an object, as recorded.
type Version struct {
	ARK         string
	Number      int // 0: the next number after the object's last version
	ManifestURL string
	Mode        string
	JobID       string
	LocalIDs    []string
	Files       []File
}

// File is one file of a version.
type File struct {
	Name      string
	Size      int64
	DigestAlg string
	Digest    string
}

// ErrConflict: the version number is recorded already for another job.
var ErrConflict = errors.New("version recorded by another job")

// Record records a version and its files in one transaction. Recording the
// same job's version again changes nothing and returns its number.
func (d *DB) Record(ctx context.Context, v Version) (int, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("recording %s: %w", v.ARK, err)
	}
	defer tx.Rollback()
	n, err := record(ctx, tx, v)
	if err != nil {
		return 0, fmt.Errorf("recording %s: %w", v.ARK, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("recording %s: %w", v.ARK, err)
	}
	return n, nil
}

func record(ctx context.Context, tx *sql.Tx, v Version) (int, error) {
	now := time.Now().UTC().Format(time.RFC3339)
	var raw string
	err := tx.QueryRowContext(ctx, `SELECT local_ids FROM objects WHERE ark = ?`, v.ARK).Scan(&raw)
	var ids []string
	switch {
	case errors.Is(err, sql.ErrNoRows):
		raw = "[]"
	case err != nil:
		return 0, err
	}
	if err := json.Unmarshal([]byte(raw), &ids); err != nil {
		return 0, fmt.Errorf("objects.local_ids of %s: %w", v.ARK, err)
	}
	for _, id := range v.LocalIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	merged, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO objects (ark, local_ids, created) VALUES (?, ?, ?)
		ON CONFLICT (ark) DO UPDATE SET local_ids = excluded.local_ids`, v.ARK, string(merged), now); err != nil {
		return 0, err
	}

	var number int
	err = tx.QueryRowContext(ctx, `SELECT number FROM versions WHERE ark = ? AND jid = ?`, v.ARK, v.JobID).Scan(&number)
	switch {
	case err == nil:
		return number, nil // this job's version is recorded already
	case !errors.Is(err, sql.ErrNoRows):
		return 0, err
	}
	number = v.Number
	if number == 0 {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(number), 0) + 1 FROM versions WHERE ark = ?`, v.ARK).Scan(&number); err != nil {
			return 0, err
		}
	}
	var other string
	err = tx.QueryRowContext(ctx, `SELECT jid FROM versions WHERE ark = ? AND number = ?`, v.ARK, number).Scan(&other)
	if err == nil {
		return 0, fmt.Errorf("version %d: %w %s", number, ErrConflict, other)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO versions (ark, number, manifest_url, mode, jid, recorded_at) VALUES (?, ?, ?, ?, ?, ?)`,
		v.ARK, number, v.ManifestURL, v.Mode, v.JobID, now); err != nil {
		return 0, err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO files (ark, version, name, size, digest_alg, digest) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	for _, f := range v.Files {
		if _, err := stmt.ExecContext(ctx, v.ARK, number, f.Name, f.Size, f.DigestAlg, f.Digest); err != nil {
			return 0, fmt.Errorf("file %s: %w", f.Name, err)
		}
	}
	return number, nil
}
