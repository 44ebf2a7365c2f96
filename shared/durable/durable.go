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
// folders, renames, links) is durable. paths are what the caller wrote, in
// the order they must be synced where the system syncs one path at a time
// (files, then folders deepest first); on Linux they are not needed. ctx
// ends the wait, not a sync under way.
func (s *Syncer) Sync(ctx context.Context, root string, paths []string) error {
	if !groupable {
		return syncPaths(paths)
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
