package ctxio

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
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
