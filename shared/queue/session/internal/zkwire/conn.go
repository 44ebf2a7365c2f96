package zkwire

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-zookeeper/zk"
)

// Options configure a connection.
type Options struct {
	// Servers are ZooKeeper "host:port" addresses.
	Servers []string
	// SessionTimeout is the session timeout asked for.
	SessionTimeout time.Duration
	// MaxResponseBytes bounds one answer from the server, go-zookeeper's
	// and this package's alike.
	MaxResponseBytes int
	// Logger receives go-zookeeper's logs, at debug level.
	Logger *slog.Logger
}

// Conn is go-zookeeper's connection, with the operations this package adds
// on it: Multi (go-zookeeper's, framed here) and MultiRead. Every other
// call is go-zookeeper's own.
type Conn struct {
	*zk.Conn
	w *wire
	// end ends the pings and the passing on of events.
	end context.CancelFunc
}

// Connect opens go-zookeeper's connection to the servers, dialed and paced
// as servers.go says, its idle connection pinged as keepAlive says. The
// events are go-zookeeper's, once this package has seen them.
func Connect(opts Options) (*Conn, <-chan zk.Event, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	w := newWire(opts.MaxResponseBytes)
	w.ring = newServerRing(opts.SessionTimeout)
	zc, events, err := zk.Connect(opts.Servers, opts.SessionTimeout,
		zk.WithLogger(logger{opts.Logger}),
		zk.WithMaxBufferSize(opts.MaxResponseBytes),
		zk.WithHostProvider(w.ring),
		zk.WithDialer(w.dial),
	)
	if err != nil {
		return nil, nil, err
	}
	ctx, end := context.WithCancel(context.Background())
	c := &Conn{Conn: zc, w: w, end: end}
	go w.keepAlive(ctx, max(opts.SessionTimeout/20, 50*time.Millisecond))
	return c, c.follow(ctx, events), nil
}

// follow passes go-zookeeper's events on, acting on a session's: a session
// the server expired starts afresh (wire.expired), and on a session
// opened, go-zookeeper sends a request of its own if it has none to send
// (ours wait for its first on the connection, see wire.go). It ends with
// ctx (go-zookeeper never closes its channel).
func (c *Conn) follow(ctx context.Context, in <-chan zk.Event) <-chan zk.Event {
	out := make(chan zk.Event, cap(in))
	go func() {
		for {
			var ev zk.Event
			select {
			case <-ctx.Done():
				return
			case ev = <-in:
			}
			if ev.Type == zk.EventSession {
				switch ev.State {
				case zk.StateHasSession:
					if !c.w.ready() {
						go c.Conn.Exists("/")
					}
				case zk.StateExpired:
					c.w.expired()
				}
			}
			select {
			case <-ctx.Done():
				return
			case out <- ev:
			}
		}
	}()
	return out
}

// Multi is go-zookeeper's Multi(ops...), encoded and decoded here (see
// multi.go): same operations, same answers.
func (c *Conn) Multi(ops ...any) ([]zk.MultiResponse, error) { return c.w.multiWrite(ops) }

// MultiRead reads paths in one request (ZooKeeper 3.6 and later; see
// multiread.go). Each node's answer stands alone: a missing node is
// zk.ErrNoNode in its result, not an error of the call.
func (c *Conn) MultiRead(paths []string) ([]ReadResult, error) { return c.w.multiRead(paths) }

// Close ends the connection: the attempts to reconnect, the pings, and
// go-zookeeper's connection.
func (c *Conn) Close() {
	c.w.ring.close()
	c.end()
	c.Conn.Close()
}

// logger routes go-zookeeper's printf logs into slog at debug level.
type logger struct{ l *slog.Logger }

func (z logger) Printf(format string, args ...any) {
	z.l.Debug(fmt.Sprintf(format, args...), "component", "zookeeper-client")
}
