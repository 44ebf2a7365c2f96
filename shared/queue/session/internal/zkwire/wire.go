package zkwire

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// The connection carries, beside go-zookeeper's requests, the multis and
// multiReads this package encodes itself (multi.go, multiread.go).
// go-zookeeper dials through wire.dial, and each connection it gets
// (wireConn) writes those requests between its own, with xids go-zookeeper
// never uses (below sideXidTop: go-zookeeper's are positive, the protocol's
// reserved ones -1 to -8), and takes their answers out of the stream before
// go-zookeeper reads it.
//
// A request of ours goes out only once go-zookeeper's send loop has
// written on the connection: it starts after go-zookeeper has sent the
// session's credentials again (a reconnect), which the server must see
// first. The highest zxid our answers carried is written into the request
// that opens each connection, as the last zxid the session has seen: a
// reconnect never reaches a server behind what this session has read or
// written.

// sideXidTop is the first xid of ours; each request takes the next one
// down, back to sideXidTop after math.MinInt32.
const sideXidTop = -1 << 16

// ZooKeeper's operation codes the wire looks for in go-zookeeper's frames.
const (
	opCodePing    = 11
	opCodeSetAuth = 100
	// codeRuntimeInconsistency is what an operation of a failed multi that
	// did not fail itself answers.
	codeRuntimeInconsistency = -2
)

// wire dials go-zookeeper's connections and sends our requests on the
// current one.
type wire struct {
	maxResponse int
	// ring paces the connections and bounds their opening (servers.go);
	// nil: go-zookeeper's own pace.
	ring *serverRing
	mu   sync.Mutex
	cur  *wireConn // the connection go-zookeeper uses (nil: none yet)
	xid  int32
	// lastZxid is the highest zxid an answer of ours carried in this
	// session (0 after it expired).
	lastZxid atomic.Int64
}

func newWire(maxResponse int) *wire { return &wire{maxResponse: maxResponse, xid: sideXidTop + 1} }

// dial is go-zookeeper's dialer: a connection whose reads are buffered (a
// response arrives in one system call, not two), which carries our
// requests too, and whose opening answer is awaited no longer than the
// ring's bound for its server (servers.go).
func (w *wire) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	bound := timeout
	if w.ring != nil {
		var err error
		if bound, err = w.ring.begin(address); err != nil {
			return nil, err
		}
	}
	conn, err := net.DialTimeout(network, address, min(timeout, bound))
	if err != nil {
		if w.ring != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				w.ring.silent(address, true)
			} else {
				w.ring.answered(address)
			}
		}
		return nil, err
	}
	wc := w.attach(conn)
	if w.ring != nil {
		wc.addr = address
		wc.openBy(time.Now().Add(bound))
	}
	return wc, nil
}

// attach makes conn the connection our requests go on.
func (w *wire) attach(conn net.Conn) *wireConn {
	wc := &wireConn{Conn: conn, w: w, r: bufio.NewReaderSize(conn, 64<<10), ready: make(chan struct{}),
		ended: make(chan struct{}), pending: map[int32]*sideCall{}}
	wc.cond = sync.NewCond(&wc.wmu)
	wc.heard.Store(time.Now().UnixNano())
	w.mu.Lock()
	old := w.cur
	w.cur = wc
	w.mu.Unlock()
	if old != nil {
		old.fail(zk.ErrConnectionClosed)
	}
	return wc
}

// expired forgets the zxids of a session the server expired: the next
// session starts afresh, as go-zookeeper's does.
func (w *wire) expired() { w.lastZxid.Store(0) }

// current is the connection to send on, once it is ready; nil while there
// is none (the caller's request fails as on a lost connection).
func (w *wire) current() *wireConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *wire) nextXid() int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.xid--
	if w.xid == math.MinInt32 {
		w.xid = sideXidTop
	}
	return w.xid
}

// ready reports whether the current connection can take our requests now.
func (w *wire) ready() bool {
	wc := w.current()
	if wc == nil {
		return false
	}
	select {
	case <-wc.ready:
		return true
	default:
		return false
	}
}

