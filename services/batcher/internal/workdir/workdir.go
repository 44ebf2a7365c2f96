// Package workdir lays out the jobs' working directories under the work
// root that every stage shares, and removes them without ever touching
// anything outside that root.
package workdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Root is the work root: <root>/<bid>/<job> holds one job's files.
type Root struct {
	dir string // absolute and clean
}

// Open makes sure dir exists and returns it as the work root. dir must be
// absolute: every stage resolves a job's working_dir the same way.
func Open(dir string) (Root, error) {
	if !filepath.IsAbs(dir) {
		return Root{}, fmt.Errorf("work root %q must be an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Root{}, fmt.Errorf("creating work root: %w", err)
	}
	return Root{dir: dir}, nil
}

// Dir is the work root itself.
func (r Root) Dir() string { return r.dir }

// Batch is the directory that holds a batch's job directories.
func (r Root) Batch(bid string) string { return filepath.Join(r.dir, bid) }

// Job is the working directory of job jid of batch bid, as the queue names
// it (queue.NewJob.WorkRoot): <root>/<bid>/<jid>.
func (r Root) Job(bid, jid string) string { return filepath.Join(r.dir, bid, jid) }

// Remove deletes path and everything below it. path must lie strictly
// inside the work root; symbolic links are removed, never followed, so a
// link planted in a job's directory cannot lead the removal out of the root.
// A path that does not exist is not an error.
func (r Root) Remove(path string) error {
	rel, err := r.relative(path)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return fmt.Errorf("opening work root: %w", err)
	}
	defer root.Close()
	if err := root.RemoveAll(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	return nil
}

// RemoveBatch deletes a batch's directory with every job directory in it.
func (r Root) RemoveBatch(bid string) error {
	if bid == "" || strings.ContainsAny(bid, `/\`) || bid == "." || bid == ".." {
		return fmt.Errorf("refusing to remove batch directory %q: not a batch id", bid)
	}
	return r.Remove(r.Batch(bid))
}

// relative turns path into a path relative to the root, refusing the root
// itself and anything outside it.
func (r Root) relative(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("refusing to remove %q: not an absolute path", path)
	}
	rel, err := filepath.Rel(r.dir, filepath.Clean(path))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("refusing to remove %q: it is not inside the work root %s", path, r.dir)
	}
	return rel, nil
}
