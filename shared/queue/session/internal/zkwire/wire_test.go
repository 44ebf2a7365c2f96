package zkwire

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-zookeeper/zk"
)

// A wireConn sits between go-zookeeper and a server; these tests play
// both over a pipe, frame by frame.

// frame is a request as go-zookeeper writes one: length, xid, operation,
// body.
func frame(xid, op int32, body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, uint32(op))
	return append(b, body...)
}

// answer is a server's answer: length, xid, zxid, error code, body.
func answer(xid int32, zxid int64, code int32, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(16+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint64(b, uint64(zxid))
	b = binary.BigEndian.AppendUint32(b, uint32(code))
	return append(b, body...)
}

// connectRequest is the request that opens a connection, as go-zookeeper
// writes it: protocol version, last zxid seen, timeout, session id,
// password.
func connectRequest(lastZxid int64) []byte {
	body := binary.BigEndian.AppendUint32(nil, 0)
	body = binary.BigEndian.AppendUint64(body, uint64(lastZxid))
	body = binary.BigEndian.AppendUint32(body, 10000)
	body = binary.BigEndian.AppendUint64(body, 0)
	body = binary.BigEndian.AppendUint32(body, 16)
	body = append(body, make([]byte, 16)...)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// readFrame reads one length-prefixed frame, whole.
func readFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	f, err := readWhole(r)
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	return f
}

func readWhole(r io.Reader) ([]byte, error) {
	head := make([]byte, 4)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	rest := make([]byte, binary.BigEndian.Uint32(head))
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, err
	}
	return append(head, rest...), nil
}

func frameXid(f []byte) int32 { return int32(binary.BigEndian.Uint32(f[4:])) }

// opened is a wireConn over a pipe, with the connection opened as
// go-zookeeper opens it: the connect request written and its answer read.
func opened(t *testing.T, w *wire) (wc *wireConn, server net.Conn) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	wc = w.attach(client)
	go wc.Write(connectRequest(0))
	readFrame(t, server)
	connectAnswer := binary.BigEndian.AppendUint32(nil, 36)
	connectAnswer = append(connectAnswer, make([]byte, 36)...)
	go server.Write(connectAnswer)
	if got := readFrame(t, wc); len(got) != len(connectAnswer) {
		t.Fatalf("go-zookeeper read a connect answer of %d bytes, want %d", len(got), len(connectAnswer))
	}
	return wc, server
}

// missingNode is the answer to a multiRead of one node that is missing:
// an error result, then the header that ends the answer.
func missingNode() []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(0xffffffff)) // type: error
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	b = binary.BigEndian.AppendUint32(b, uint32(0xffffff9b)) // -101: no node
	b = binary.BigEndian.AppendUint32(b, uint32(0xffffffff))
	b = append(b, 1)
	return binary.BigEndian.AppendUint32(b, 0xffffffff)
}

// sideRead is a request of ours (a multiRead of one path) on w, its
// outcome on the channel returned.
func sideRead(w *wire) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := w.multiRead([]string{"/a"})
		done <- err
	}()
	return done
}

func TestRequestsOfOursGoOutOnlyAfterGoZookeeperResentItsCredentials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWire(1 << 20)
		wc, server := opened(t, w)
		frames := make(chan []byte, 8)
		go func() {
			for {
				f, err := readWhole(server)
				if err != nil {
					return
				}
				frames <- f
			}
		}()
		done := sideRead(w)
		synctest.Wait()
		select {
		case f := <-frames:
			t.Fatalf("a frame (xid %d) went out before go-zookeeper resent the session's credentials", frameXid(f))
		default:
		}
		// go-zookeeper sends the session's credentials again, then its
		// send loop begins: ours may go only after that.
		wc.Write(frame(1, opCodeSetAuth, "digest"))
		synctest.Wait()
		if f := <-frames; frameXid(f) != 1 {
			t.Fatalf("first frame after the connect request has xid %d, want go-zookeeper's setAuth (1)", frameXid(f))
		}
		select {
		case f := <-frames:
			t.Fatalf("a frame (xid %d) went out before go-zookeeper's send loop began", frameXid(f))
		default:
		}
		wc.Write(frame(2, 3, "/exists"))
		synctest.Wait()
		if f := <-frames; frameXid(f) != 2 {
			t.Fatalf("second frame has xid %d, want go-zookeeper's exists (2)", frameXid(f))
		}
		ours := <-frames
		if xid := frameXid(ours); xid > sideXidTop {
			t.Fatalf("third frame has xid %d, want one of ours (<= %d)", xid, sideXidTop)
		}
		// The server answers ours, then go-zookeeper's: go-zookeeper reads
		// only its own, byte for byte.
		go func() {
			server.Write(answer(frameXid(ours), 40, 0, missingNode()))
			server.Write(answer(2, 41, 0, []byte("stat")))
		}()
		if got, want := readFrame(t, wc), answer(2, 41, 0, []byte("stat")); string(got) != string(want) {
			t.Errorf("go-zookeeper read % x, want % x", got, want)
		}
		if err := <-done; err != nil {
			t.Errorf("our multiRead: %v", err)
		}
		server.Close()
	})
}

