package store

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncWritten makes durable what was written under root (files, folders,
// links, renames; paths lists them for systems that sync one at a time). On
// Linux one syncfs of root's file system does it: a single device flush,
// which the versions being stored at the same time share, instead of one per
// file and folder.
func syncWritten(root string, _ []string) error {
	d, err := os.Open(root)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncing the file system of %s: %w", root, err)
	}
	return nil
}
