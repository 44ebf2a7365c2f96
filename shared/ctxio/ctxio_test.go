package ctxio

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadsStopWithTheContextsCause(t *testing.T) {
	cause := errors.New("job lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	r := Reader(ctx, strings.NewReader("abcdef"))
	p := make([]byte, 3)
	if n, err := r.Read(p); n != 3 || err != nil || string(p) != "abc" {
		t.Fatalf("first read %d %q %v", n, p, err)
	}
	cancel(cause)
	if n, err := r.Read(p); n != 0 || !errors.Is(err, cause) {
		t.Errorf("read after the context ended: %d, %v; want 0, the cause", n, err)
	}
	if _, err := io.ReadAll(Reader(context.Background(), strings.NewReader("whole"))); err != nil {
		t.Errorf("read to the end: %v", err)
	}
}

// TestIdleBoundCutsOnlyAWaitThatOutlastsIt: a read that returns in time
// is not cut, one that waits past the bound is, by Cut ending it.
func TestIdleBoundCutsOnlyAWaitThatOutlastsIt(t *testing.T) {
	unblock := make(chan struct{})
	var once sync.Once
	b := IdleBound{After: 50 * time.Millisecond, Cut: func() { once.Do(func() { close(unblock) }) }}
	defer b.Stop()
	if n, err := b.Read(func() (int, error) { return 1, nil }); n != 1 || err != nil {
		t.Fatalf("a read in time: %d, %v", n, err)
	}
	_, err := b.Read(func() (int, error) {
		<-unblock // only Cut ends this wait
		return 0, io.ErrUnexpectedEOF
	})
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("the cut read: %v", err)
	}
}
