package zkwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// What this package assumes of go-zookeeper's framing (see the package
// documentation); each failure of the framing test names the one broken.
const (
	assumeDialer       = "go-zookeeper dials every connection through the dialer it is given"
	assumeOpening      = "go-zookeeper opens a connection with the connect request in one write, the last zxid it saw at bytes 8 to 16"
	assumeOpeningFirst = "the answer that opens a connection is the first frame read on it"
	assumeHeader       = "go-zookeeper's request header is length, xid, opcode"
	assumeXids         = "go-zookeeper never uses xids of -65536 or below"
	assumeAuthFirst    = "go-zookeeper sends a connection's credentials (setAuth) before any other request on it"
	assumeAnswerHeader = "an answer's header is length, xid, zxid, error code"
	assumePing         = "go-zookeeper pings with xid -2, opcode 11, and takes every answer with xid -2 for a ping's, ignoring it"
	assumeReadTimeout  = "go-zookeeper waits two thirds of the session timeout for each frame"
	// TestMultiAnswersAsTheLibrarysMulti checks this one.
	assumeMulti = "go-zookeeper's Multi answers as Conn.Multi does, error codes and all"
)

// broken fails the test naming the assumption go-zookeeper broke, and the
// version of go-zookeeper that broke it.
func broken(t *testing.T, assumption, format string, args ...any) {
	t.Helper()
	t.Errorf("go-zookeeper %s breaks an assumption of package zkwire: %s: %s",
		goZookeeperVersion(), assumption, fmt.Sprintf(format, args...))
}

// goZookeeperVersion is the version of go-zookeeper this test is built
// with, as its source file's path says ("…/zk@v1.0.4/conn.go"; a test
// binary carries no list of modules for debug.ReadBuildInfo).
func goZookeeperVersion() string {
	pc := reflect.ValueOf(zk.Connect).Pointer()
	file, _ := runtime.FuncForPC(pc).FileLine(pc)
	if _, v, ok := strings.Cut(file, "/zk@"); ok {
		v, _, _ = strings.Cut(v, "/")
		return v
	}
	return "built from " + path.Dir(file)
}

