// Package store keeps object versions: the Storage interface the processor
// hands a version to, and Local, a versioned object store on a local file
// system.
package store

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/ingestq/ingestq/shared/checkm"
)

// Request asks for one version of an object to be stored.
type Request struct {
	ARK   string
	JobID string // the job storing it: a retried job gets its version back
	Mode  string // "add" or "update"
	// ManifestURL is the storage manifest (checkm): every file of the
	// version with its URL (file://), name, size and SHA-256.
	ManifestURL string
}

// Version is a stored version.
type Version struct {
	Number int
	// ManifestURL is the version manifest: the stored files, their
	// storage URLs, sizes and digests. The inventory reads it.
	ManifestURL string
}

// Storage stores object versions. Store is idempotent per (ARK, JobID): a
// job that stores again after a crash gets the version it stored before.
// The caller holds the object's storage lock.
type Storage interface {
	Store(ctx context.Context, req Request) (Version, error)
}

// ManifestFields are the columns of the storage and version manifests.
func ManifestFields() []string {
	return []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}
}

// FileURL is the file:// URL of an absolute path.
func FileURL(path string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path)}).String()
}

// WriteManifest writes a manifest file atomically (see writeAtomic), so a
// reader never sees half a manifest.
func WriteManifest(path string, entries []checkm.Entry) error {
	return writeAtomic(path, func(w io.Writer) error {
		return checkm.Write(w, checkm.ProfileObject, ManifestFields(), entries)
	})
}

// writeAtomic writes a file under a temporary name in its folder, syncs it,
// renames it over path and syncs the folder.
func writeAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// syncDir makes a folder's entries (a rename, a new file) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
