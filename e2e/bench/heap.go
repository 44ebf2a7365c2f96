package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// LiveHeap is the bytes of live objects in the heap of the Java process pid
// (a ZooKeeper server): `jcmd <pid> GC.class_histogram` collects the whole
// heap first, so what it counts is what the server holds, not garbage.
func LiveHeap(ctx context.Context, pid int) (int64, error) {
	h, err := LiveHeapByClass(ctx, pid)
	return h.Total, err
}

// Histogram is a class histogram of a heap: its live bytes in all and by
// class.
type Histogram struct {
	Total   int64
	ByClass map[string]int64 // bytes
	Count   map[string]int64 // instances
}

// LiveHeapByClass is LiveHeap with the bytes of each class.
func LiveHeapByClass(ctx context.Context, pid int) (Histogram, error) {
	out, err := exec.CommandContext(ctx, "jcmd", strconv.Itoa(pid), "GC.class_histogram").Output()
	if err != nil {
		return Histogram{}, fmt.Errorf("jcmd %d GC.class_histogram: %w", pid, err)
	}
	return parseHistogram(string(out))
}

// histogramTotal reads the bytes of a class histogram's last line,
// "Total <instances> <bytes>".
func histogramTotal(histogram string) (int64, error) {
	h, err := parseHistogram(histogram)
	return h.Total, err
}

// parseHistogram reads a class histogram: rows "<n>: <instances> <bytes>
// <class> [(module)]" and the last line, "Total <instances> <bytes>".
func parseHistogram(histogram string) (Histogram, error) {
	h := Histogram{Total: -1, ByClass: map[string]int64{}, Count: map[string]int64{}}
	for line := range strings.Lines(histogram) {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "Total":
			n, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return h, fmt.Errorf("class histogram: %q: %w", line, err)
			}
			h.Total = n
		case len(f) >= 4 && strings.HasSuffix(f[0], ":"):
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				h.ByClass[f[3]] += n
			}
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				h.Count[f[3]] += n
			}
		}
	}
	if h.Total < 0 {
		return h, fmt.Errorf("class histogram without a Total line: %.200q", histogram)
	}
	return h, nil
}

// ZooKeeper keeps a node as a DataNode with its StatPersisted, so the
// growth of their count is the nodes made; byte arrays hold the nodes'
// paths, names and data, everything else is the structures around them.
const (
	classStat  = "org.apache.zookeeper.data.StatPersisted"
	classBytes = "[B"
)

// NodeGrowth is what a heap grew by per job, from before to after:
// ZooKeeper nodes, bytes of byte arrays (the nodes' paths, names and
// data), and bytes of everything else (the nodes' structures: DataNode,
// StatPersisted, map entries, String headers, the parents' child sets).
func NodeGrowth(before, after Histogram, jobs int) (nodes, arrays, structures float64) {
	per := func(d int64) float64 { return float64(d) / float64(jobs) }
	nodes = per(after.Count[classStat] - before.Count[classStat])
	arrays = per(after.ByClass[classBytes] - before.ByClass[classBytes])
	structures = per(after.Total-before.Total) - arrays
	return nodes, arrays, structures
}

// HeapGrowth is what the classes of a heap grew by from one histogram to
// another, per job: the n largest, the rest together.
func HeapGrowth(before, after Histogram, jobs, n int) string {
	type row struct {
		class string
		bytes float64
	}
	var rows []row
	for class, b := range after.ByClass {
		if d := float64(b-before.ByClass[class]) / float64(jobs); d != 0 {
			rows = append(rows, row{class, d})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), strings.Compare(a.class, b.class)) })
	var s strings.Builder
	rest := 0.0
	for i, r := range rows {
		if i < n {
			fmt.Fprintf(&s, " %s %.0f,", r.class, r.bytes)
		} else {
			rest += r.bytes
		}
	}
	fmt.Fprintf(&s, " other %.0f", rest)
	return strings.TrimPrefix(s.String(), " ")
}

// committedLogTxns is how many of its last transactions a ZooKeeper server
// keeps in memory (zookeeper.commitLogCount, default 500), for followers
// that fall behind: its heap holds them besides the tree.
const committedLogTxns = 500

// FlushCommittedLog fills the server's in-memory log of recent
// transactions with small ones (a few more than it keeps), so that what a
// heap histogram counts is the tree, not the last multis that wrote it:
// grouped commits of many jobs each, or a batch's creation in multis of
// 128 KiB, would otherwise weigh tens of MB.
func FlushCommittedLog(ctx context.Context, servers []string) error {
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer c.Close()
	p := root("flush")
	if _, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		return fmt.Errorf("flushing the committed log: %w", err)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	const writers = 16
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < committedLogTxns+100 && ctx.Err() == nil; i += writers {
				if _, err := c.Set(p, nil, -1); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return fmt.Errorf("flushing the committed log: %w", err)
	}
	if err := c.Delete(p, -1); err != nil {
		return fmt.Errorf("flushing the committed log: %w", err)
	}
	return nil
}
