// Package durable makes what a process wrote to a file system durable, and
// lets the goroutines that need it at the same moment share the cost: on
// Linux one syncfs(2) of the file system, a single device flush, covers
// every caller that asked before it began, instead of an fsync per file and
// folder each. Elsewhere each caller fsyncs its own paths.
package durable

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Syncer groups the syncs of concurrent callers. The zero value is ready;
// a Syncer must not be copied after first use.
type Syncer struct {
	mu     sync.Mutex
	groups map[string]*group // by the folder named (one file system each)
	// syncFS syncs a file system (syncFileSystem; tests count the rounds).
	syncFS func(root string) error
}

// group is the syncs of one file system: the round under way, if any, and
// the round that callers arriving meanwhile join (it starts when the one
// under way ends: their writes may have come after it began).
type group struct {
	running bool
	next    *round
}

type round struct {
	done chan struct{}
	err  error
}

// Sync returns once everything written under root before the call (files,
// folders, renames, links) is durable. files and dirs are what the caller
// wrote (a folder counts when an entry was added to it or removed), for
// systems that sync one path at a time: files first, then folders, deepest
// first. On Linux they are not needed. ctx ends the wait, not a sync under
// way.
func (s *Syncer) Sync(ctx context.Context, root string, files, dirs []string) error {
	if !groupable {
		return syncPaths(append(slices.Clone(files), deepestFirst(dirs)...))
	}
	s.mu.Lock()
	if s.groups == nil {
		s.groups = map[string]*group{}
	}
	g := s.groups[root]
	if g == nil {
		g = &group{}
		s.groups[root] = g
	}
	r := g.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		g.next = r
	}
	if !g.running {
		g.running, g.next = true, nil
		go s.run(root, g, r)
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run syncs round after round while callers keep joining.
func (s *Syncer) run(root string, g *group, r *round) {
	syncFS := s.syncFS
	if syncFS == nil {
		syncFS = syncFileSystem
	}
	for r != nil {
		r.err = syncFS(root)
		close(r.done)
		s.mu.Lock()
		r, g.next = g.next, nil
		if r == nil {
			g.running = false
		}
		s.mu.Unlock()
	}
}

// deepestFirst orders folders so that each comes before its parent.
func deepestFirst(dirs []string) []string {
	out := slices.Clone(dirs)
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(b, string(filepath.Separator)) - strings.Count(a, string(filepath.Separator))
	})
	return out
}

// syncPaths fsyncs each path in turn.
func syncPaths(paths []string) error {
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
