// Package merritttest runs a stand-in for Merritt's storage service
// (CDLUC3/mrt-store) on loopback, for tests and the demo. It answers as
// the service's source shows it does, not as ingestq expects; each of the
// behaviours below is pinned by a test of the stand-in itself
// (merritttest_test.go) naming the source it follows.
//
//   - POST add/<node>/<object> and update/<node>/<object>, as a multipart
//     form (url, manifest, size, digestType, digestValue, localIdentifier,
//     localContext, delete, responseForm) or a URL-encoded one (url,
//     manifest, size, digest-type, digest-value, local-identifier,
//     local-context, delete, t). It fetches the manifest (404 answers 404,
//     any other status 503, a failed connection or read 500), checks it
//     against the size and digest given, reads it as an add manifest
//     (checkm 0.7 with the mrt-add-manifest profile, #%prefix and
//     #%columns; each value but the URL decoded as Checkm.dec does), and
//     fetches every file the object does not hold already under the same
//     name, size and digest, checking its size and digest. A file that
//     fails is tried once more; if it fails again the call answers 500
//     "Object Fails" naming no file, and stores nothing. Only then is the
//     version made: an add of exactly the manifest's files, an update of
//     the current version's less those deleted (a file id not in it is
//     refused) with the manifest's added or replaced.
//   - A call goes on when its caller hangs up, and commits: the servlet
//     container does not cancel it. A restart (Down, Up) ends the calls in
//     flight with nothing stored; the objects stay.
//   - GET state/<node>/<object>, state/<node>/<object>/<version>: the
//     object's and a version's state; an object the node does not hold is
//     404, a node the service does not have 500.
//   - GET manifest/<node>/<object>: the object's manifest of every version
//     (objectInfo XML), what Merritt's inventory service reads.
//   - GET content/<node>/<object>/<version>/<file>: a stored file.
//
// Answers come in the form asked ("json", "xml", "anvl"; anything else
// XML). A failure is the service's exception (mrt-core2's TException)
// formatted the same way, every getter included, its Java stack trace too
// (several KiB), with the exception's HTTP status.
//
// A test can make the next calls fail (Refuse), wait before they begin or
// before they commit whatever their caller does (Hold, HoldCommit), answer
// late (Delay) or store and then lose the answer (LoseAnswer); take the
// service down and up again; and count the versions of an object.
//
// As the service, a call reads the object's versions once it has its
// manifest and writes them back with its own added when it is done: of two
// calls on one object that overlap so, the later to finish drops the
// version the other made (Call.Overwrote counts them).
package merritttest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"
)

// Service is a running stand-in.
type Service struct {
	// URL is its base URL: http://127.0.0.1:<port>. It stays the same
	// across Down and Up.
	URL string

	addr  string
	nodes []int
	fetch *http.Client

	mu      sync.Mutex
	srv     *http.Server // nil while down
	run     context.Context
	stop    context.CancelFunc
	calls   sync.WaitGroup // calls in flight
	objects map[key]*object
	faults  []Fault
	ended   []Call
	changed chan struct{} // closed and replaced when a call ends
	// stale are the calls held for the next call on their object
	// (HoldForNext).
	stale map[key]*staleCall
}

type key struct {
	node int
	id   string
}

type object struct {
	// mu guards the fields below, held briefly: a state or manifest read
	// does not wait for a call in flight, as the service's do not.
	mu       sync.Mutex
	versions []version
	localID  string
}

type version struct {
	number  int
	created time.Time
	files   []storedFile
}

type storedFile struct {
	name, mimeType string
	data           []byte
	sha256         string
	// stored is the version the file's content was stored with: an
	// earlier one when the call found it in the object already.
	stored int
}

// Call is one add or update call as the stand-in received it, recorded
// when it ended.
type Call struct {
	Action string // add, update
	Node   int
	Object string
	Form   url.Values // the form fields, under the names the form used
	// Code is the HTTP status it answered: 0 when no answer was written
	// (LoseAnswer, or a restart ended it).
	Code int
	// Version is the version the call made, 0 for none.
	Version int
	// Overwrote is how many versions the call's commit dropped: versions
	// another call made after this one read the object's.
	Overwrote int
	// CallerGone says the caller had hung up before the call ended.
	CallerGone bool
}

// Fault is what the stand-in does to one add or update call.
type Fault struct {
	// Refuse answers with this HTTP status and exception, storing nothing.
	Refuse int
	Status string // the exception's name (default by Refuse's code)
	Detail string
	// Hold keeps the call waiting this long before it fetches its
	// manifest, whatever its caller does, as a call queued in the service.
	Hold time.Duration
	// HoldForNext keeps the call waiting, whatever its caller does, until
	// a later call on the same object has fetched its files; that call
	// then waits for this one to end before it commits: a stale call woken
	// while another attempt is under way, whatever the timing.
	HoldForNext bool
	// HoldCommit keeps the call waiting this long once it has fetched
	// every file, before it writes the version, whatever its caller does.
	HoldCommit time.Duration
	// Delay holds the answer (after storing, unless refused) this long,
	// or until the caller hangs up.
	Delay time.Duration
	// LoseAnswer stores the version, then closes the connection without
	// an answer: the caller cannot know the call succeeded.
	LoseAnswer bool
}