// encoder writes a request's body into buf, returning its length
// (zk.ErrShortBuffer when it does not fit).
type encoder interface {
	Encode(buf []byte) (int, error)
}

// decoder reads an answer's body.
type decoder interface {
	Decode(buf []byte) (int, error)
}

// request sends one request of ours and waits for its answer, as
// go-zookeeper's own calls do: until it comes or the connection ends
// (zk.ErrConnectionClosed, with the request's outcome unknown). An answer
// whose header carries an error is that error, its body not read.
func (w *wire) request(opcode int32, req encoder, res decoder) error {
	wc := w.current()
	if wc == nil {
		return zk.ErrConnectionClosed
	}
	call, err := wc.send(opcode, req)
	if err != nil {
		return err
	}
	<-call.done
	if call.err != nil {
		return call.err
	}
	if call.code != 0 {
		return codeError(call.code)
	}
	_, err = res.Decode(call.body)
	return err
}

// sideCall is one request of ours waiting for its answer.
type sideCall struct {
	done chan struct{}
	code int32  // the answer's error code
	body []byte // the answer after its header
	err  error  // the connection ended first
}

// wireConn is one connection of go-zookeeper's, carrying our requests too.
type wireConn struct {
	net.Conn
	w    *wire
	r    *bufio.Reader
	addr string // the server's, as the ring knows it ("" without a ring)
	// opening, until the answer that opens the connection has been read,
	// is when the wait for it ends: go-zookeeper's deadlines are held to it.
	opening atomic.Pointer[time.Time]

	// Writing: wmu keeps frames whole; a frame of go-zookeeper's written in
	// parts holds our requests back until its last part (cond).
	wmu    sync.Mutex
	cond   *sync.Cond
	opened bool // the request that opens the connection went out
	left   int  // bytes of go-zookeeper's current frame still to come
	head   []byte
	// ready is closed once go-zookeeper's send loop has written a frame:
	// its credentials went before it.
	ready     chan struct{}
	readyOnce sync.Once

	pmu     sync.Mutex
	pending map[int32]*sideCall
	failed  error         // set once the connection ended: new calls fail with it
	ended   chan struct{} // closed then

	// Reading, by go-zookeeper's receiving goroutine alone.
	answered bool // the answer that opens the connection was read
	pass     int  // bytes of go-zookeeper's current frame still to hand over
	// told: the connection's end was told to the ring.
	told bool
	// span is how long go-zookeeper's last read deadline ran: reading one
	// of our answers while it waits for its own renews it.
	span atomic.Int64
	// heard is when a frame last came (unix nanoseconds).
	heard atomic.Int64
}

// send writes a request of ours, once the connection is ready.
func (wc *wireConn) send(opcode int32, req encoder) (*sideCall, error) {
	// Until go-zookeeper's send loop begins on the connection, or the
	// connection ends (go-zookeeper gives up on it, or dials another).
	select {
	case <-wc.ready:
	case <-wc.ended:
		return nil, zk.ErrConnectionClosed
	}
	buf := make([]byte, 1024)
	var n int
	for {
		var err error
		n, err = req.Encode(buf[12:])
		if err == nil {
			break
		}
		if !errors.Is(err, zk.ErrShortBuffer) || len(buf) >= maxRequestBytes {
			return nil, err
		}
		buf = make([]byte, min(4*len(buf), maxRequestBytes))
	}
	xid := wc.w.nextXid()
	binary.BigEndian.PutUint32(buf, uint32(8+n))
	binary.BigEndian.PutUint32(buf[4:], uint32(xid))
	binary.BigEndian.PutUint32(buf[8:], uint32(opcode))
	call := &sideCall{done: make(chan struct{})}
	wc.pmu.Lock()
	if wc.failed != nil {
		wc.pmu.Unlock()
		return nil, wc.failed
	}
	wc.pending[xid] = call
	wc.pmu.Unlock()
	wc.wmu.Lock()
	for wc.left > 0 {
		wc.cond.Wait()
	}
	_, err := wc.Conn.Write(buf[:12+n])
	wc.wmu.Unlock()
	if err != nil {
		wc.fail(zk.ErrConnectionClosed)
		wc.Conn.Close()
	}
	return call, nil
}

