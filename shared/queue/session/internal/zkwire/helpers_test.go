package zkwire

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

// connect opens a connection to the test server, once it has a session,
// and creates a root no other test uses; both go when the test ends.
func connect(t *testing.T) (*Conn, string) {
	t.Helper()
	c, events, err := Connect(Options{Servers: zktest.Servers(t), SessionTimeout: 4 * time.Second,
		MaxResponseBytes: 4 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := hasSession(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range events {
		}
	}()
	root := zktest.Root(t)
	path := ""
	for _, part := range strings.Split(root[1:], "/") {
		path += "/" + part
		if _, err := c.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	return c, root
}

// hasSession waits for the event of a session opened.
func hasSession(ctx context.Context, events <-chan zk.Event) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-events:
			switch {
			case !ok:
				return errors.New("the connection closed before it had a session")
			case ev.Type == zk.EventSession && ev.State == zk.StateHasSession:
				return nil
			}
		}
	}
}
