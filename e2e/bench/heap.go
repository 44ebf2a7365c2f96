package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// LiveHeap is the bytes of live objects in the heap of the Java process pid
// (a ZooKeeper server): `jcmd <pid> GC.class_histogram` collects the whole
// heap first, so what it counts is what the server holds, not garbage.
func LiveHeap(ctx context.Context, pid int) (int64, error) {
	out, err := exec.CommandContext(ctx, "jcmd", strconv.Itoa(pid), "GC.class_histogram").Output()
	if err != nil {
		return 0, fmt.Errorf("jcmd %d GC.class_histogram: %w", pid, err)
	}
	return histogramTotal(string(out))
}

// histogramTotal reads the bytes of a class histogram's last line,
// "Total <instances> <bytes>".
func histogramTotal(histogram string) (int64, error) {
	for line := range strings.Lines(histogram) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "Total" {
			return strconv.ParseInt(f[2], 10, 64)
		}
	}
	return 0, fmt.Errorf("class histogram without a Total line: %.200q", histogram)
}