// Start starts a stand-in serving the given nodes (default: node 1),
// stopped when the test ends.
func Start(t testing.TB, nodes ...int) *Service {
	t.Helper()
	s, err := Run(nodes...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Run starts a stand-in serving the given nodes (default: node 1); Close
// stops it.
func Run(nodes ...int) (*Service, error) {
	if len(nodes) == 0 {
		nodes = []int{1}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Service{URL: "http://" + ln.Addr().String(), addr: ln.Addr().String(), nodes: nodes, objects: map[key]*object{},
		fetch: &http.Client{Timeout: 5 * time.Minute}, changed: make(chan struct{}), stale: map[key]*staleCall{}}
	s.serve(ln)
	return s, nil
}

func (s *Service) serve(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.run, s.stop = context.WithCancel(context.Background())
	s.srv = &http.Server{Handler: http.HandlerFunc(s.route), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
}

// Close stops the stand-in, ending the calls in flight.
func (s *Service) Close() { s.Down() }

// Down takes the service down as a restart does: it no longer accepts
// connections, the connections open are cut, and the calls in flight end
// with nothing stored. What it stored stays.
func (s *Service) Down() {
	s.mu.Lock()
	srv, stop := s.srv, s.stop
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Close()
	stop()
	s.calls.Wait()
}

// Up brings the service back on the same address after Down.
func (s *Service) Up() error {
	s.mu.Lock()
	up := s.srv != nil
	s.mu.Unlock()
	if up {
		return errors.New("merritttest: the service is up")
	}
	var ln net.Listener
	var err error
	// The port was the service's a moment ago; the kernel may still hold
	// it for a short while.
	for range 50 {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("merritttest: listening on %s again: %w", s.addr, err)
	}
	s.serve(ln)
	return nil
}

// Next queues faults for the next add or update calls, one a call.
func (s *Service) Next(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, faults...)
}

// Pending is how many faults queued by Next no call has taken yet.
func (s *Service) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.faults)
}

// DropFaults drops the faults no call has taken, and says how many.
func (s *Service) DropFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.faults)
	s.faults = nil
	return n
}

// Calls returns the add and update calls that have ended, in the order
// they ended.
func (s *Service) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ended)
}

// Commits is how many ended calls made a version of object: exactly one
// for an object stored once, whatever its versions show (a call that
// overlaps another drops its version).
func (s *Service) Commits(object string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.ended {
		if c.Object == object && c.Version > 0 {
			n++
		}
	}
	return n
}

// WaitCalls waits until n add or update calls have ended, or ctx ends.
func (s *Service) WaitCalls(ctx context.Context, n int) ([]Call, error) {
	for {
		s.mu.Lock()
		ended, changed := slices.Clone(s.ended), s.changed
		s.mu.Unlock()
		if len(ended) >= n {
			return ended, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ended, fmt.Errorf("merritttest: %d of %d calls ended: %w", len(ended), n, ctx.Err())
		}
	}
}

// Versions is the number of versions of an object on a node.
func (s *Service) Versions(node int, id string) int {
	o := s.lookup(node, id)
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.versions)
}

// Objects lists the object ids a node holds.
func (s *Service) Objects(node int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, o := range s.objects {
		o.mu.Lock()
		n := len(o.versions)
		o.mu.Unlock()
		if k.node == node && n > 0 {
			out = append(out, k.id)
		}
	}
	slices.Sort(out)
	return out
}

// Files returns the names and contents of a version's files (nil when
// there is no such version).
func (s *Service) Files(node int, id string, number int) map[string][]byte {
	o := s.lookup(node, id)
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if number < 1 || number > len(o.versions) {
		return nil
	}
	out := map[string][]byte{}
	for _, f := range o.versions[number-1].files {
		out[f.name] = f.data
	}
	return out
}

// Created is when version number of an object was made (its call's
// commit), false when there is no such version.
func (s *Service) Created(node int, id string, number int) (time.Time, bool) {
	o := s.lookup(node, id)
	if o == nil {
		return time.Time{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if number < 1 || number > len(o.versions) {
		return time.Time{}, false
	}
	return o.versions[number-1].created, true
}

func (s *Service) lookup(node int, id string) *object {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.objects[key{node, id}]
}

func (s *Service) takeFault() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.faults) == 0 {
		return Fault{}
	}
	f := s.faults[0]
	s.faults = s.faults[1:]
	return f
}

func (s *Service) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, c)
	close(s.changed)
	s.changed = make(chan struct{})
}

// running is the context of the service's run a request arrived in
// (ended by Down), and whether it is still running.
func (s *Service) running() (context.Context, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil, false
	}
	s.calls.Add(1)
	return s.run, true
}

// staleCall is a call held until the next call on its object has fetched
// its files (woken), which then waits for it to end (done).
type staleCall struct {
	woken, done chan struct{}
}

// holdForNext registers a call on k held for the next one.
func (s *Service) holdForNext(k key) *staleCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &staleCall{woken: make(chan struct{}), done: make(chan struct{})}
	s.stale[k] = c
	return c
}

// didFetch says a call on k has fetched its files: a call held for it
// goes on, and this one waits until it ended (at most a minute).
func (s *Service) didFetch(ctx context.Context, k key) {
	s.mu.Lock()
	c := s.stale[k]
	delete(s.stale, k)
	s.mu.Unlock()
	if c == nil {
		return
	}
	close(c.woken)
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	case <-ctx.Done():
	}
}