// TestGoZookeeperFramesAsThisPackageAssumes runs go-zookeeper alone (not
// through this package) against a real server, through a dialer that
// records every byte it writes and reads (exercise), and checks there
// what this package relies on.
func TestGoZookeeperFramesAsThisPackageAssumes(t *testing.T) {
	tp := &tap{}
	zc, events, err := zk.Connect(zktest.Servers(t), 6*time.Second, zk.WithDialer(tp.dial),
		zk.WithLogger(logger{slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	states := followStates(events)
	root := zktest.Root(t)
	node, missing := root+"/node", root+"/missing"
	lastZxid, set, ok := exercise(t, zc, tp, states, root, node, missing)
	zc.Close()
	// What go-zookeeper wrote and read, whether or not it went as it
	// should: a request left unanswered is explained there.
	if n := tp.count(); ok && n != 2 {
		broken(t, assumeDialer, "%d connections dialed through it for a session and one reconnect, want 2", n)
	}
	for i := range min(tp.count(), 2) {
		c := tp.conn(t, i)
		c.check(t, i)
		if i == 1 {
			if got := c.openingZxid(); got != lastZxid {
				broken(t, assumeOpening, "the reconnect's connect request says last zxid %#x at bytes 8 to 16; the last answer before it carried %#x", got, lastZxid)
			}
			if !slices.ContainsFunc(c.requests(), func(f []byte) bool { return op(f) == opCodeSetAuth }) {
				broken(t, assumeAuthFirst, "the reconnect sent the session's credentials again in no setAuth frame")
			}
		}
	}
	if !ok || tp.count() == 0 {
		return
	}
	// Answers, by their request.
	c := tp.conn(t, 0)
	get, getMissing := c.request(opCodeGetData, node), c.request(opCodeGetData, missing)
	if get == nil || getMissing == nil {
		broken(t, assumeHeader, "no getData frame (opcode %d) names %s and %s after the header", opCodeGetData, node, missing)
		return
	}
	if a := c.answer(xid(getMissing)); a == nil || code(a) != codeNoNode {
		broken(t, assumeAnswerHeader, "the answer to the getData of a missing node (xid %d) does not carry error %d at bytes 16 to 20: % x", xid(getMissing), codeNoNode, a)
	}
	if a := c.answer(xid(get)); a == nil || code(a) != 0 || !bytes.HasPrefix(a[20:], []byte{0, 0, 0, 1, 'x'}) {
		broken(t, assumeAnswerHeader, "the answer to the getData of a node holding \"x\" (xid %d) is not error 0 then the data: % x", xid(get), a)
	}
	if req := c.request(opCodeSetData, node); req == nil {
		broken(t, assumeHeader, "no setData frame (opcode %d) names %s after the header", opCodeSetData, node)
	} else if a := c.answer(xid(req)); a == nil || zxid(a) != set.Mzxid {
		broken(t, assumeAnswerHeader, "the answer to a setData (xid %d) does not carry the zxid of the change, %#x, at bytes 8 to 16: % x", xid(req), set.Mzxid, a)
	}
	if ping := c.answer(-2); ping == nil {
		broken(t, assumePing, "no answer with xid -2 was read")
	}
	timeout, spans := c.negotiatedTimeout(), c.readSpans()
	if len(spans) < 2 {
		broken(t, assumeReadTimeout, "%d read deadlines set", len(spans))
		return
	}
	// The first is the wait for the connect answer.
	for _, span := range spans[1:] {
		if want := timeout * 2 / 3; span > want || span < want*9/10 {
			broken(t, assumeReadTimeout, "a read deadline of %s with a session timeout of %s, want %s", span, timeout, want)
			break
		}
	}
}

// exercise runs a session through zc: credentials, requests of each kind,
// watches (one that fires, one left for the reconnect to set again), a
// ping of ours as keepAlive sends it, go-zookeeper's own, and a
// reconnect. It returns the last zxid go-zookeeper saw before the
// reconnect, the stat its set made, and false if something went wrong
// (told).
func exercise(t *testing.T, zc *zk.Conn, tp *tap, states *sessionStates, root, node, missing string) (lastZxid int64, set *zk.Stat, ok bool) {
	t.Helper()
	acl := zk.WorldACL(zk.PermAll)
	if !states.waitFor(t, zk.StateHasSession, 1) ||
		!answered(t, "adding credentials", func() error { return zc.AddAuth("digest", []byte("framing:secret")) }) {
		return 0, nil, false
	}
	folder := ""
	for _, part := range strings.Split(root[1:], "/") {
		folder += "/" + part
		if !answered(t, "creating "+folder, func() error {
			if _, err := zc.Create(folder, nil, 0, acl); !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
			return nil
		}) {
			return 0, nil, false
		}
	}
	var fired <-chan zk.Event
	steps := []struct {
		what string
		do   func() error
	}{
		{"create", func() error { _, err := zc.Create(node, []byte("x"), 0, acl); return err }},
		{"get", func() error { _, _, err := zc.Get(node); return err }},
		{"get a missing node", func() error {
			if _, _, err := zc.Get(missing); !errors.Is(err, zk.ErrNoNode) {
				return fmt.Errorf("%v, want %v", err, zk.ErrNoNode)
			}
			return nil
		}},
		{"exists, watched", func() (err error) { _, _, fired, err = zc.ExistsW(node); return err }},
		{"children, watched", func() error { _, _, _, err := zc.ChildrenW(root); return err }},
		{"set", func() (err error) { set, err = zc.Set(node, []byte("y"), -1); return err }},
		{"the watch", func() error { <-fired; return nil }},
		{"multi", func() error {
			_, err := zc.Multi(&zk.CheckVersionRequest{Path: node, Version: 1}, &zk.SetDataRequest{Path: node, Data: []byte("z"), Version: 1})
			return err
		}},
		{"sync", func() error { _, err := zc.Sync(root); return err }},
	}
	for _, s := range steps {
		if !answered(t, s.what, s.do) {
			return 0, nil, false
		}
	}
	first := tp.conn(t, 0)
	waittest.True(t, 10*time.Second, "a frame boundary to write a ping at", func() bool {
		return first.inject(frame(-2, opCodePing, ""))
	})
	if !answered(t, "a get after the answer to a ping of ours", func() error { _, _, err := zc.Get(node); return err }) {
		broken(t, assumePing, "go-zookeeper's request after the answer to a ping it did not send went unanswered")
		return 0, nil, false
	}
	waittest.True(t, 10*time.Second, "go-zookeeper's own ping ("+assumePing+")", func() bool {
		return slices.ContainsFunc(first.requests(), func(f []byte) bool { return op(f) == opCodePing })
	})
	if n := tp.count(); n != 1 || states.count(zk.StateDisconnected) != 0 {
		broken(t, assumePing, "the connection went (%d connections dialed) after an answer to a ping go-zookeeper did not send", n)
		return 0, nil, false
	}
	// The connection cut under go-zookeeper.
	lastZxid = first.lastZxid()
	first.Conn.Close()
	ok = states.waitFor(t, zk.StateHasSession, 2) &&
		answered(t, "a get after the reconnect", func() error { _, _, err := zc.Get(node); return err })
	return lastZxid, set, ok
}

// answered runs a request of go-zookeeper's, which waits for its answer
// with no bound: one not answered within 15s is told, and false.
func answered(t *testing.T, what string, f func() error) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return err == nil
	case <-time.After(15 * time.Second):
		t.Errorf("%s: no answer within 15s", what)
		return false
	}
}

// check checks what every connection shows: how it opens, how requests
// and answers are framed, their xids, the credentials first, the pings.
func (c *tapConn) check(t *testing.T, i int) {
	t.Helper()
	c.mu.Lock()
	writes, read := slices.Clone(c.writes), bytes.Clone(c.read)
	c.mu.Unlock()
	frames, rest := splitFrames(slices.Concat(writes...))
	if len(frames) == 0 || len(frames[0]) < 16 || binary.BigEndian.Uint32(frames[0][4:]) != 0 {
		broken(t, assumeOpening, "connection %d opened with % x", i, slices.Concat(writes...)[:min(24, len(slices.Concat(writes...)))])
		return
	}
	if len(writes[0]) != len(frames[0]) {
		broken(t, assumeOpening, "connection %d: the connect request (%d bytes) in a write of %d", i, len(frames[0]), len(writes[0]))
	}
	frames = frames[1:]
	if len(rest) > 0 {
		broken(t, assumeHeader, "connection %d: %d bytes written after its last whole frame", i, len(rest))
	}
	sawOther := false
	for _, f := range frames {
		x, o := xid(f), op(f)
		if len(f) < 12 || !knownOps[o] {
			broken(t, assumeHeader, "connection %d: a frame of opcode %d: % x", i, o, f[:min(len(f), 16)])
			continue
		}
		if x <= sideXidTop {
			broken(t, assumeXids, "connection %d: a request (opcode %d) with xid %d", i, o, x)
		}
		if o == opCodeSetAuth && sawOther {
			broken(t, assumeAuthFirst, "connection %d: a setAuth after another request", i)
		}
		sawOther = sawOther || o != opCodeSetAuth
		if o == opCodePing && (x != -2 || len(f) != 12) {
			broken(t, assumePing, "connection %d: a ping frame % x", i, f)
		}
	}
	answers, rest := splitFrames(read)
	if len(answers) == 0 || len(answers[0]) < 40 || len(rest) > 0 {
		broken(t, assumeOpeningFirst, "connection %d: read % x", i, read[:min(len(read), 24)])
		return
	}
	// The connect answer: protocol version, timeout, session id, password.
	if sid := binary.BigEndian.Uint64(answers[0][12:]); sid == 0 {
		broken(t, assumeOpeningFirst, "connection %d: the first frame read names no session: % x", i, answers[0])
	}
	for _, a := range answers[1:] {
		if len(a) < 20 {
			broken(t, assumeAnswerHeader, "connection %d: an answer of %d bytes", i, len(a))
		} else if x := xid(a); x <= sideXidTop {
			broken(t, assumeXids, "connection %d: an answer with xid %d", i, x)
		}
	}
}

// knownOps are ZooKeeper's request opcodes (ZooDefs.OpCode).
var knownOps = map[int32]bool{
	1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true, 11: true, 12: true,
	13: true, 14: true, 15: true, 16: true, 17: true, 18: true, 19: true, 20: true, 21: true, 22: true,
	100: true, 101: true, 102: true, 103: true, 104: true, 105: true, 106: true, -11: true,
}

func xid(f []byte) int32  { return int32(binary.BigEndian.Uint32(f[4:])) }
func op(f []byte) int32   { return int32(binary.BigEndian.Uint32(f[8:])) }
func zxid(a []byte) int64 { return int64(binary.BigEndian.Uint64(a[8:])) }
func code(a []byte) int32 { return int32(binary.BigEndian.Uint32(a[16:])) }

// splitFrames splits b into length-prefixed frames, and what is left
// after the last whole one.
func splitFrames(b []byte) (frames [][]byte, rest []byte) {
	for len(b) >= 4 {
		n := 4 + int(binary.BigEndian.Uint32(b))
		if n > len(b) {
			break
		}
		frames = append(frames, b[:n])
		b = b[n:]
	}
	return frames, b
}

// tap dials go-zookeeper's connections to the server, recording them.
type tap struct {
	mu    sync.Mutex
	conns []*tapConn
}

func (tp *tap) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	c := &tapConn{Conn: conn}
	tp.mu.Lock()
	tp.conns = append(tp.conns, c)
	tp.mu.Unlock()
	return c, nil
}

