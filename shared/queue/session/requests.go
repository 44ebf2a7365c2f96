package session

import (
	"slices"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
)

// RequestCount is how many requests of one kind a client sent to ZooKeeper:
// Op is the request ("get", "exists", "children", "create", "set",
// "delete", "multi", "multiread"), Node the kind of node it named, with ids,
// states and lock names written as "*" ("jobs/*/status", "jobs/states/*/*").
// A multi counts once as Op "multi" (Node "*") and once per operation inside
// it as Op "multi.<op>", a multiRead once as "multiread" (Node "*") and once per node
// as "multiread.get": what costs the server is mostly the request. A multi
// the server refused also counts its failing operation as
// "multi.refused-<op>".
type RequestCount struct {
	Op, Node string
	Count    int64
}

// ReadsNode reports whether r counts nodes read, alone ("get") or in a
// multiRead ("multiread.get").
func (r RequestCount) ReadsNode() bool { return r.Op == "get" || r.Op == "multiread.get" }

type requestKey struct{ op, node string }

type requestStats struct {
	root string
	mu   sync.Mutex
	n    map[requestKey]int64
	// kinds holds each kind of node counted, spelt once: counting an
	// operation (every one of every multi) allocates nothing.
	kinds map[string]string
}

func (s *requestStats) add(op, path string) {
	var buf [96]byte
	kind := append(buf[:0], manyNodes...)
	if path != manyNodes {
		kind = s.appendKind(buf[:0], path)
	}
	s.mu.Lock()
	if s.kinds == nil {
		s.kinds = map[string]string{}
	}
	name, ok := s.kinds[string(kind)]
	if !ok {
		name = string(kind)
		s.kinds[name] = name
	}
	s.n[requestKey{op, name}]++
	s.mu.Unlock()
}

func (s *requestStats) snapshot() []RequestCount {
	s.mu.Lock()
	out := make([]RequestCount, 0, len(s.n))
	for k, n := range s.n {
		out = append(out, RequestCount{Op: k.op, Node: k.node, Count: n})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b RequestCount) int {
		if c := strings.Compare(a.Op, b.Op); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return out
}

// nodeKind names the kind of node at path, so that the counts stay few:
// every segment that names one item (a job, a batch, a state, an object, a
// worker) becomes "*".
func (s *requestStats) nodeKind(path string) string {
	return string(s.appendKind(nil, path))
}

// appendKind appends nodeKind(path) to b.
func (s *requestStats) appendKind(b []byte, path string) []byte {
	start := len(b)
	rest := strings.TrimPrefix(strings.TrimPrefix(path, s.root), "/")
	var first, parent, grand string // segments as written into b
	for i := 0; ; i++ {
		seg, tail, more := strings.Cut(rest, "/")
		out := seg
		switch {
		case strings.HasPrefix(seg, "jid") || strings.HasPrefix(seg, "bid"):
			if len(seg) > 3 { // not the sequence prefix "jobs/jid" itself
				out = "*"
			}
		case parent == "states" || parent == "batch-uuids" || parent == "workers" || parent == "counters" ||
			parent == "local-ids" || parent == "console-sessions" || (i == 2 && first == "locks"):
			out = "*"
		case i >= 2 && parent == "*" && (grand == "states" || grand == "local-ids"):
			out = "*" // a state-folder entry, a batch's job reference, a local id
		}
		if i > 0 {
			b = append(b, '/')
		}
		b = append(b, out...)
		if i == 0 {
			first = out
		}
		grand, parent = parent, out
		if !more {
			break
		}
		rest = tail
	}
	if len(b) == start {
		// The root itself: a label value of "" reads as no label in Prometheus.
		b = append(b, '/')
	}
	return b
}

// manyNodes is the node kind of a request that names no one node (a
// multi, a multiRead): its operations are counted each by its own kind.
const manyNodes = "*"

// countingConn is the client's ZooKeeper connection, counting each request.
type countingConn struct {
	*zkwire.Conn
	stats *requestStats
}

func (c *countingConn) Get(path string) ([]byte, *zk.Stat, error) {
	c.stats.add("get", path)
	return c.Conn.Get(path)
}

func (c *countingConn) Exists(path string) (bool, *zk.Stat, error) {
	c.stats.add("exists", path)
	return c.Conn.Exists(path)
}

func (c *countingConn) ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	c.stats.add("exists", path)
	return c.Conn.ExistsW(path)
}

func (c *countingConn) Children(path string) ([]string, *zk.Stat, error) {
	c.stats.add("children", path)
	return c.Conn.Children(path)
}

func (c *countingConn) ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error) {
	c.stats.add("children", path)
	return c.Conn.ChildrenW(path)
}

func (c *countingConn) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	c.stats.add("create", path)
	return c.Conn.Create(path, data, flags, acl)
}

func (c *countingConn) Set(path string, data []byte, version int32) (*zk.Stat, error) {
	c.stats.add("set", path)
	return c.Conn.Set(path, data, version)
}

func (c *countingConn) Delete(path string, version int32) error {
	c.stats.add("delete", path)
	return c.Conn.Delete(path, version)
}

func (c *countingConn) Multi(ops ...any) ([]zk.MultiResponse, error) {
	c.stats.add("multi", manyNodes)
	for _, op := range ops {
		c.stats.add("multi."+opName(op), opPath(op))
	}
	res, err := c.Conn.Multi(ops...)
	if i := zkwire.FailedAt(res, err); i >= 0 && i < len(ops) {
		// A multi refused costs the server about what one applied does (it
		// is logged, its operations as errors), and a grouped one is sent
		// again: what made it fail is worth counting.
		c.stats.add("multi.refused-"+opName(ops[i]), opPath(ops[i]))
	}
	return res, err
}

// opName names a multi's operation as the counts do.
func opName(op any) string {
	switch op.(type) {
	case *zk.CreateRequest:
		return "create"
	case *zk.SetDataRequest:
		return "set"
	case *zk.DeleteRequest:
		return "delete"
	case *zk.CheckVersionRequest:
		return "check"
	}
	return "other"
}

func opPath(op any) string {
	switch op := op.(type) {
	case *zk.CreateRequest:
		return op.Path
	case *zk.SetDataRequest:
		return op.Path
	case *zk.DeleteRequest:
		return op.Path
	case *zk.CheckVersionRequest:
		return op.Path
	}
	return manyNodes
}

// MultiRead reads paths in one request (zkwire.Conn.MultiRead); it counts
// once as Op "multiread" and once per node as "multiread.get".
func (c *countingConn) MultiRead(paths []string) ([]zkwire.ReadResult, error) {
	c.stats.add("multiread", manyNodes)
	for _, p := range paths {
		c.stats.add("multiread.get", p)
	}
	return c.Conn.MultiRead(paths)
}