// maxRequestBytes bounds a request of ours as go-zookeeper bounds its own
// (its send buffer): the server drops the connection of a request larger
// than its jute.maxbuffer (1 MiB by default), so a larger one is refused
// here, before it is sent.
const maxRequestBytes = 1536 << 10

// Write writes go-zookeeper's bytes, frame by frame, noting when its send
// loop has begun, and writing into the request that opens the connection
// the last zxid our answers carried.
func (wc *wireConn) Write(p []byte) (int, error) {
	wc.wmu.Lock()
	defer wc.wmu.Unlock()
	if !wc.opened && len(p) >= 16 {
		// length, protocol version, last zxid seen, ...: a copy, not the
		// caller's buffer.
		wc.opened = true
		if ours := wc.w.lastZxid.Load(); ours > int64(binary.BigEndian.Uint64(p[8:])) {
			p = append([]byte(nil), p...)
			binary.BigEndian.PutUint64(p[8:], uint64(ours))
		}
		return wc.Conn.Write(p)
	}
	wc.note(p)
	n, err := wc.Conn.Write(p)
	if wc.left == 0 {
		wc.cond.Broadcast()
	}
	return n, err
}

// note follows go-zookeeper's frames through p: the first whose operation
// is not setAuth shows its send loop has begun.
func (wc *wireConn) note(p []byte) {
	for len(p) > 0 {
		if wc.left > 0 {
			k := min(wc.left, len(p))
			wc.left -= k
			p = p[k:]
			continue
		}
		// A frame's start: its length, xid and operation (12 bytes), which
		// may come in parts.
		k := min(12-len(wc.head), len(p))
		wc.head = append(wc.head, p[:k]...)
		p = p[k:]
		if len(wc.head) < 12 {
			continue
		}
		length := int(binary.BigEndian.Uint32(wc.head))
		if op := int32(binary.BigEndian.Uint32(wc.head[8:])); op != opCodeSetAuth {
			wc.readyOnce.Do(func() { close(wc.ready) })
		}
		wc.left = max(length-8, 0)
		wc.head = wc.head[:0]
	}
}

// SetReadDeadline notes how long go-zookeeper lets a read wait.
func (wc *wireConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		wc.span.Store(0)
	} else {
		wc.span.Store(int64(time.Until(t)))
	}
	return wc.Conn.SetReadDeadline(wc.heldTo(t))
}

// SetWriteDeadline is go-zookeeper's, held to the opening's bound.
func (wc *wireConn) SetWriteDeadline(t time.Time) error {
	return wc.Conn.SetWriteDeadline(wc.heldTo(t))
}

// openBy holds every deadline to by until the answer that opens the
// connection has been read.
func (wc *wireConn) openBy(by time.Time) {
	wc.opening.Store(&by)
	wc.Conn.SetDeadline(by)
}

// heldTo is the deadline t, or the opening's end if that comes first.
func (wc *wireConn) heldTo(t time.Time) time.Time {
	if by := wc.opening.Load(); by != nil && (t.IsZero() || t.After(*by)) {
		return *by
	}
	return t
}

// Read hands go-zookeeper its frames, taking ours out of the stream.
func (wc *wireConn) Read(p []byte) (int, error) {
	for wc.pass == 0 {
		if err := wc.nextFrame(); err != nil {
			wc.readFailed(err)
			return 0, err
		}
	}
	n, err := wc.r.Read(p[:min(len(p), wc.pass)])
	wc.pass -= n
	if err != nil {
		wc.readFailed(err)
	} else if wc.pass == 0 && wc.opening.Load() != nil {
		// The opening answer, whole: go-zookeeper's own deadlines apply
		// from here (it cleared both while it read it).
		wc.opening.Store(nil)
		wc.Conn.SetDeadline(time.Time{})
		if wc.w.ring != nil {
			wc.w.ring.answered(wc.addr)
		}
	}
	return n, err
}

