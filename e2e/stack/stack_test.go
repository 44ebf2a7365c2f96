package stack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// TestStackStartsEveryServiceAndStopsWithoutLeftovers builds the eight
// binaries, runs them against a ZooKeeper of their own, finds the console
// showing the queue through the batcher, and stops them: each exits 0 and
// leaves no worker entry behind.
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
	q, err := session.Connect(ctx, session.Options{Servers: s.Servers, Root: s.Root})
	if err != nil {
		s.Stop(ctx)
		t.Fatal(err)
	}
	defer q.Close()
	defer s.Stop(ctx)
	resp, err := http.Get("http://" + s.ConsoleAddr() + "/api/queue")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"paused":false`) {
		t.Errorf("the console's GET /api/queue: %d %v\n%s", resp.StatusCode, err, body)
	}
	if err := s.StopServices(ctx); err != nil {
		t.Fatalf("stopping the services: %v", err)
	}
	workers, err := admin.New(q).Queue.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(workers) != 0 {
		t.Errorf("worker entries left after a clean stop: %v", workers)
	}
}

// TestEveryProcessOfAStackGetsPortsOfItsOwn plans a stack of many replicas
// (without starting it): no two processes may be given the same port, or
// the second to start could not bind it.
func TestEveryProcessOfAStackGetsPortsOfItsOwn(t *testing.T) {
	const replicas = 20
	opts := Options{Replicas: map[string]int{}}
	for _, name := range Services {
		opts.Replicas[name] = replicas
	}
	// The caller holds ports of its own beside the stack's (as the
	// robustness suite does for the failpoints' endpoints).
	callersPorts := freeport.Reserve()
	defer callersPorts.Close()
	callers, err := callersPorts.Take(2 * len(Services))
	if err != nil {
		t.Fatal(err)
	}
	s := &Stack{opts: opts, procs: map[string][]*Proc{}, ports: freeport.Reserve()}
	defer s.ports.Close()
	if err := s.plan(); err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // address → the process given it
	for _, a := range callers {
		owner[a.String()] = "the caller"
	}
	for _, name := range Binaries {
		procs := s.Procs(name)
		if want := map[bool]int{true: 1, false: replicas}[name == Console]; len(procs) != want {
			t.Fatalf("%s: %d processes, want %d", name, len(procs), want)
		}
		for _, p := range procs {
			id := fmt.Sprintf("%s-%d", p.Service, p.Index)
			for _, addr := range []string{p.Addr, p.Metrics, p.Console} {
				if addr == "" {
					continue
				}
				if other, taken := owner[addr]; taken {
					t.Errorf("%s is given to both %s and %s", addr, other, id)
				}
				owner[addr] = id
			}
		}
	}
}
