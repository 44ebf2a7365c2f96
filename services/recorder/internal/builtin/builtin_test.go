package builtin

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/recorder/internal/inventory"
	"github.com/ingestq/ingestq/services/recorder/internal/lease"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"

	_ "modernc.org/sqlite"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// storedVersion writes a version manifest as the local object store does
// (…/ark_…/v<n>/manifest.checkm) and returns its URL.
func storedVersion(t testing.TB, root string, n string, entries []checkm.Entry) string {
	t.Helper()
	dir := filepath.Join(root, "ark_99999_fk4x", n)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "manifest.checkm")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := checkm.Write(f, checkm.ProfileObject, nil, entries); err != nil {
		t.Fatal(err)
	}
	return checkm.FileURL(p)
}

// recordingJob puts a job in Recording as the processor leaves it after
// storing version (0: a job that does not say, as a peer's).
func recordingJob(t *testing.T, q *session.Session, manifestURL string, version int32) string {
	t.Helper()
	jid := queuetest.Spawn(t, q, batches.NewJob{Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4x", LocalId: []string{"loc001"}}}, queue.Storing)
	queuetest.Move(t, q, jid, jobs.Change{To: queue.Recording,
		Store:     &v1.Store{ManifestUrl: manifestURL, Mode: "add", Version: version},
		Inventory: &v1.Inventory{ManifestUrl: manifestURL, Mode: "add", Version: version}})
	return jid
}

// run runs a built-in recorder on q, recording into dbPath, until the test
// ends; it returns the recorder's lease manager.
func run(t *testing.T, q *session.Session, dbPath string) *lease.Manager {
	t.Helper()
	db, err := inventory.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	r := &Recorder{DB: db, LeaseDuration: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	m, err := lease.New(jobs.New(q), lease.Options{Recorder: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() {
		stopCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		m.Drain(stopCtx)
		cancel()
		<-done
		db.Close()
	})
	return m
}

func TestTheBuiltInRecorderRecordsEachVersionAndCompletesTheJob(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	store := t.TempDir()
	dbPath := filepath.Join(t.TempDir(), "inventory.db")
	first := recordingJob(t, q, storedVersion(t, store, "v1", []checkm.Entry{
		{FileURL: "file:///s/v1/producer/a.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("a", 64), FileSize: 5, FileName: "producer/a.txt"},
		{FileURL: "file:///s/v1/system/mrt-erc.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("b", 64), FileSize: 40, FileName: "system/mrt-erc.txt"},
	}), 1)
	second := recordingJob(t, q, storedVersion(t, store, "v2", []checkm.Entry{
		{FileURL: "file:///s/v2/producer/a.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("c", 64), FileSize: 6, FileName: "producer/a.txt"},
	}), 2)
	run(t, q, dbPath)
	for _, jid := range []string{first, second} {
		queuetest.Eventually(t, jid+" in Notify", func() bool { return queuetest.Status(t, q, jid).GetStatus() == queue.Notify })
	}

	dsn, err := inventory.DSN(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT v.number, v.jid, v.mode, f.name, f.size, f.digest_alg, f.digest
		FROM versions v JOIN files f ON f.ark = v.ark AND f.version = v.number WHERE v.ark = 'ark:/99999/fk4x' ORDER BY v.number, f.name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var number int
		var size int64
		var jid, mode, name, alg, digest string
		if err := rows.Scan(&number, &jid, &mode, &name, &size, &alg, &digest); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("v%d %s %s %s %d %s:%s", number, jid, mode, name, size, alg, digest[:4]))
	}
	want := []string{
		"v1 " + first + " add producer/a.txt 5 sha256:aaaa",
		"v1 " + first + " add system/mrt-erc.txt 40 sha256:bbbb",
		"v2 " + second + " add producer/a.txt 6 sha256:cccc",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("inventory rows:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ids string
	if err := db.QueryRow(`SELECT local_ids FROM objects WHERE ark = 'ark:/99999/fk4x'`).Scan(&ids); err != nil || ids != `["loc001"]` {
		t.Errorf("objects row: %q, %v", ids, err)
	}
}

func TestTheBuiltInRecorderFailsAJobWhoseManifestIsGone(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	missing := checkm.FileURL(filepath.Join(t.TempDir(), "ark_99999_fk4x", "v1", "manifest.checkm"))
	jid := recordingJob(t, q, missing, 1)
	run(t, q, filepath.Join(t.TempDir(), "inventory.db"))
	queuetest.Eventually(t, "the job failed", func() bool { return queuetest.Status(t, q, jid).GetStatus() == queue.Failed })
	if msg := queuetest.Status(t, q, jid).GetMessage(); !strings.Contains(msg, "recording ark:/99999/fk4x in the inventory: manifest "+missing) ||
		!strings.Contains(msg, "no such file") {
		t.Errorf("message %q", msg)
	}
}

func TestAPausedBuiltInRecorderTakesNothingUntilResumed(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	m := run(t, q, filepath.Join(t.TempDir(), "inventory.db"))
	m.Pause()
	jid := recordingJob(t, q, storedVersion(t, t.TempDir(), "v1", []checkm.Entry{
		{FileURL: "file:///s/v1/producer/a.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("a", 64), FileSize: 5, FileName: "producer/a.txt"},
	}), 1)
	waittest.Stays(t, 500*time.Millisecond, func() error {
		if job, err := jobs.NewReader(q).GetJob(context.Background(), jid); err != nil || job.GetLocked() || job.GetStatus().GetStatus() != queue.Recording {
			return fmt.Errorf("job under a paused recorder: %v, %v; want it untouched in Recording", job, err)
		}
		return nil
	})
	m.Resume()
	queuetest.Eventually(t, jid+" recorded after the resume", func() bool { return queuetest.Status(t, q, jid).GetStatus() == queue.Notify })
}

func TestTheVersionRecordedIsTheOneTheJobCarries(t *testing.T) {
	q := queuetest.Connect(t, zktest.Root(t))
	store := t.TempDir()
	dbPath := filepath.Join(t.TempDir(), "inventory.db")
	entry := []checkm.Entry{{FileURL: "file:///s/producer/a.txt", HashAlgorithm: "sha256", HashValue: strings.Repeat("a", 64), FileSize: 5, FileName: "producer/a.txt"}}
	// The object's first recorded version is its third stored one, at a URL
	// that does not spell the number (a storage service's need not): the
	// number comes from the job.
	third := recordingJob(t, q, storedVersion(t, store, "third", entry), 3)
	run(t, q, dbPath)
	queuetest.Eventually(t, third+" in Notify", func() bool { return queuetest.Status(t, q, third).GetStatus() == queue.Notify })
	// A job without a version (a peer processed it) gets the next number.
	unsaid := recordingJob(t, q, storedVersion(t, store, "v9", entry), 0)
	queuetest.Eventually(t, unsaid+" in Notify", func() bool { return queuetest.Status(t, q, unsaid).GetStatus() == queue.Notify })

	dsn, err := inventory.DSN(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for jid, want := range map[string]int{third: 3, unsaid: 4} {
		var got int
		if err := db.QueryRow(`SELECT number FROM versions WHERE ark = 'ark:/99999/fk4x' AND jid = ?`, jid).Scan(&got); err != nil || got != want {
			t.Errorf("%s recorded as version %d (%v), want %d", jid, got, err, want)
		}
	}
}
