package zkwire

import (
	"encoding/binary"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper (3.6 and later) reads several nodes in one request, multiRead:
// the server pays its per-request cost (a packet in, one through its
// request pipeline, a packet out) once instead of once per node, and that
// cost is most of what a read costs it (measured with a server started by
// zktest: a lone getData ~50 µs of server CPU, a multiRead of 3 nodes ~45,
// of 32 nodes ~80). go-zookeeper has no call for it: multiReadRequest and
// multiReadResponse write and read it in ZooKeeper's wire format (jute),
// and go-zookeeper's connection carries it (wire.go).

// ZooKeeper's operation codes and error codes used here.
const (
	opCodeGetData   = 4
	opCodeMultiRead = 22
	opCodeError     = -1

	codeNoNode = -101
	codeNoAuth = -102
)

// ReadResult is one node's answer in a multiRead: its data and stat, or an
// error (zk.ErrNoNode for a missing node).
type ReadResult struct {
	Data []byte
	Stat *zk.Stat
	Err  error
}

// multiRead reads paths in one request (Conn.MultiRead).
func (w *wire) multiRead(paths []string) ([]ReadResult, error) {
	res := &multiReadResponse{results: make([]ReadResult, 0, len(paths))}
	err := w.request(opCodeMultiRead, &multiReadRequest{paths: paths}, res)
	switch {
	case err != nil:
		return nil, err
	case len(res.results) != len(paths):
		return nil, fmt.Errorf("multiRead of %d nodes answered %d", len(paths), len(res.results))
	}
	return res.results, nil
}

type multiReadRequest struct{ paths []string }

// Encode writes the request: per node an operation header (type, done
// false, error -1) and a getData request (path, no watch); then the header
// that ends the list (type -1, done true, error -1).
func (r *multiReadRequest) Encode(buf []byte) (int, error) {
	n := 0
	header := func(typ int32, done bool) bool {
		if len(buf)-n < 9 {
			return false
		}
		binary.BigEndian.PutUint32(buf[n:], uint32(typ))
		buf[n+4] = 0
		if done {
			buf[n+4] = 1
		}
		binary.BigEndian.PutUint32(buf[n+5:], uint32(0xffffffff))
		n += 9
		return true
	}
	for _, p := range r.paths {
		if !header(opCodeGetData, false) || len(buf)-n < 4+len(p)+1 {
			return n, zk.ErrShortBuffer
		}
		binary.BigEndian.PutUint32(buf[n:], uint32(len(p)))
		n += 4 + copy(buf[n+4:], p)
		buf[n] = 0 // no watch
		n++
	}
	if !header(-1, true) {
		return n, zk.ErrShortBuffer
	}
	return n, nil
}

type multiReadResponse struct{ results []ReadResult }

// statBytes is the encoded size of a zk.Stat.
const statBytes = 68

// Decode reads the answer: per node an operation header, then either a
// getData response (data, stat) or an error code; a header marked done
// ends it.
func (r *multiReadResponse) Decode(buf []byte) (int, error) {
	a := answerReader{buf: buf}
	for {
		typ, done, err := a.header()
		if err != nil || done {
			return a.n, err
		}
		switch typ {
		case opCodeGetData:
			data, err := a.data()
			if err != nil {
				return a.n, err
			}
			stat, err := a.stat()
			if err != nil {
				return a.n, err
			}
			r.results = append(r.results, ReadResult{Data: data, Stat: stat})
		case opCodeError:
			code, err := a.int32()
			if err != nil {
				return a.n, err
			}
			r.results = append(r.results, ReadResult{Err: readError(code)})
		default:
			return a.n, fmt.Errorf("multiRead: unexpected operation %d in the answer", typ)
		}
	}
}

// answerReader reads the answer to a multiRead or a multi (jute, big
// endian) from buf, n bytes in; a read past buf's end is
// zk.ErrShortBuffer.
type answerReader struct {
	buf []byte
	n   int
}

func (a *answerReader) need(k int) error {
	if k < 0 || len(a.buf)-a.n < k {
		return zk.ErrShortBuffer
	}
	return nil
}

// header reads an operation's header: its type and whether it ends the
// answer (its error field, always -1, is skipped).
func (a *answerReader) header() (typ int32, done bool, err error) {
	if err := a.need(9); err != nil {
		return 0, false, err
	}
	typ, done = int32(binary.BigEndian.Uint32(a.buf[a.n:])), a.buf[a.n+4] != 0
	a.n += 9
	return typ, done, nil
}

func (a *answerReader) int32() (int32, error) {
	if err := a.need(4); err != nil {
		return 0, err
	}
	v := int32(binary.BigEndian.Uint32(a.buf[a.n:]))
	a.n += 4
	return v, nil
}

// data reads a length-prefixed buffer (a copy); a negative length is nil.
func (a *answerReader) data() ([]byte, error) {
	size, err := a.int32()
	if err != nil || size < 0 {
		return nil, err
	}
	if err := a.need(int(size)); err != nil {
		return nil, err
	}
	data := make([]byte, size)
	a.n += copy(data, a.buf[a.n:])
	return data, nil
}

func (a *answerReader) stat() (*zk.Stat, error) {
	if err := a.need(statBytes); err != nil {
		return nil, err
	}
	st := decodeStat(a.buf[a.n : a.n+statBytes])
	a.n += statBytes
	return st, nil
}

func decodeStat(b []byte) *zk.Stat {
	be := binary.BigEndian
	return &zk.Stat{
		Czxid: int64(be.Uint64(b[0:])), Mzxid: int64(be.Uint64(b[8:])),
		Ctime: int64(be.Uint64(b[16:])), Mtime: int64(be.Uint64(b[24:])),
		Version: int32(be.Uint32(b[32:])), Cversion: int32(be.Uint32(b[36:])), Aversion: int32(be.Uint32(b[40:])),
		EphemeralOwner: int64(be.Uint64(b[44:])), DataLength: int32(be.Uint32(b[52:])),
		NumChildren: int32(be.Uint32(b[56:])), Pzxid: int64(be.Uint64(b[60:])),
	}
}

// readError is the error of one read that failed inside a multiRead.
func readError(code int32) error {
	switch code {
	case codeNoNode:
		return zk.ErrNoNode
	case codeNoAuth:
		return zk.ErrNoAuth
	}
	return fmt.Errorf("zookeeper error %d", code)
}
