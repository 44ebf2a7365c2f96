package durable

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const groupable = true

// syncFileSystem writes out everything the file system holding root has
// not written yet (syncfs(2)) and flushes its device.
func syncFileSystem(root string) error {
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
