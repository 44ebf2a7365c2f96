package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ingestq/ingestq/services/processor/internal/digest"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
)

// Local is a versioned object store in a folder:
//
//	<Root>/ark_99999_fk4…/v1/producer/…       the files of version 1
//	<Root>/ark_99999_fk4…/v1/system/…
//	<Root>/ark_99999_fk4…/v1/version.json     which job stored it, and how
//	<Root>/ark_99999_fk4…/v1/manifest.checkm  written last: the version is complete
//
// Every file is written under a temporary name, synced and renamed into
// place, and its folder synced, before the version manifest is written the
// same way: a crash leaves either a complete version or a folder without a
// manifest, which the next Store of the object removes.
type Local struct {
	Root string
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
		return Version{Number: number, ManifestURL: FileURL(filepath.Join(vdir, VersionManifest))}, nil
	}
	if err := os.Mkdir(vdir, 0o755); err != nil {
		return Version{}, fmt.Errorf("creating version %d: %w", number, err)
	}
	stored := make([]checkm.Entry, 0, len(entries))
	dirs := map[string]bool{} // folders below vdir; vdir is synced with version.json
	for _, e := range entries {
		dst := filepath.Join(vdir, filepath.FromSlash(e.FileName))
		if err := copyFile(ctx, e, dst); err != nil {
			return Version{}, err
		}
		for d := filepath.Dir(dst); d != vdir; d = filepath.Dir(d) {
			dirs[d] = true
		}
		e.FileURL = FileURL(dst)
		e.Line = 0
		stored = append(stored, e)
	}
	info, err := json.Marshal(versionRecord{ARK: req.ARK, JobID: req.JobID, Mode: req.Mode})
	if err != nil {
		return Version{}, err
	}
	if err := writeAtomic(filepath.Join(vdir, versionInfo), func(w io.Writer) error {
		_, err := w.Write(info)
		return err
	}); err != nil {
		return Version{}, err
	}
	// Deepest first, so each folder is synced after what it holds.
	ordered := make([]string, 0, len(dirs))
	for d := range dirs {
		ordered = append(ordered, d)
	}
	sort.Slice(ordered, func(i, j int) bool { return len(ordered[i]) > len(ordered[j]) })
	for _, d := range ordered {
		if err := syncDir(d); err != nil {
			return Version{}, err
		}
	}
	manifest := filepath.Join(vdir, VersionManifest)
	if err := WriteManifest(manifest, stored); err != nil {
		return Version{}, err
	}
	if err := syncDir(objDir); err != nil {
		return Version{}, err
	}
	return Version{Number: number, ManifestURL: FileURL(manifest)}, nil
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

// readManifest reads the storage manifest the processor wrote.
func readManifest(raw string) ([]checkm.Entry, error) {
	path, err := localPath(raw)
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
	}
	return m.Entries, nil
}

// localPath is the path of a file:// URL.
func localPath(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("%s is not a file:// URL of an absolute path", raw)
	}
	return filepath.FromSlash(u.Path), nil
}

// copyFile copies one file of the storage manifest to dst, checking its
// size and digest on the way: what is stored is what the manifest says.
func copyFile(ctx context.Context, e checkm.Entry, dst string) error {
	src, err := localPath(e.FileURL)
	if err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	defer os.Remove(out.Name()) // fails harmlessly once renamed
	n, sums, err := digest.Copy(ctx, out, in, e.HashAlgorithm)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Errorf("copying %s: %w", e.FileName, err)
	case n != e.FileSize:
		return fmt.Errorf("%s: copied %d bytes, the storage manifest says %d", e.FileName, n, e.FileSize)
	case sums[e.HashAlgorithm] != e.HashValue:
		return fmt.Errorf("%s: %s of the copy is %s, the storage manifest says %s", e.FileName, e.HashAlgorithm, sums[e.HashAlgorithm], e.HashValue)
	}
	if err := os.Rename(out.Name(), dst); err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	return nil
}
