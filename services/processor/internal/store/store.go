// Package store keeps object versions: the Storage interface the processor
// hands a version to; Local, a versioned object store on a local file
// system; S3, the same in a bucket of an S3-compatible object store; and
// Merritt, a node of Merritt's storage service.
package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

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
	// Deletions are the files an update removes from the object's current
	// version (a store that keeps whole versions has none to remove).
	Deletions []string
	// LocalIDs are the object's local identifiers, for a store that keeps
	// them with the object.
	LocalIDs []string
	// Digested are the files the processing step digested in this process
	// just before, by name (nil: none, or another process processed the
	// job): a store that links a file it finds as it was seen there has
	// nothing to read it again for.
	Digested map[string]Seen
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
// The caller holds the object's storage lock. An error that may pass if
// the version is stored again later says so (MayPass).
type Storage interface {
	Store(ctx context.Context, req Request) (Version, error)
}

// MayPass reports whether a Store's error may pass if the version is
// stored again later: an error in its chain says so with a method
// MayPass() bool (the store unavailable, no answer in time).
func MayPass(err error) bool {
	var p interface{ MayPass() bool }
	return errors.As(err, &p) && p.MayPass()
}

// ManifestFields are the columns of the storage and version manifests.
func ManifestFields() []string {
	return []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}
}

// WriteManifest writes a manifest file under a temporary name and renames
// it into place, so a reader never sees half a manifest. It is not made
// durable: the storage manifest is remade when a crashed job runs again.
func WriteManifest(path string, entries []checkm.Entry) error {
	if err := RemoveTemps(path); err != nil {
		return err
	}
	tmp, err := writeTemp(path, func(w io.Writer) error {
		return checkm.Write(w, checkm.ProfileObject, ManifestFields(), entries)
	})
	if err != nil {
		return err // it names path
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// tempPattern is the glob of the temporary names a file at path is written
// under (here and in package sysfiles) before it is renamed into place.
func tempPattern(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
}

// RemoveTemps removes the temporary files a writer of path left when it
// died before renaming them into place: a later listing of the folder
// (the files of a version) must not take them for files of the object.
func RemoveTemps(path string) error {
	left, err := filepath.Glob(tempPattern(path))
	if err != nil {
		return fmt.Errorf("looking for temporary files of %s: %w", path, err)
	}
	for _, p := range left {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing a temporary file left by an earlier attempt: %w", err)
		}
	}
	return nil
}

// writeTemp writes a new file beside path, under a temporary name that it
// returns, for the caller to rename over path.
func writeTemp(path string, write func(io.Writer) error) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(tempPattern(path)))
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	bw := bufio.NewWriter(f)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Name(), nil
}

// Seen is a file as the processing step saw it when it digested it, by
// the file it read (its descriptor): the same file system, inode, size and
// modification time at storing say that the bytes are those it digested,
// in this process, moments ago.
type Seen struct {
	Dev, Ino uint64
	Size     int64
	ModTime  time.Time
}

// SeenOf is what fi says of a regular file (false: it says too little, on
// a system without inode numbers).
func SeenOf(fi fs.FileInfo) (Seen, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return Seen{}, false
	}
	return Seen{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Size: fi.Size(), ModTime: fi.ModTime()}, true
}
