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
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ingestq/ingestq/shared/retry"
	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"
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

// DB is an open inventory. Versions recorded at the same moment share one
// transaction, so one commit and one sync of the log (see Record).
type DB struct {
	db    *sql.DB
	stmts statements

	mu      sync.Mutex
	waiting []*pending // versions to write in the next transaction
	writing bool       // a writer goroutine is running
	commits atomic.Int64
}

// statements are the queries of Record, prepared once.
type statements struct {
	localIDs, upsertObject, versionOfJob, nextVersion, jobOfVersion, insertVersion, insertFile *sql.Stmt
}

func (st *statements) prepare(ctx context.Context, db *sql.DB) error {
	for _, q := range []struct {
		s   **sql.Stmt
		sql string
	}{
		{&st.localIDs, `SELECT local_ids FROM objects WHERE ark = ?`},
		{&st.upsertObject, `INSERT INTO objects (ark, local_ids, created) VALUES (?, ?, ?)
			ON CONFLICT (ark) DO UPDATE SET local_ids = excluded.local_ids`},
		{&st.versionOfJob, `SELECT number FROM versions WHERE ark = ? AND jid = ?`},
		{&st.nextVersion, `SELECT COALESCE(MAX(number), 0) + 1 FROM versions WHERE ark = ?`},
		{&st.jobOfVersion, `SELECT jid FROM versions WHERE ark = ? AND number = ?`},
		{&st.insertVersion, `INSERT INTO versions (ark, number, manifest_url, mode, jid, recorded_at) VALUES (?, ?, ?, ?, ?, ?)`},
		{&st.insertFile, `INSERT INTO files (ark, version, name, size, digest_alg, digest) VALUES (?, ?, ?, ?, ?, ?)`},
	} {
		var err error
		if *q.s, err = db.PrepareContext(ctx, q.sql); err != nil {
			return err
		}
	}
	return nil
}

// pending is a version waiting to be written, and what came of it.
type pending struct {
	v      Version
	number int
	err    error
	done   chan struct{}
}

// Open opens (creating if needed) the inventory at path. Replicas starting
// together open one new file at once, and SQLite answers some of them
// SQLITE_BUSY while another sets the file up (its schema, its WAL), without
// waiting out the busy timeout: such an open is tried again.
func Open(ctx context.Context, path string) (*DB, error) {
	var d *DB
	policy := retry.Policy{Attempts: 40, Backoff: 10 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5}
	_, err := policy.Do(ctx, isBusy, func(int) error {
		var err error
		d, err = openOnce(ctx, path)
		return err
	})
	return d, err
}

// isBusy says whether err is SQLite's SQLITE_BUSY, of any extended kind.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// DSN is the data source name of the inventory at path for the "sqlite"
// driver of database/sql, as Open opens it.
func DSN(path string) (string, error) {
	// The path goes in absolute (a URI's relative path would read as its
	// host) and escaped: SQLite decodes a URI filename's %XX and ends it at
	// '?' or '#', which a folder's name may hold.
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("inventory %s: %w", path, err)
	}
	// Transactions begin IMMEDIATE, taking the write lock first: every
	// transaction here writes, and one that read first could not wait for
	// the lock once another process (a second recorder replica on the same
	// file) had written since its read; SQLite fails it at once with
	// SQLITE_BUSY, whatever the busy timeout.
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: url.Values{"_pragma": {
		"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(FULL)"},
		"_txlock": {"immediate"}}.Encode()}).String(), nil
}

