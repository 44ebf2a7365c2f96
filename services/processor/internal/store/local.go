package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ingestq/ingestq/services/processor/internal/digest"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/durable"
	"github.com/ingestq/ingestq/shared/queue"
)

// Local is a versioned object store in a folder:
//
//	<Root>/ark_99999_fk4…/v1/producer/…       the files of version 1
//	<Root>/ark_99999_fk4…/v1/system/…
//	<Root>/ark_99999_fk4…/v1/version.json     which job stored it, and how
//	<Root>/ark_99999_fk4…/v1/manifest.checkm  written last: the version is complete
//
// A file on the store's file system (the working storage usually is) is
// stored as a hard link, read-only: no copy, no new inode; any other is
// copied. Either way it is checked against the storage manifest's size and
// digest. Everything of a version is made durable (package durable) before
// its manifest is renamed into place, and the manifest after: a crash
// leaves either a complete version or a folder without a manifest, which
// the next Store of the object removes.
type Local struct {
	Root string
	// Durable syncs the versions stored at the same moment together (nil:
	// each on its own).
	Durable *durable.Syncer
}

// Names inside a version folder.
const (
	VersionManifest = "manifest.checkm"
	versionInfo     = "version.json"
)

// versionRecord is version.json.
type versionRecord struct {
	ARK   string `json:"ark"`
	JobID string `json:"jid"`
	Mode  string `json:"mode"`
}

// Store implements Storage.
func (s Local) Store(ctx context.Context, req Request) (Version, error) {
	v, err := s.store(ctx, req)
	if err != nil {
		return Version{}, fmt.Errorf("storing %s in %s: %w", req.ARK, s.Root, err)
	}
	return v, nil
}

func (s Local) store(ctx context.Context, req Request) (Version, error) {
	entries, err := readManifest(req.ManifestURL)
	if err != nil {
		return Version{}, err
	}
	objDir, err := s.objectDir(req.ARK)
	if err != nil {
		return Version{}, err
	}
	if err := os.MkdirAll(objDir, 0o755); err != nil {
		return Version{}, fmt.Errorf("creating the object folder: %w", err)
	}
	number, existing, err := s.nextVersion(objDir, req.JobID)
	if err != nil {
		return Version{}, err
	}
	vdir := filepath.Join(objDir, versionDir(number))
	if existing {
		return Version{Number: number, ManifestURL: checkm.FileURL(filepath.Join(vdir, VersionManifest))}, nil
	}
	if err := os.Mkdir(vdir, 0o755); err != nil {
		return Version{}, fmt.Errorf("creating version %d: %w", number, err)
	}
	// The version manifest lists the entries, each at its stored place
	// (rewritten in place: a version of 100,000 files keeps one list).
	expectBytes(ctx, entries)
	stored := entries
	// What is synced where paths are synced one by one (package durable).
	var files []string
	dirs := map[string]bool{vdir: true, objDir: true}
	for i, e := range entries {
		dst := filepath.Join(vdir, filepath.FromSlash(e.FileName))
		for d := filepath.Dir(dst); d != vdir; d = filepath.Dir(d) {
			dirs[d] = true
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return Version{}, fmt.Errorf("%s: %w", e.FileName, err)
		}
		if err := storeFile(ctx, e, dst, req.Digested); err != nil {
			return Version{}, err
		}
		// gofail: var storingHalfStored struct{}
		files = append(files, dst)
		stored[i].FileURL = checkm.FileURL(dst)
		stored[i].Line = 0
	}
	info, err := json.Marshal(versionRecord{ARK: req.ARK, JobID: req.JobID, Mode: req.Mode})
	if err != nil {
		return Version{}, err
	}
	// Written in place: until its manifest exists the version is not one.
	if err := os.WriteFile(filepath.Join(vdir, versionInfo), info, 0o644); err != nil {
		return Version{}, fmt.Errorf("writing %s: %w", versionInfo, err)
	}
	files = append(files, filepath.Join(vdir, versionInfo))
	// The manifest is written under a temporary name with the rest, made
	// durable with it, and renamed into place: that rename completes the
	// version.
	manifest := filepath.Join(vdir, VersionManifest)
	tmp, err := writeTemp(manifest, func(w io.Writer) error {
		return checkm.Write(w, checkm.ProfileObject, ManifestFields(), stored)
	})
	if err != nil {
		return Version{}, err
	}
	files = append(files, tmp)
	syncer := s.Durable
	if syncer == nil {
		syncer = &durable.Syncer{}
	}
	if err := syncer.Sync(ctx, s.Root, files, slices.Collect(maps.Keys(dirs))); err != nil {
		return Version{}, err
	}
	if err := os.Rename(tmp, manifest); err != nil {
		return Version{}, fmt.Errorf("writing %s: %w", manifest, err)
	}
	if err := syncer.Sync(ctx, s.Root, nil, []string{vdir}); err != nil {
		return Version{}, err
	}
	return Version{Number: number, ManifestURL: checkm.FileURL(manifest)}, nil
}

