//go:build !linux

package store

import (
	"fmt"
	"os"
)

// syncWritten makes durable what was written under root: every path, in
// the order given (files, then folders deepest first), one fsync each.
func syncWritten(_ string, paths []string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("syncing %s: %w", p, err)
		}
	}
	return nil
}
