package loopbacktest

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// A silent server takes the connection and sends nothing: a read waits
// until its deadline.
func TestASilentServerAcceptsAndNeverAnswers(t *testing.T) {
	c, err := net.Dial("tcp", Silent(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the deadline to pass with nothing read", n, err)
	}
}

// The connections it took are closed with the test: a peer still reading
// is told so rather than left waiting.
func TestASilentServersConnectionsCloseWhenTheTestEnds(t *testing.T) {
	var c net.Conn
	t.Run("server", func(t *testing.T) {
		var err error
		if c, err = net.Dial("tcp", Silent(t)); err != nil {
			t.Fatal(err)
		}
		// The server has taken it once it answers nothing to a read.
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		c.Read(make([]byte, 1))
	})
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a server whose test ended; want the connection closed", n)
	}
}