func (tp *tap) count() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.conns)
}

func (tp *tap) conn(t *testing.T, i int) *tapConn {
	t.Helper()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if i >= len(tp.conns) {
		broken(t, assumeDialer, "%d connections dialed through it, want at least %d", len(tp.conns), i+1)
		t.FailNow()
	}
	return tp.conns[i]
}

// tapConn is one connection of go-zookeeper's: each write as it made it,
// every byte it read, and the read deadlines it set (as the wait from
// then).
type tapConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	read   []byte
	spans  []time.Duration
}

func (c *tapConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return c.Conn.Write(p)
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read = append(c.read, p[:n]...)
	c.mu.Unlock()
	return n, err
}

func (c *tapConn) SetReadDeadline(t time.Time) error {
	if !t.IsZero() {
		c.mu.Lock()
		c.spans = append(c.spans, time.Until(t))
		c.mu.Unlock()
	}
	return c.Conn.SetReadDeadline(t)
}

// inject writes f between go-zookeeper's frames; false when go-zookeeper
// is within one.
func (c *tapConn) inject(f []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if frames, rest := splitFrames(slices.Concat(c.writes...)); len(frames) == 0 || len(rest) > 0 {
		return false
	}
	_, err := c.Conn.Write(f)
	return err == nil
}

