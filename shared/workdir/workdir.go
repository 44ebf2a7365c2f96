// Package workdir lays out the jobs' working directories under the work
// root that every stage shares, checks that a job's directory lies inside
// it (Within, by name; Folder, on disk), and removes directories without
// ever touching anything outside that root.
package workdir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ingestq/ingestq/shared/durable"
)

// Root is the work root: <root>/<bid>/<job> holds one job's files.
type Root struct {
	dir string // absolute and clean
}

// At returns dir as the work root, without creating it. dir must be
// absolute: every stage resolves a job's working_dir the same way.
func At(dir string) (Root, error) {
	if !filepath.IsAbs(dir) {
		return Root{}, fmt.Errorf("work root %q must be an absolute path", dir)
	}
	return Root{dir: filepath.Clean(dir)}, nil
}

// Open makes sure dir exists and returns it as the work root (see At).
func Open(dir string) (Root, error) {
	r, err := At(dir)
	if err != nil {
		return Root{}, err
	}
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return Root{}, fmt.Errorf("creating work root: %w", err)
	}
	return r, nil
}

// Within returns path relative to root when path lies strictly inside
// root (the root itself does not), judged by their names: a symbolic link
// on the way is for the caller to refuse, by going through an os.Root or
// resolving it. Both must be absolute.
func Within(root, path string) (string, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsAbs(root) || !filepath.IsAbs(path) || !filepath.IsLocal(rel) || rel == "." {
		return "", fmt.Errorf("%s is not inside the work root %s", path, root)
	}
	return rel, nil
}

// Folder returns the real path of the folder at path, which must lie
// inside root (Within) with no symbolic link between root and it; links in
// root's own path are resolved, not refused. It is the check for a caller
// that hands the path on and so cannot keep its reading and writing inside
// an os.Root: the processor names its storage manifest by a file:// URL
// that the storing step, or another process, reads later.
func Folder(root, path string) (string, error) {
	rel, err := Within(root, path)
	if err != nil {
		return "", err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("work root: %w", err)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	if real != filepath.Join(realRoot, rel) {
		return "", fmt.Errorf("%s leads out of the work root through a symbolic link (to %s)", path, real)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a folder", path)
	}
	return real, nil
}

// Dir is the work root itself.
func (r Root) Dir() string { return r.dir }

// Batch is the directory that holds a batch's job directories.
func (r Root) Batch(bid string) string { return filepath.Join(r.dir, bid) }

// Job is the working directory of job jid of batch bid, as the queue names
// it (queue.NewJob.WorkRoot): <root>/<bid>/<jid>.
func (r Root) Job(bid, jid string) string { return filepath.Join(r.dir, bid, jid) }

// payloadFile is the file in a batch's directory that keeps its payload as
// first read. Job directories are named by jid, so it meets none, and it
// goes with the batch's directory.
const payloadFile = "payload"

// Payload is where batch bid's payload is kept: <root>/<bid>/payload.
func (r Root) Payload(bid string) string { return filepath.Join(r.dir, bid, payloadFile) }

// KeepPayload keeps data as batch bid's payload, replacing any kept before,
// and returns once it is durable: written beside, synced, renamed into
// place and its folder synced, so a reader finds the whole copy or none.
// The work root is shared by every batcher, so any of them can read it.
func (r Root) KeepPayload(ctx context.Context, sync *durable.Syncer, bid string, data []byte) error {
	if err := checkBatchID(bid); err != nil {
		return err
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return fmt.Errorf("opening work root: %w", err)
	}
	defer root.Close()
	if err := root.MkdirAll(bid, 0o750); err != nil {
		return fmt.Errorf("creating the directory of batch %s: %w", bid, err)
	}
	tmp := filepath.Join(bid, fmt.Sprintf(".%s-%016x", payloadFile, rand.Uint64()))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("keeping the payload of batch %s: %w", bid, err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, filepath.Join(bid, payloadFile))
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("keeping the payload of batch %s: %w", bid, err)
	}
	if err := sync.Sync(ctx, r.dir, []string{r.Payload(bid)}, []string{r.Batch(bid), r.dir}); err != nil {
		return fmt.Errorf("syncing the payload kept for batch %s: %w", bid, err)
	}
	return nil
}

// ReadPayload reads batch bid's kept payload, at most maxBytes of it (a
// longer copy reads as its first maxBytes+1 bytes: callers compare sizes).
// A batch with none kept gives an error matching fs.ErrNotExist.
func (r Root) ReadPayload(bid string, maxBytes int64) ([]byte, error) {
	if err := checkBatchID(bid); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return nil, fmt.Errorf("opening work root: %w", err)
	}
	defer root.Close()
	f, err := root.Open(filepath.Join(bid, payloadFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxBytes+1))
}

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
	if err := checkBatchID(bid); err != nil {
		return fmt.Errorf("refusing to remove batch directory: %w", err)
	}
	return r.Remove(r.Batch(bid))
}

// checkBatchID refuses what cannot be one name directly under the root.
func checkBatchID(bid string) error {
	if bid == "" || strings.ContainsAny(bid, `/\`) || bid == "." || bid == ".." {
		return fmt.Errorf("%q is not a batch id", bid)
	}
	return nil
}

// relative turns path into a path relative to the root, refusing the root
// itself and anything outside it.
func (r Root) relative(path string) (string, error) {
	rel, err := Within(r.dir, path)
	if err != nil {
		return "", fmt.Errorf("refusing to remove: %w", err)
	}
	return rel, nil
}
