// Package zkwire is go-zookeeper's connection with what the queue needs of
// ZooKeeper and go-zookeeper does not give it: Conn.MultiRead (many nodes
// read in one request, ZooKeeper 3.6 and later), Conn.Multi encoded and
// decoded without reflection, and a connection that gives up on a server
// that hangs in time (a bound on a connection's opening, servers tried at a
// pace, an idle connection pinged often: servers.go). It is the one place
// that knows ZooKeeper's wire format, its frames and request ids. It is
// internal to package session, so the compiler keeps every other package
// from depending on that format; session groups concurrent calls into one
// multi or multiRead (that is about callers, not frames) and sends them
// through Conn.
//
// # What it assumes of go-zookeeper
//
// Connect hands go-zookeeper a dialer whose connections carry this
// package's requests between go-zookeeper's, with request ids (xids)
// go-zookeeper never uses, and take their answers out of the stream before
// go-zookeeper reads it (wire.go). Besides ZooKeeper's own protocol, that
// relies on go-zookeeper:
//
//   - dialing every connection through the dialer it is given;
//   - opening a connection with the connect request in one write, the last
//     zxid it saw at bytes 8 to 16; the answer that opens a connection is
//     the first frame read on it;
//   - framing a request as length, xid, opcode; an answer is length, xid,
//     zxid, error code;
//   - never using xids of -65536 or below (this package's);
//   - sending a connection's credentials (setAuth) before any other request
//     on it;
//   - pinging with xid -2, opcode 11, and ignoring every answer with xid
//     -2 (the pings of keepAlive are answered so);
//   - waiting two thirds of the session timeout for each frame;
//   - its Multi answering as Conn.Multi does, error codes and all.
//
// TestGoZookeeperFramesAsThisPackageAssumes runs go-zookeeper alone against
// a real server through a dialer that records every byte, and checks each
// of these (TestMultiAnswersAsTheLibrarysMulti the last); a failure names
// the assumption broken and the version of go-zookeeper that broke it.
//
// # The version
//
// go-zookeeper is pinned at v1.0.4 (shared/go.mod; every module of the
// workspace requires the same). An upgrade must pass this package's tests,
// the framing test first, before it is taken.
//
// # Why not a fork
//
// A small fork of go-zookeeper could add these as real client methods. It
// was weighed and not chosen: this package relies on ZooKeeper's wire
// protocol, stable across its releases, and on the few behaviours of
// go-zookeeper listed above, each seen from outside it and checked by a
// test; a fork would rely on all of go-zookeeper's internals (its send and
// receive loops, its table of requests), each upstream fix would be merged
// by hand, and every module of the workspace, each of which builds alone,
// would need a replace directive or a copy of the library in the
// repository. Should go-zookeeper change what this package relies on, the
// framing test says what changed; that is the time to weigh a fork again.
package zkwire
