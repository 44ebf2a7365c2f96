package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
	"github.com/ingestq/ingestq/shared/waittest"
)

// gate holds the first request of a send it wraps until open, so that the
// calls made meanwhile queue up behind it.
type gate struct {
	// requests counts what the send sent; held is closed once the first
	// request waits at the gate.
	requests atomic.Int64
	held     chan struct{}
	opened   chan struct{}
	once     sync.Once
}

// gated wraps send in a gate.
func gated[Op, Res any](send func([]Op) ([]Res, error)) (func([]Op) ([]Res, error), *gate) {
	g := &gate{held: make(chan struct{}), opened: make(chan struct{})}
	return func(ops []Op) ([]Res, error) {
		if g.requests.Add(1) == 1 {
			close(g.held)
			<-g.opened
		}
		return send(ops)
	}, g
}

// open lets the first request go, and every one after it.
func (g *gate) open() { g.once.Do(func() { close(g.opened) }) }

// gatedGroup is a multiGroup over s's connection, gated.
func gatedGroup(s *Session) (*multiGroup, *gate) {
	send, gt := gated(func(ops []any) ([]zk.MultiResponse, error) { return s.conn.Multi(ops...) })
	return newMultiGroup(send), gt
}

// waitQueued waits until n calls wait in g's queue.
func waitQueued[Op, Res any](t *testing.T, g *requestGroup[Op, Res], n int) {
	t.Helper()
	waittest.Until(t, 10*time.Second, func() error {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued < n {
			return fmt.Errorf("%d calls queued, want %d", queued, n)
		}
		return nil
	})
}

func TestConcurrentMultisGoAsOneRequestAndEachGetsItsOwnAnswer(t *testing.T) {
	s := newSession(t)
	ctx := testCtx(t)
	base := s.p.Root() + "/group-test"
	if err := s.nodes.Ensure(ctx, base); err != nil {
		t.Fatal(err)
	}
	// The first call holds the line; these take its place behind it. The
	// call named "taken" meets a node that already exists.
	if _, err := s.nodes.Create(ctx, base+"/taken", nil, 0); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "taken", "c", "d"}
	g, gt := gatedGroup(s)
	first := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, []any{createReq(s, base+"/first", nil, 0)})
		first <- err
	}()
	<-gt.held
	errs := make([]error, len(names))
	res := make([][]zk.MultiResponse, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = g.do(ctx, []any{
				createReq(s, base+"/"+name+"-x", nil, 0),
				createReq(s, base+"/"+name, nil, 0),
			})
		}()
	}
	waitQueued(t, g, len(names))
	gt.open()
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}

	for i, name := range names {
		switch {
		case name == "taken":
			// Its own answer: the second of its operations failed, and
			// nothing of it was applied.
			if !errors.Is(errs[i], zk.ErrNodeExists) || zkwire.FailedAt(res[i], errs[i]) != 1 {
				t.Errorf("%s: %v (operation %d), want %v at operation 1", name, errs[i], zkwire.FailedAt(res[i], errs[i]), zk.ErrNodeExists)
			}
			if ok, _, _ := s.conn.Exists(base + "/taken-x"); ok {
				t.Errorf("%s: the failed call's first operation was applied", name)
			}
		default:
			if errs[i] != nil || len(res[i]) != 2 || res[i][1].String != base+"/"+name {
				t.Errorf("%s: %v, %+v; want its two creations", name, errs[i], res[i])
			}
		}
	}
	// The first request alone, the five together, then (one of them having
	// failed) the failed one alone and the four others together.
	if got := gt.requests.Load(); got != 4 {
		t.Errorf("%d requests, want 4", got)
	}
}

func TestAMultiWithdrawnBeforeItIsSentIsNeverApplied(t *testing.T) {
	s := newSession(t)
	ctx := testCtx(t)
	base := s.p.Root() + "/group-withdrawn"
	if err := s.nodes.Ensure(ctx, base); err != nil {
		t.Fatal(err)
	}
	g, gt := gatedGroup(s)
	go g.do(ctx, []any{createReq(s, base+"/first", nil, 0)})
	<-gt.held
	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := g.do(callCtx, []any{createReq(s, base+"/withdrawn", nil, 0)})
		done <- err
	}()
	waitQueued(t, g, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("withdrawn call: %v, want %v", err, context.Canceled)
	}
	gt.open()
	// A later call is answered only after the queue was worked through.
	if _, err := g.do(ctx, []any{createReq(s, base+"/after", nil, 0)}); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := s.conn.Exists(base + "/withdrawn"); ok {
		t.Error("a multi withdrawn before it was sent was applied")
	}
}

func TestGroupingKeepsEachRequestUnderItsLimits(t *testing.T) {
	s := newSession(t)
	ctx := testCtx(t)
	base := s.p.Root() + "/group-limits"
	if err := s.nodes.Ensure(ctx, base); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		calls     int
		dataBytes int
		// requests after the gated first one
		want int64
	}{
		{"more calls than a request takes", groupMaxCalls + 1, 0, 2},
		{"more bytes than a request takes", 3, groupMaxBytes / 3, 2},
		{"one call larger than half a request goes alone", 1, groupMaxBytes, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, gt := gatedGroup(s)
			go g.do(ctx, []any{createReq(s, fmt.Sprintf("%s/%d-first", base, tc.calls), nil, 0)})
			<-gt.held
			var wg sync.WaitGroup
			errs := make([]error, tc.calls)
			for i := range tc.calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = g.do(ctx, []any{createReq(s, fmt.Sprintf("%s/%d-%d", base, tc.calls, i), make([]byte, tc.dataBytes), 0)})
				}()
			}
			if tc.calls > 1 {
				waitQueued(t, g, tc.calls)
			}
			gt.open()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			}
			if got := gt.requests.Load() - 1; got != tc.want {
				t.Errorf("%d requests after the first, want %d", got, tc.want)
			}
		})
	}
}

// createReq is a multi's creation of path with the session's ACL.
func createReq(s *Session, path string, data []byte, flags int32) *zk.CreateRequest {
	return &zk.CreateRequest{Path: path, Data: data, Acl: s.nodes.acl, Flags: flags}
}