func openOnce(ctx context.Context, path string) (*DB, error) {
	dsn, err := DSN(path)
	if err != nil {
		return nil, fmt.Errorf("opening %w", err)
	}
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
	d := &DB{db: db}
	if err := d.stmts.prepare(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening inventory %s: %w", path, err)
	}
	return d, nil
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

// Record records a version and its files, atomically, and returns once they
// are committed. Recording the same job's version again changes nothing and
// returns its number. Versions recorded while a transaction is being
// committed go together in the next one, each in a savepoint of its own (a
// version that fails leaves the others in): with synchronous=FULL every
// commit syncs the log, and the recorder's leases record at once. ctx ends
// the wait; the version may be recorded all the same.
func (d *DB) Record(ctx context.Context, v Version) (int, error) {
	p := &pending{v: v, done: make(chan struct{})}
	d.mu.Lock()
	d.waiting = append(d.waiting, p)
	start := !d.writing
	d.writing = true
	d.mu.Unlock()
	if start {
		go d.write()
	}
	select {
	case <-p.done:
		if p.err != nil {
			return 0, fmt.Errorf("recording %s: %w", v.ARK, p.err)
		}
		return p.number, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("recording %s: %w", v.ARK, context.Cause(ctx))
	}
}

// maxPerTransaction bounds the versions one transaction writes.
const maxPerTransaction = 64

// write writes what waits, a transaction at a time, until nothing does.
func (d *DB) write() {
	for {
		d.mu.Lock()
		batch := d.waiting[:min(len(d.waiting), maxPerTransaction)]
		d.waiting = d.waiting[len(batch):]
		if len(batch) == 0 {
			d.writing = false
			d.waiting = nil
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		d.writeBatch(batch)
		for _, p := range batch {
			close(p.done)
		}
	}
}

// writeBatch records a batch of versions in one transaction, each in its own
// savepoint. The versions' own contexts do not cut it short: a caller that
// stopped waiting may still find its version recorded.
func (d *DB) writeBatch(batch []*pending) {
	ctx := context.Background()
	fail := func(err error) {
		for _, p := range batch {
			if p.err == nil {
				p.err = err
			}
		}
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
		return
	}
	defer tx.Rollback()
	for _, p := range batch {
		if _, err := tx.ExecContext(ctx, `SAVEPOINT version`); err != nil {
			fail(err)
			return
		}
		p.number, p.err = d.record(ctx, tx, p.v)
		undo := `RELEASE version`
		if p.err != nil {
			undo = `ROLLBACK TO version; RELEASE version`
		}
		if _, err := tx.ExecContext(ctx, undo); err != nil {
			fail(err)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		for _, p := range batch {
			p.err = err // nothing of it was written
		}
		return
	}
	d.commits.Add(1)
}

func (d *DB) record(ctx context.Context, tx *sql.Tx, v Version) (int, error) {
	st := func(s *sql.Stmt) *sql.Stmt { return tx.StmtContext(ctx, s) }
	now := time.Now().UTC().Format(time.RFC3339)
	var raw string
	err := st(d.stmts.localIDs).QueryRowContext(ctx, v.ARK).Scan(&raw)
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
	if _, err := st(d.stmts.upsertObject).ExecContext(ctx, v.ARK, string(merged), now); err != nil {
		return 0, err
	}

	var number int
	err = st(d.stmts.versionOfJob).QueryRowContext(ctx, v.ARK, v.JobID).Scan(&number)
	switch {
	case err == nil:
		return number, nil // this job's version is recorded already
	case !errors.Is(err, sql.ErrNoRows):
		return 0, err
	}
	number = v.Number
	if number == 0 {
		if err := st(d.stmts.nextVersion).QueryRowContext(ctx, v.ARK).Scan(&number); err != nil {
			return 0, err
		}
	}
	var other string
	err = st(d.stmts.jobOfVersion).QueryRowContext(ctx, v.ARK, number).Scan(&other)
	if err == nil {
		return 0, fmt.Errorf("version %d: %w %s", number, ErrConflict, other)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, err
	}
	if _, err := st(d.stmts.insertVersion).ExecContext(ctx,
		v.ARK, number, v.ManifestURL, v.Mode, v.JobID, now); err != nil {
		return 0, err
	}
	stmt := st(d.stmts.insertFile)
	for _, f := range v.Files {
		if _, err := stmt.ExecContext(ctx, v.ARK, number, f.Name, f.Size, f.DigestAlg, f.Digest); err != nil {
			return 0, fmt.Errorf("file %s: %w", f.Name, err)
		}
	}
	return number, nil
}
