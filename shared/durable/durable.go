// Package durable makes what a process wrote to a file system durable, and
// lets the goroutines that need it at the same moment share the cost: on
// Linux one syncfs(2) of the file system, a single device flush, covers
// every caller that asked before it began, instead of an fsync per file and
// folder each, and a round waits a moment (Syncer.Linger) for more callers.
// Elsewhere each caller fsyncs its own paths.
package durable

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Syncer groups the syncs of concurrent callers. The zero value is ready;
// a Syncer must not be copied after first use.
type Syncer struct {
	// Linger is how long a round waits for more callers before it begins.
	// Each round flushes the device once, however many callers share it:
	// with many jobs finishing a step each millisecond, a short wait saves
	// most rounds (the processor's syncs per job halved in the benchmark).
	Linger time.Duration

	mu     sync.Mutex
	groups map[string]*group // by the folder named (one file system each)
	// syncFS syncs a file system (syncFileSystem; tests count the rounds).
	syncFS func(root string) error
}

// DefaultLinger is the services' Syncer.Linger unless configured.
const DefaultLinger = 2 * time.Millisecond

// group is the syncs of one file system: whether a round is under way (or
// lingering), and the round that callers join: it has not begun, so
// everything they wrote before asking is covered by it.
type group struct {
	running bool
	open    *round
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
	if g.open == nil {
		g.open = &round{done: make(chan struct{})}
	}
	r := g.open
	if !g.running {
		g.running = true
		go s.run(root, g)
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run syncs round after round while callers keep joining: each round
// lingers, then closes to newcomers and syncs.
func (s *Syncer) run(root string, g *group) {
	syncFS := s.syncFS
	if syncFS == nil {
		syncFS = syncFileSystem
	}
	for {
		s.mu.Lock()
		if g.open == nil {
			g.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if s.Linger > 0 {
			time.Sleep(s.Linger)
		}
		s.mu.Lock()
		r := g.open
		g.open = nil
		s.mu.Unlock()
		r.err = syncFS(root)
		close(r.done)
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
