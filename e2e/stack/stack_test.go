package stack

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
)

// TestStackStartsEveryServiceAndStopsWithoutLeftovers builds the seven
// binaries, runs them against a ZooKeeper of their own, and stops them: each
// exits 0 and leaves no worker entry behind.
func TestStackStartsEveryServiceAndStopsWithoutLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := Build(ctx, filepath.Join("..", ".."), bin); err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Options{Dir: dir, BinDir: bin, ProfilesDir: filepath.Join("..", "..", "examples", "profiles")})
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Connect(ctx, queue.Options{Servers: s.Servers, Root: s.Root})
	if err != nil {
		s.Stop(ctx)
		t.Fatal(err)
	}
	defer q.Close()
	defer s.Stop(ctx)
	if err := s.StopServices(ctx); err != nil {
		t.Fatalf("stopping the services: %v", err)
	}
	workers, err := q.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(workers) != 0 {
		t.Errorf("worker entries left after a clean stop: %v", workers)
	}
}