// requests are the frames go-zookeeper wrote after the connect request.
func (c *tapConn) requests() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames, _ := splitFrames(slices.Concat(c.writes...))
	if len(frames) == 0 {
		return nil
	}
	return frames[1:]
}

// request is the first request of opcode o whose body begins with path.
func (c *tapConn) request(o int32, path string) []byte {
	want := append(binary.BigEndian.AppendUint32(nil, uint32(len(path))), path...)
	for _, f := range c.requests() {
		if op(f) == o && bytes.HasPrefix(f[12:], want) {
			return f
		}
	}
	return nil
}

// answers are the frames read after the connect answer.
func (c *tapConn) answers() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames, _ := splitFrames(c.read)
	if len(frames) == 0 {
		return nil
	}
	return frames[1:]
}

// answer is the first answer with xid x.
func (c *tapConn) answer(x int32) []byte {
	for _, a := range c.answers() {
		if len(a) >= 20 && xid(a) == x {
			return a
		}
	}
	return nil
}

// lastZxid is the zxid of the last answer go-zookeeper read to a request
// of its own, the last it saw.
func (c *tapConn) lastZxid() int64 {
	var z int64
	for _, a := range c.answers() {
		if len(a) >= 16 && xid(a) >= 0 && zxid(a) > 0 {
			z = zxid(a)
		}
	}
	return z
}

// openingZxid is the last zxid seen the connect request carries.
func (c *tapConn) openingZxid() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames, _ := splitFrames(slices.Concat(c.writes...))
	if len(frames) == 0 || len(frames[0]) < 16 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(frames[0][8:]))
}

// negotiatedTimeout is the session timeout the connect answer gave.
func (c *tapConn) negotiatedTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.read) < 12 {
		return 0
	}
	return time.Duration(binary.BigEndian.Uint32(c.read[8:])) * time.Millisecond
}

func (c *tapConn) readSpans() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

// sessionStates counts the session events go-zookeeper sent.
type sessionStates struct {
	mu      sync.Mutex
	counts  map[zk.State]int
	changed chan struct{}
}

func followStates(events <-chan zk.Event) *sessionStates {
	s := &sessionStates{counts: map[zk.State]int{}, changed: make(chan struct{}, 1)}
	go func() {
		for ev := range events {
			if ev.Type != zk.EventSession {
				continue
			}
			s.mu.Lock()
			s.counts[ev.State]++
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
		}
	}()
	return s
}

func (s *sessionStates) count(state zk.State) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[state]
}

// waitFor waits until go-zookeeper has told of state n times (false, told,
// if it does not within 30s).
func (s *sessionStates) waitFor(t *testing.T, state zk.State, n int) bool {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for s.count(state) < n {
		select {
		case <-s.changed:
		case <-timeout:
			t.Errorf("go-zookeeper told of %s %d times within 30s, want %d", state, s.count(state), n)
			return false
		}
	}
	return true
}
