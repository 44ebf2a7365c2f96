package session

import (
	"context"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// newSession connects a session with a fresh root prefix, closed when the
// test ends.
func newSession(t testing.TB) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Connect(ctx, Options{Servers: zktest.Servers(t), Root: zktest.Root(t), SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