// readFailed ends the calls of ours on the connection, and tells the ring
// whether the server went silent (a read past its deadline: the opening's
// bound, or go-zookeeper's read timeout) or answered by closing it.
func (wc *wireConn) readFailed(err error) {
	wc.fail(zk.ErrConnectionClosed)
	if wc.w.ring == nil || wc.told {
		return
	}
	wc.told = true
	opening := wc.opening.Load() != nil
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		wc.w.ring.silent(wc.addr, opening)
	case opening:
		wc.w.ring.answered(wc.addr)
	}
}

// nextFrame reads the next frame: an answer of ours is taken and handed
// to its caller; go-zookeeper's is left in the buffer, to pass.
func (wc *wireConn) nextFrame() error {
	head, err := wc.r.Peek(8)
	if err != nil {
		return err
	}
	wc.heard.Store(time.Now().UnixNano())
	length := int(binary.BigEndian.Uint32(head))
	xid := int32(binary.BigEndian.Uint32(head[4:]))
	if !wc.answered || xid > sideXidTop || length < 16 {
		// The answer that opens the connection has no xid: it is
		// go-zookeeper's, as is every frame with an xid of its.
		wc.answered = true
		wc.pass = 4 + length
		return nil
	}
	if length > wc.w.maxResponse {
		return fmt.Errorf("received a response of %d bytes, more than the %d allowed", length, wc.w.maxResponse)
	}
	frame := make([]byte, 4+length)
	if _, err := ioReadFull(wc.r, frame); err != nil {
		return err
	}
	zxid := int64(binary.BigEndian.Uint64(frame[8:]))
	for {
		seen := wc.w.lastZxid.Load()
		if zxid <= seen || wc.w.lastZxid.CompareAndSwap(seen, zxid) {
			break
		}
	}
	wc.pmu.Lock()
	call := wc.pending[xid]
	delete(wc.pending, xid)
	wc.pmu.Unlock()
	if call != nil {
		call.code = int32(binary.BigEndian.Uint32(frame[16:]))
		call.body = frame[20:]
		close(call.done)
	}
	if span := time.Duration(wc.span.Load()); span > 0 {
		// go-zookeeper waits for its next frame: this one of ours counts
		// as life on the connection, as any frame would.
		wc.Conn.SetReadDeadline(time.Now().Add(span))
	}
	return nil
}

// keepAlive pings the server every period while the connection is idle,
// until ctx ends. go-zookeeper pings every third of the session timeout;
// more often, the last word from a server that hangs is more recent, and
// the session is presumed lost that much later (servers.go). The answer,
// xid -2 as every ping's, is go-zookeeper's to read, and it ignores it.
func (w *wire) keepAlive(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if wc := w.current(); wc != nil {
			wc.ping(period / 2)
		}
	}
}

// ping pings the server if nothing came from it for idle, once
// go-zookeeper's send loop has begun.
func (wc *wireConn) ping(idle time.Duration) {
	select {
	case <-wc.ready:
	default:
		return
	}
	if time.Since(time.Unix(0, wc.heard.Load())) < idle {
		return
	}
	frame := binary.BigEndian.AppendUint32(nil, 8)
	frame = binary.BigEndian.AppendUint32(frame, 0xfffffffe) // xid -2
	frame = binary.BigEndian.AppendUint32(frame, opCodePing)
	wc.wmu.Lock()
	for wc.left > 0 {
		wc.cond.Wait()
	}
	_, err := wc.Conn.Write(frame)
	wc.wmu.Unlock()
	if err != nil {
		wc.fail(zk.ErrConnectionClosed)
		wc.Conn.Close()
	}
}

// ioReadFull reads exactly len(buf) bytes.
func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// fail ends every call of ours waiting on this connection with err, and
// refuses the next ones.
func (wc *wireConn) fail(err error) {
	wc.pmu.Lock()
	defer wc.pmu.Unlock()
	if wc.failed == nil {
		wc.failed = err
		close(wc.ended)
	}
	for xid, call := range wc.pending {
		call.err = err
		close(call.done)
		delete(wc.pending, xid)
	}
}

// Close closes the connection, ending the calls of ours on it.
func (wc *wireConn) Close() error {
	wc.fail(zk.ErrConnectionClosed)
	return wc.Conn.Close()
}
