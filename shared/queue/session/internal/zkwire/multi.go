package zkwire

import (
	"encoding/binary"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// A multi is what every claim and commit sends. go-zookeeper's Multi
// encodes each operation and decodes each answer by reflection, which cost
// a stage's client more than building the operations; multiWrite sends the
// same request on go-zookeeper's connection (wire.go, as multiRead does)
// with its wire format (jute) written and read directly, and answers as
// Multi answers (TestMultiAnswersAsTheLibrarysMulti).

// ZooKeeper's operation codes of a multi.
const (
	opCodeCreate  = 1
	opCodeDelete  = 2
	opCodeSetData = 5
	opCodeCheck   = 13
	opCodeMulti   = 14
)

// multiWrite is go-zookeeper's Multi(ops...) (Conn.Multi).
func (w *wire) multiWrite(ops []any) ([]zk.MultiResponse, error) {
	for _, op := range ops {
		switch op.(type) {
		case *zk.CreateRequest, *zk.SetDataRequest, *zk.DeleteRequest, *zk.CheckVersionRequest:
		default:
			return nil, fmt.Errorf("unknown operation type %T", op)
		}
	}
	res := &multiWriteResponse{}
	err := w.request(opCodeMulti, &multiWriteRequest{ops: ops}, res)
	if err == zk.ErrConnectionClosed {
		return nil, err
	}
	out := make([]zk.MultiResponse, len(res.ops))
	for i, op := range res.ops {
		out[i] = zk.MultiResponse{Stat: op.stat, String: op.path, Error: codeError(int32(op.code))}
	}
	return out, err
}

type multiWriteRequest struct{ ops []any }

// Encode writes the request: per operation a header (type, done false,
// error -1) and the operation; then the header that ends the list (type
// -1, done true, error -1).
func (r *multiWriteRequest) Encode(buf []byte) (int, error) {
	b := buf[:0:len(buf)]
	header := func(typ int32, done bool) {
		b = binary.BigEndian.AppendUint32(b, uint32(typ))
		if done {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	str := func(s string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	data := func(d []byte) {
		if d == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			return
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(d)))
		b = append(b, d...)
	}
	i32 := func(v int32) { b = binary.BigEndian.AppendUint32(b, uint32(v)) }
	for _, op := range r.ops {
		switch op := op.(type) {
		case *zk.CreateRequest:
			header(opCodeCreate, false)
			str(op.Path)
			data(op.Data)
			i32(int32(len(op.Acl)))
			for _, a := range op.Acl {
				i32(a.Perms)
				str(a.Scheme)
				str(a.ID)
			}
			i32(op.Flags)
		case *zk.SetDataRequest:
			header(opCodeSetData, false)
			str(op.Path)
			data(op.Data)
			i32(op.Version)
		case *zk.DeleteRequest:
			header(opCodeDelete, false)
			str(op.Path)
			i32(op.Version)
		case *zk.CheckVersionRequest:
			header(opCodeCheck, false)
			str(op.Path)
			i32(op.Version)
		default:
			return 0, fmt.Errorf("unknown operation type %T", op)
		}
	}
	header(-1, true)
	if len(b) > len(buf) {
		// Appending outgrew buf (and left it): the request does not fit.
		return 0, zk.ErrShortBuffer
	}
	return len(b), nil
}

type multiWriteResponse struct{ ops []multiWriteResult }

// multiWriteResult is one operation's answer: the path created, the stat
// set, or its error code.
type multiWriteResult struct {
	path string
	stat *zk.Stat
	code zk.ErrCode
}

// Decode reads the answer: per operation a header and its answer (an
// error code, a path created, a stat set, or nothing for a delete or a
// check); a header marked done ends it. Its error is the first
// operation's that failed, as go-zookeeper's.
func (r *multiWriteResponse) Decode(buf []byte) (int, error) {
	a := answerReader{buf: buf}
	var first error
	for {
		typ, done, err := a.header()
		if err != nil {
			return a.n, err
		}
		if done {
			return a.n, first
		}
		var res multiWriteResult
		switch typ {
		case opCodeError:
			code, err := a.int32()
			if err != nil {
				return a.n, err
			}
			res.code = zk.ErrCode(code)
		case opCodeCreate:
			path, err := a.data()
			if err != nil {
				return a.n, err
			}
			res.path = string(path)
		case opCodeSetData:
			if res.stat, err = a.stat(); err != nil {
				return a.n, err
			}
		case opCodeCheck, opCodeDelete:
		default:
			return a.n, zk.ErrAPIError
		}
		r.ops = append(r.ops, res)
		if first == nil && res.code != 0 {
			first = codeError(int32(res.code))
		}
	}
}
