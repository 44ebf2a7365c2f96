package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// stats count what a part holds.
type stats struct {
	files, links int
	bytes        int64
}

// copyTree copies the folder src to dest (which must not exist): folders
// made, files hard-linked when link is set and both are on one file system,
// otherwise copied with their mode and time, symbolic links made again.
func copyTree(src, dest string, link bool) (stats, error) {
	var st stats
	info, err := os.Stat(src)
	if err != nil {
		return st, err
	}
	if !info.IsDir() {
		return st, fmt.Errorf("%s is not a folder", src)
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dest, rel)
		switch {
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return os.MkdirAll(target, fi.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(to, target)
		case d.Type().IsRegular():
			return copyFile(p, target, link, &st)
		}
		return fmt.Errorf("%s: neither a file, a folder nor a link", p)
	})
	return st, err
}

// copyFile links or copies one file, making its folder.
func copyFile(src, dest string, link bool, st *stats) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if link {
		err := os.Link(src, dest)
		if err == nil {
			st.files++
			st.links++
			st.bytes += fi.Size()
			return nil
		}
		// Another file system (EXDEV) or one without links: copy.
		if !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EMLINK) {
			return err
		}
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm()|0o200)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	st.files++
	st.bytes += n
	if err := os.Chmod(dest, fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Chtimes(dest, fi.ModTime(), fi.ModTime())
}

// emptyOrMissing refuses a folder that holds anything: a backup or a
// restore never mixes with what is there.
func emptyOrMissing(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case len(entries) > 0:
		return fmt.Errorf("%s is not empty", dir)
	}
	return nil
}
