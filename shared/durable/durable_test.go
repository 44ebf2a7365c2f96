package durable

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestSyncMakesWhatWasWrittenDurable(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	var s Syncer
	if err := s.Sync(context.Background(), dir, []string{p}, []string{dir}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(context.Background(), filepath.Join(dir, "missing"), nil, []string{filepath.Join(dir, "missing")}); err == nil {
		t.Error("syncing a folder that does not exist succeeded")
	}
}

// gate is a file system sync that waits to be let through, counting rounds.
type gate struct {
	rounds  atomic.Int64
	started chan struct{}
	release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gate) sync(string) error {
	g.rounds.Add(1)
	g.started <- struct{}{}
	<-g.release
	return nil
}

func TestCallersArrivingDuringASyncShareTheNextOne(t *testing.T) {
	if !groupable {
		t.Skip("this system syncs each caller's paths")
	}
	synctest.Test(t, func(t *testing.T) {
		g := newGate()
		s := &Syncer{syncFS: g.sync}
		ctx := context.Background()
		first := make(chan error, 1)
		go func() { first <- s.Sync(ctx, "/root", nil, nil) }()
		<-g.started // round 1 is under way
		const late = 20
		var returned atomic.Int64
		var wg sync.WaitGroup
		for range late {
			wg.Go(func() {
				if err := s.Sync(ctx, "/root", nil, nil); err != nil {
					t.Error(err)
				}
				returned.Add(1)
			})
		}
		synctest.Wait() // every late caller waits
		g.release <- struct{}{}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		<-g.started // round 2
		synctest.Wait()
		// Their writes may postdate round 1's start: it must not answer them.
		if n := returned.Load(); n != 0 {
			t.Errorf("%d late callers returned on the round that began before they asked", n)
		}
		close(g.release)
		wg.Wait()
		if n := g.rounds.Load(); n != 2 {
			t.Errorf("%d file system syncs for 1+%d callers; want 2 (the late ones share one)", n, late)
		}
	})
}

func TestCallersArrivingDuringTheLingerShareItsRound(t *testing.T) {
	if !groupable {
		t.Skip("this system syncs each caller's paths")
	}
	synctest.Test(t, func(t *testing.T) {
		var rounds atomic.Int64
		s := &Syncer{Linger: 2 * time.Millisecond, syncFS: func(string) error { rounds.Add(1); return nil }}
		first := make(chan error, 1)
		go func() { first <- s.Sync(context.Background(), "/root", nil, nil) }()
		time.Sleep(time.Millisecond) // synctest's time: within the first caller's linger
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				if err := s.Sync(context.Background(), "/root", nil, nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if n := rounds.Load(); n != 1 {
			t.Errorf("%d file system syncs for 21 callers within one linger; want 1", n)
		}
		// A caller after the round has ended gets a round of its own.
		if err := s.Sync(context.Background(), "/root", nil, nil); err != nil {
			t.Fatal(err)
		}
		if n := rounds.Load(); n != 2 {
			t.Errorf("%d file system syncs after a later caller; want 2", n)
		}
	})
}

func TestAWaitEndsWithItsContext(t *testing.T) {
	if !groupable {
		t.Skip("this system syncs each caller's paths")
	}
	g := newGate()
	s := &Syncer{syncFS: g.sync}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Sync(ctx, "/root", nil, nil) }()
	<-g.started
	cancel()
	if err := <-done; err == nil {
		t.Error("Sync returned no error after its context ended mid-sync")
	}
	close(g.release)
}

func TestFoldersAreSyncedDeepestFirst(t *testing.T) {
	got := deepestFirst([]string{"/s/o", "/s/o/v1/producer/sub", "/s/o/v1", "/s/o/v1/system", "/s/o/v1/producer"})
	want := []string{"/s/o/v1/producer/sub", "/s/o/v1/system", "/s/o/v1/producer", "/s/o/v1", "/s/o"}
	if !slices.Equal(got, want) {
		t.Errorf("deepestFirst = %v, want %v", got, want)
	}
}