func TestTheRequestOpeningAConnectionCarriesTheLastZxidOurAnswersCarried(t *testing.T) {
	w := newWire(1 << 20)
	wc, server := opened(t, w)
	go io.Copy(io.Discard, wc) // go-zookeeper's receiving loop
	done := sideRead(w)
	go wc.Write(frame(1, 3, "/exists"))
	readFrame(t, server)
	ours := readFrame(t, server)
	go server.Write(answer(frameXid(ours), 0x7777, 0, missingNode()))
	if err := <-done; err != nil {
		t.Fatalf("our multiRead: %v", err)
	}
	// go-zookeeper saw zxids up to 5 only; the next connection must not
	// reach a server behind 0x7777.
	client, server2 := net.Pipe()
	defer client.Close()
	defer server2.Close()
	next := w.attach(client)
	go next.Write(connectRequest(5))
	got := readFrame(t, server2)
	if zxid := int64(binary.BigEndian.Uint64(got[8:])); zxid != 0x7777 {
		t.Errorf("the connect request says last zxid seen %#x, want %#x", zxid, 0x7777)
	}
	// A session the server expired starts afresh.
	w.expired()
	client3, server3 := net.Pipe()
	defer client3.Close()
	defer server3.Close()
	third := w.attach(client3)
	go third.Write(connectRequest(0))
	if zxid := int64(binary.BigEndian.Uint64(readFrame(t, server3)[8:])); zxid != 0 {
		t.Errorf("after expiry the connect request says last zxid seen %#x, want 0", zxid)
	}
}

func TestRequestsOfOursEndWithTheirConnection(t *testing.T) {
	w := newWire(1 << 20)
	wc, server := opened(t, w)
	done := sideRead(w)
	go wc.Write(frame(1, 3, "/exists"))
	readFrame(t, server)
	readFrame(t, server) // ours, never answered
	server.Close()
	buf := make([]byte, 4)
	if _, err := wc.Read(buf); err == nil {
		t.Fatal("go-zookeeper read from a closed connection")
	}
	select {
	case err := <-done:
		if !errors.Is(err, zk.ErrConnectionClosed) {
			t.Errorf("our request ended with %v, want %v", err, zk.ErrConnectionClosed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("our request still waits on a closed connection")
	}
	// A request made then fails at once, as go-zookeeper's do.
	if err := <-sideRead(w); !errors.Is(err, zk.ErrConnectionClosed) {
		t.Errorf("a request on the closed connection: %v, want %v", err, zk.ErrConnectionClosed)
	}
}

// An idle connection is pinged every period (go-zookeeper pings every
// third of the session timeout only); one the server keeps busy is not.
func TestAnIdleConnectionIsPingedEveryPeriodAndABusyOneNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWire(1 << 20)
		wc, server := opened(t, w)
		go wc.Write(frame(1, 3, "/exists")) // go-zookeeper's send loop begins
		readFrame(t, server)
		go io.Copy(io.Discard, wc) // go-zookeeper's receiving loop
		frames := make(chan []byte, 64)
		go func() {
			for {
				f, err := readWhole(server)
				if err != nil {
					return
				}
				frames <- f
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.keepAlive(ctx, time.Second)
		time.Sleep(3500 * time.Millisecond) // synctest's time: an idle connection for 3.5 s
		if n := len(frames); n != 3 {
			t.Fatalf("%d frames in 3.5s of an idle connection, want 3 pings", n)
		}
		for range 3 {
			f := <-frames
			if xid, op := frameXid(f), int32(binary.BigEndian.Uint32(f[8:])); xid != -2 || op != opCodePing {
				t.Fatalf("frame xid %d op %d, want a ping (xid -2, op %d)", xid, op, opCodePing)
			}
		}
		// An answer of go-zookeeper's every 400ms: the connection is not idle.
		for range 10 {
			server.Write(answer(7, 50, 0, nil))
			time.Sleep(400 * time.Millisecond) // synctest's time: 400 ms between answers
		}
		if n := len(frames); n != 0 {
			t.Fatalf("%d pings on a connection answering every 400ms, want none", n)
		}
		cancel()
		server.Close()
	})
}
