package session

// What this package's external tests (package session_test, which take
// jobs through package jobs, built on this one) reach inside a session for.

// NodeKind is the kind of node an operation on path is counted under by a
// session rooted at root (RequestCount.Node).
func NodeKind(root, path string) string {
	s := &requestStats{root: root, n: map[requestKey]int64{}}
	return s.nodeKind(path)
}
