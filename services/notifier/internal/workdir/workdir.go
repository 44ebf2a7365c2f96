// Package workdir removes a finished job's working folder from the shared
// working storage, and nothing else.
package workdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Remove deletes dir and everything under it. dir must lie inside root; the
// removal goes through an os.Root opened on root, so no symbolic link (dir
// itself, a folder on the way, or one inside) leads it out of root: a link
// is removed, never followed. A folder already gone is not an error.
func Remove(root, dir string) error {
	if !filepath.IsAbs(root) {
		return fmt.Errorf("work root %q is not an absolute path", root)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || !filepath.IsAbs(dir) || !filepath.IsLocal(rel) || rel == "." {
		return fmt.Errorf("%s is not inside the work root %s: not removed", dir, root)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("opening the work root: %w", err)
	}
	defer r.Close()
	if err := r.RemoveAll(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