// objectDir is the object's folder, named as its lock is.
func (s Local) objectDir(ark string) (string, error) {
	name := queue.LockName(ark)
	if ark == "" || name == "." || !filepath.IsLocal(name) || strings.ContainsRune(name, filepath.Separator) {
		return "", fmt.Errorf("ARK %q cannot name a folder", ark)
	}
	return filepath.Join(s.Root, name), nil
}

func versionDir(n int) string { return "v" + strconv.Itoa(n) }

// nextVersion looks at the object's versions: it returns the version jid
// stored already (existing), or else the number of the next version after
// removing folders that a crash left without a manifest.
func (s Local) nextVersion(objDir, jid string) (number int, existing bool, err error) {
	des, err := os.ReadDir(objDir)
	if err != nil {
		return 0, false, fmt.Errorf("listing versions: %w", err)
	}
	last := 0
	var incomplete []string
	for _, de := range des {
		n, err := strconv.Atoi(strings.TrimPrefix(de.Name(), "v"))
		if !de.IsDir() || !strings.HasPrefix(de.Name(), "v") || err != nil || n < 1 || versionDir(n) != de.Name() {
			continue
		}
		dir := filepath.Join(objDir, de.Name())
		if _, err := os.Stat(filepath.Join(dir, VersionManifest)); errors.Is(err, fs.ErrNotExist) {
			incomplete = append(incomplete, dir)
			continue
		} else if err != nil {
			return 0, false, fmt.Errorf("reading version %d: %w", n, err)
		}
		data, err := os.ReadFile(filepath.Join(dir, versionInfo))
		if err != nil {
			return 0, false, fmt.Errorf("reading version %d: %w", n, err)
		}
		var rec versionRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return 0, false, fmt.Errorf("reading version %d: %s: %w", n, versionInfo, err)
		}
		if rec.JobID == jid {
			return n, true, nil
		}
		last = max(last, n)
	}
	for _, dir := range incomplete {
		if err := os.RemoveAll(dir); err != nil {
			return 0, false, fmt.Errorf("removing incomplete version %s: %w", dir, err)
		}
	}
	return last + 1, false, nil
}

