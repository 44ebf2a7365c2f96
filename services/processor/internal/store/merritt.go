package store

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ingestq/ingestq/services/processor/internal/serving"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/merrittstore"
)

// Merritt stores versions in a node of Merritt's storage service: it
// serves the version's files (Serving) and calls the service to add the
// version, or update the object with it, which fetches them all before it
// answers. The version's ingest record (merrittstore.IngestRecordFile),
// which names the job, makes Store idempotent per job: the object's
// versions are looked at first, and one holding the job's record is the
// job's, stored by an attempt whose answer or commit was lost.
//
// Each call is one attempt, served under URLs of its own that are closed
// when Store returns: the service goes on with a call whose caller gave
// up, and that call, fetching later, is refused and stores nothing, so a
// later attempt's look at the object is not overtaken by an earlier one.
// A failure that may pass (merrittstore's MayPass) says so to MayPass.
type Merritt struct {
	Client  *merrittstore.Client
	Serving *serving.Server
	Logger  *slog.Logger
}

// Store implements Storage.
func (m Merritt) Store(ctx context.Context, req Request) (Version, error) {
	v, err := m.store(ctx, req)
	if err != nil {
		return Version{}, fmt.Errorf("storing %s in node %d of Merritt's storage service: %w", req.ARK, m.Client.Node, err)
	}
	return v, nil
}

func (m Merritt) store(ctx context.Context, req Request) (Version, error) {
	entries, err := readManifest(req.ManifestURL)
	if err != nil {
		return Version{}, err
	}
	wd := filepath.Dir(mustPath(req.ManifestURL))
	var record *checkm.Entry
	for i := range entries {
		if entries[i].FileName == merrittstore.IngestRecordFile {
			record = &entries[i]
		}
	}
	if record == nil {
		return Version{}, fmt.Errorf("the version has no %s naming its job: it was processed for another store (requeue it to Processing)",
			merrittstore.IngestRecordFile)
	}

	// What the object holds: a version with the job's record is the job's,
	// held to what a fresh store's answer is held to.
	var current []merrittstore.File
	previous := 0
	st, found, err := m.Client.State(ctx, req.ARK)
	if err != nil {
		return Version{}, err
	}
	if found && st.Versions > 0 {
		obj, found, err := m.Client.Object(ctx, req.ARK)
		if err != nil {
			return Version{}, err
		}
		if !found {
			return Version{}, fmt.Errorf("the service says it holds %d versions of the object but has no manifest of it", st.Versions)
		}
		for i := len(obj.Versions) - 1; i >= 0; i-- {
			v := obj.Versions[i]
			if f, ok := v.File(merrittstore.IngestRecordFile); !ok || f.HashAlgorithm != record.HashAlgorithm || f.HashValue != record.HashValue {
				continue
			}
			var before []merrittstore.File
			if prior, ok := obj.Version(v.Number - 1); ok {
				before = prior.Files
			}
			if err := holds(v.Number, names(v.Files), expected(req, entries, before)); err != nil {
				return Version{}, fmt.Errorf("the job's version is stored already, but %w", err)
			}
			m.logger().InfoContext(ctx, "the job's version is stored already", "ark", req.ARK, "version", v.Number)
			return Version{Number: v.Number, ManifestURL: m.Client.ManifestURL(req.ARK)}, nil
		}
		previous = obj.Current
		if cur, ok := obj.Version(obj.Current); ok {
			current = cur.Files
		}
	}

	attempt, err := m.Serving.Open(wd, entries)
	if err != nil {
		return Version{}, err
	}
	defer attempt.Close()
	// The object's local ids, as Merritt's ingest service spells a job's
	// several: joined with ';'.
	call := merrittstore.Request{ManifestURL: attempt.Manifest.URL, ManifestSize: attempt.Manifest.Size,
		ManifestDigest: attempt.Manifest.SHA256, LocalID: strings.Join(req.LocalIDs, ";")}
	var vs merrittstore.VersionState
	if req.Mode == merrittstore.ActionUpdate {
		call.Delete = req.Deletions
		vs, err = m.Client.Update(ctx, req.ARK, call)
	} else {
		vs, err = m.Client.Add(ctx, req.ARK, call)
	}
	if err != nil {
		return Version{}, err
	}
	if err := check(vs, req, previous, expected(req, entries, current)); err != nil {
		return Version{}, fmt.Errorf("the service's answer: %w", err)
	}
	return Version{Number: vs.Number, ManifestURL: m.Client.ManifestURL(req.ARK)}, nil
}

func names(files []merrittstore.File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Name
	}
	return out
}

// expected are the files the new version must hold: an add's, or an
// update's merge of the current version's.
func expected(req Request, entries []checkm.Entry, current []merrittstore.File) []string {
	set := map[string]bool{}
	if req.Mode == merrittstore.ActionUpdate {
		for _, f := range current {
			set[f.Name] = true
		}
		for _, d := range req.Deletions {
			delete(set, d)
		}
	}
	for _, e := range entries {
		set[e.FileName] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// check holds the service's answer against what was asked: the next
// version of the object, the files it was to hold, and a stored size,
// which Merritt's own storage consumer requires of a success.
func check(vs merrittstore.VersionState, req Request, previous int, want []string) error {
	switch {
	case vs.Object != "" && vs.Object != req.ARK:
		return fmt.Errorf("it stored object %q, not %s", vs.Object, req.ARK)
	case vs.Number != previous+1:
		return fmt.Errorf("it made version %d; the object had %d versions", vs.Number, previous)
	case !vs.HasActualSize:
		return fmt.Errorf("it gives no stored size (ver:totalActualSize)")
	case vs.NumFiles != len(want):
		return fmt.Errorf("version %d holds %d files, not the %d sent", vs.Number, vs.NumFiles, len(want))
	}
	if vs.Files != nil {
		return holds(vs.Number, vs.Files, want)
	}
	return nil
}

// holds checks that version number holds exactly the files want (sorted).
func holds(number int, files, want []string) error {
	got := slices.Sorted(slices.Values(files))
	if !slices.Equal(got, want) {
		return fmt.Errorf("version %d holds %q, not %q", number, got, want)
	}
	return nil
}

// mustPath is the path of a file:// URL readManifest has read.
func mustPath(raw string) string {
	p, _ := checkm.FilePath(raw)
	return p
}

func (m Merritt) logger() *slog.Logger {
	if m.Logger != nil {
		return m.Logger
	}
	return slog.Default()
}
