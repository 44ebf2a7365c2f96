package zktest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every connection with what it reads, on loopback.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Every read below is bounded: a proxy that loses bytes fails the test
	// instead of hanging it.
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

func TestProxyHoldsEachDirectionForItsDelay(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	toServer, toClient := Delay{Min: 30 * time.Millisecond, Max: 30 * time.Millisecond}, Delay{Min: 20 * time.Millisecond, Max: 40 * time.Millisecond}
	p.SetDelay(toServer, toClient)
	c := dialProxy(t, p)
	buf := make([]byte, 4)
	for i := range 5 {
		sent := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		// A lower bound only: a loaded machine makes a round trip slower,
		// never faster than the delays.
		if rtt, least := time.Since(sent), toServer.Min+toClient.Min; rtt < least {
			t.Fatalf("round trip %d took %s through the proxy, less than its delays (%s)", i, rtt, least)
		}
	}
}

func TestProxyDelaysNeverReorderAConnectionsBytes(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Draws from 0 to 20 ms each way: a later piece often draws less than
	// the one before it, and must still come after it.
	p.SetDelay(Delay{Max: 20 * time.Millisecond}, Delay{Max: 20 * time.Millisecond})
	c := dialProxy(t, p)
	var want bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		for i := range 2000 {
			piece := fmt.Appendf(nil, "piece %04d;", i)
			want.Write(piece)
			if _, err := c.Write(piece); err != nil {
				errc <- err
				return
			}
			if i%100 == 0 {
				time.Sleep(time.Millisecond) // separate reads on the way (only time splits a TCP stream), so pieces draw delays of their own
			}
		}
		errc <- nil
	}()
	got := make([]byte, len("piece 0000;")*2000)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		i := 0
		for i < len(got) && got[i] == want.Bytes()[i] {
			i++
		}
		t.Fatalf("bytes reordered through the proxy from offset %d: got %q, want %q", i, got[i:min(i+40, len(got))], want.Bytes()[i:min(i+40, len(got))])
	}
}

func TestProxyBlockCutsDelayedConnectionsAndRefusesNewOnes(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetDelay(Delay{Min: 50 * time.Millisecond}, Delay{Min: 50 * time.Millisecond})
	c := dialProxy(t, p)
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	p.Block()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("Block left a delayed connection open")
	}
	d := dialProxy(t, p)
	d.Write([]byte("x"))
	d.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := d.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection made while blocked was kept open (read %d bytes, %v)", n, err)
	}
	p.Unblock()
	e := dialProxy(t, p)
	if _, err := e.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(e, buf); err != nil || string(buf) != "back" {
		t.Fatalf("after Unblock: read %q, %v", buf, err)
	}
}

// A hung proxy stands for a frozen server: connections, old and new, are
// taken and answered nothing; once it resumes, both are answered.
func TestProxyHangTakesConnectionsAndAnswersNothingUntilResume(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old := dialProxy(t, p)
	p.Hang()
	if _, err := old.Write([]byte("old!")); err != nil {
		t.Fatal(err)
	}
	fresh := dialProxy(t, p) // taken, as a frozen server's kernel takes it
	if _, err := fresh.Write([]byte("new!")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{old, fresh} {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if n, err := c.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a hung proxy answered: read %d bytes, %v", n, err)
		}
	}
	p.Resume()
	for _, c := range []net.Conn{old, fresh} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("after Resume: read %q, %v", buf, err)
		}
	}
}
