package workdir

import (
	"fmt"
	"syscall"
)

// Usage is the size of the file system that holds a folder and how much of
// it is used and still free, in bytes, counted as df counts: Used is the
// blocks in use, Free what an unprivileged writer may still use, Total the
// two together (blocks reserved for root count as neither: a service not
// running as root cannot fill them).
type Usage struct {
	Total, Used, Free uint64
}

// DiskUsage measures the file system that holds dir.
func DiskUsage(dir string) (Usage, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	bs := uint64(st.Bsize)
	used := (st.Blocks - st.Bfree) * bs
	free := st.Bavail * bs
	return Usage{Total: used + free, Used: used, Free: free}, nil
}

// FormatBytes writes a size in binary units ("1.5 GiB"), as messages about
// the working storage's room give sizes.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