// readManifest reads the storage manifest the processor wrote. Every file
// it lists lies in the manifest's folder (the job's working folder): a
// manifest cannot lead the store to files elsewhere.
func readManifest(raw string) ([]checkm.Entry, error) {
	path, err := checkm.FilePath(raw)
	if err != nil {
		return nil, fmt.Errorf("storage manifest: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("storage manifest: %w", err)
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		return nil, fmt.Errorf("storage manifest %s: %w", path, err)
	}
	for _, e := range m.Entries {
		if e.HashAlgorithm == "" || e.FileSize < 0 {
			return nil, fmt.Errorf("storage manifest %s: line %d: %s has no digest or size", path, e.Line, e.FileName)
		}
		src, err := checkm.FilePath(e.FileURL)
		if err != nil {
			return nil, fmt.Errorf("storage manifest %s: line %d: %w", path, e.Line, err)
		}
		if rel, err := filepath.Rel(filepath.Dir(path), src); err != nil || !filepath.IsLocal(rel) {
			return nil, fmt.Errorf("storage manifest %s: line %d: %s lies outside the manifest's folder %s", path, e.Line, src, filepath.Dir(path))
		}
	}
	return m.Entries, nil
}

// storeFile puts one file of the storage manifest at dst: a read-only
// hard link to it when both lie on one file system, a copy otherwise. What
// is stored is checked against the manifest's size and digest: read again,
// unless it is a link to the very file the processing step of this
// process digested (digested), found as it was then.
func storeFile(ctx context.Context, e checkm.Entry, dst string, digested map[string]Seen) error {
	in, _, err := openSource(e)
	if err != nil {
		return err
	}
	defer in.Close()
	var n int64
	var sums map[string]string
	err = os.Link(in.Name(), dst)
	if err == nil {
		// The link is to the file opened, not to another put at its name
		// since: what is checked below is what is stored.
		err = sameFile(in, dst)
	}
	if err == nil {
		// Read-only, so that nothing writing to the working copy (one
		// inode with the stored file) can change the stored version; a
		// file this process may not make read-only is copied instead.
		if err = in.Chmod(0o444); err != nil {
			if rerr := os.Remove(dst); rerr != nil {
				return fmt.Errorf("%s: %w", e.FileName, rerr)
			}
			err = syscall.EPERM
		}
	}
	switch {
	case err == nil:
		if seen, ok := digested[e.FileName]; ok && seen.Size == e.FileSize && unchanged(in, seen) {
			meter(ctx).Advance(e.FileSize)
			return nil
		}
		if n, sums, err = digest.Copy(ctx, io.Discard, meter(ctx).Reader(in), e.HashAlgorithm); err != nil {
			return fmt.Errorf("reading %s: %w", e.FileName, err)
		}
	case linkRefused(err):
		if n, sums, err = copyFile(ctx, meter(ctx).Reader(in), dst, e.HashAlgorithm); err != nil {
			return fmt.Errorf("copying %s: %w", e.FileName, err)
		}
	default:
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	switch {
	case n != e.FileSize:
		return fmt.Errorf("%s: stored %d bytes, the storage manifest says %d", e.FileName, n, e.FileSize)
	case sums[e.HashAlgorithm] != e.HashValue:
		return fmt.Errorf("%s: %s of the stored file is %s, the storage manifest says %s", e.FileName, e.HashAlgorithm, sums[e.HashAlgorithm], e.HashValue)
	}
	return nil
}

// sameFile checks that dst, just linked, is the file in is.
func sameFile(in *os.File, dst string) error {
	a, err := in.Stat()
	if err != nil {
		return err
	}
	b, err := os.Lstat(dst)
	if err != nil {
		return err
	}
	if !os.SameFile(a, b) {
		os.Remove(dst)
		return fmt.Errorf("%s changed while it was linked into the store", in.Name())
	}
	return nil
}

// unchanged says whether in is the file seen, as it was: same inode, size
// and modification time.
func unchanged(in *os.File, seen Seen) bool {
	fi, err := in.Stat()
	if err != nil {
		return false
	}
	now, ok := SeenOf(fi)
	return ok && now.Dev == seen.Dev && now.Ino == seen.Ino && now.Size == seen.Size && now.ModTime.Equal(seen.ModTime)
}

// linkRefused reports a hard link the file systems cannot make (another
// file system, one without links, too many links), as opposed to a failure.
func linkRefused(err error) bool {
	return errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EMLINK) ||
		errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP)
}

// copyFile copies in to dst, a new file, and digests what it copies.
func copyFile(ctx context.Context, in io.Reader, dst, alg string) (int64, map[string]string, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return 0, nil, err
	}
	n, sums, err := digest.Copy(ctx, out, in, alg)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, sums, err
}
