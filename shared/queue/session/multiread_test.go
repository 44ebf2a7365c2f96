package session

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
)

func TestConcurrentReadsGoAsOneMultiReadAndEachGetsItsOwnNodes(t *testing.T) {
	s := newSession(t)
	ctx := testCtx(t)
	const callers, each = 10, 3
	nodes := dataNodes(t, s, "read-group", callers*each)
	send, gt := gated(s.conn.MultiRead)
	s.nodes.reads = newReadGroup(send, s.nodes.reads.maxCost)
	first := make(chan error, 1)
	go func() {
		_, err := s.nodes.Read(ctx, nodes[:1])
		first <- err
	}()
	<-gt.held
	var wg sync.WaitGroup
	for k := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each caller's own nodes, and one that is missing.
			paths := append([]string{s.p.Root() + "/read-group/missing"}, nodes[k*each:(k+1)*each]...)
			read, err := s.nodes.Read(ctx, paths)
			if err != nil {
				t.Errorf("caller %d: %v", k, err)
				return
			}
			if read[0].Stat != nil {
				t.Errorf("caller %d: a missing node came back with a stat", k)
			}
			for j := range each {
				if want := fmt.Sprintf("data %d", k*each+j); string(read[j+1].Data) != want {
					t.Errorf("caller %d, node %d: %q, want %q", k, j, read[j+1].Data, want)
				}
			}
		}()
	}
	waitQueued(t, s.nodes.reads, callers)
	gt.open()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := gt.requests.Load(); got != 2 {
		t.Errorf("%d requests, want 2: the first alone, the %d callers behind it together", got, callers)
	}
}

func TestReadsWithoutMultiReadGoNodeByNode(t *testing.T) {
	s := newSession(t)
	ctx := testCtx(t)
	s.nodes.reads = nil // as with a server before ZooKeeper 3.6
	nodes := dataNodes(t, s, "read-each", 1)
	read, err := s.nodes.Read(ctx, []string{nodes[0], s.p.Root() + "/read-each/missing"})
	if err != nil {
		t.Fatal(err)
	}
	if string(read[0].Data) != "data 0" || read[0].Stat == nil || read[1].Stat != nil {
		t.Errorf("read %+v", read)
	}
}

func TestReadsWhoseAnswerMightNotFitTheBufferGoInMultiReadsThatDo(t *testing.T) {
	s := newSession(t)
	ctx := testCtx(t)
	paths := dataNodes(t, s, "read-bounded", 10)
	// A buffer for 4 nodes of the largest size a node can have.
	const fit = 4
	var mu sync.Mutex
	largest := 0
	s.nodes.reads = newReadGroup(func(paths []string) ([]zkwire.ReadResult, error) {
		mu.Lock()
		largest = max(largest, len(paths))
		mu.Unlock()
		return s.conn.MultiRead(paths)
	}, fit*maxNodeRead)
	read, err := s.nodes.Read(ctx, paths)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range read {
		if want := fmt.Sprintf("data %d", i); string(r.Data) != want {
			t.Errorf("node %d: %q, want %q", i, r.Data, want)
		}
	}
	if largest > fit {
		t.Errorf("a multiRead of %d nodes; the buffer holds the answer of %d", largest, fit)
	}
}

// dataNodes creates n nodes holding "data 0", "data 1", … in a new folder
// under s's root and returns their paths.
func dataNodes(t *testing.T, s *Session, folder string, n int) []string {
	t.Helper()
	ctx := testCtx(t)
	base := s.p.Root() + "/" + folder
	if err := s.nodes.Ensure(ctx, base); err != nil {
		t.Fatal(err)
	}
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("%s/n%d", base, i)
		if _, err := s.nodes.Create(ctx, paths[i], fmt.Appendf(nil, "data %d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}
