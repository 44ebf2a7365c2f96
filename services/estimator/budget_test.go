package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// silentHost is a depositor's host on loopback that accepts connections
// and reads requests but never answers. It counts the requests it read.
type silentHost struct {
	ln         net.Listener
	closeConns func()
	hangUp     bool // close the connection on reading a request
	wg         sync.WaitGroup
	mu         sync.Mutex
	requests   int
}

func newSilentHost(t *testing.T) *silentHost { return listenSilent(t, false) }

// newHangUpHost is a silentHost that closes the connection of every
// request it reads: the request fails at once, with no answer.
func newHangUpHost(t *testing.T) *silentHost { return listenSilent(t, true) }

func listenSilent(t *testing.T, hangUp bool) *silentHost {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &silentHost{ln: ln, hangUp: hangUp}
	var conns []net.Conn
	var connsMu sync.Mutex
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns = append(conns, c)
			connsMu.Unlock()
			h.wg.Go(func() {
				r := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(r); err != nil {
						return
					}
					h.mu.Lock()
					h.requests++
					h.mu.Unlock()
					if h.hangUp {
						c.Close()
						return
					}
				}
			})
		}
	})
	h.closeConns = func() {
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}
	t.Cleanup(h.close)
	return h
}

// close stops the host: its listener and connections are closed.
func (h *silentHost) close() {
	h.ln.Close()
	h.closeConns()
	h.wg.Wait()
}

func (h *silentHost) URL() string { return "http://" + h.ln.Addr().String() }

// received is the number of requests read so far.
func (h *silentHost) received() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests
}

// refusingHost is an address on loopback where nothing listens: a
// connection to it is refused.
func refusingHost(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestAHostThatFailsIsAskedAFewTimesPerJobAndItsFilesKeepTheirDeclaredSizes(t *testing.T) {
	d := newDepositor(t)
	silent := newSilentHost(t)
	refusing := refusingHost(t)
	q := queuetest.Connect(t, zktest.Root(t))
	// A header timeout short enough for the silent host's few requests to
	// end soon, long enough for the depositor's answers on a loaded
	// machine; the budget is out of reach: the gate alone bounds the job.
	e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges(), HeaderTimeout: 2 * time.Second})
	startEstimator(t, q, e)

	const perHost = 20
	files := []*v1.ManifestFile{file(d.URL+"/sized/100", -1), file(d.URL+"/sized/200", -1)}
	var declared int64
	for i := range perHost {
		files = append(files, file(fmt.Sprintf("%s/f%d.bin", silent.URL(), i), 10))
		declared += 10
		size := int64(-1) // every other file of the refusing host declares no size
		if i%2 == 0 {
			size = 7
			declared += 7
		}
		files = append(files, file(fmt.Sprintf("%s/f%d.bin", refusing, i), size))
	}
	for round := range 2 {
		jid := queuetest.Spawn(t, q, objectJob(files...), queue.Pending)
		job := queuetest.WaitState(t, q, jid, queue.Provisioning)

		if want := 300 + declared; job.GetSpaceNeeded() != want {
			t.Errorf("job %d: space_needed %d, want %d (the depositor's sizes and the declared ones)", round, job.GetSpaceNeeded(), want)
		}
		hosts := []string{strings.TrimPrefix(silent.URL(), "http://"), strings.TrimPrefix(refusing, "http://")}
		slices.Sort(hosts)
		want := fmt.Sprintf("2 of %d files sized by HEAD, %d not (%s failed 3 times in a row: %d files not asked)",
			len(files), len(files)-2, strings.Join(hosts, ", "), 2*(perHost-e.HostFailures))
		if msg := job.GetStatus().GetMessage(); !strings.Contains(msg, want) {
			t.Errorf("job %d: message %q, want it to contain %q", round, msg, want)
		}
		// Each job asks the dead host afresh, and no more than the gate lets it.
		if n, most := silent.received(), (round+1)*e.HostFailures; n > most {
			t.Errorf("after job %d the silent host received %d HEADs, want at most %d per job", round, n, e.HostFailures)
		}
	}
}

func TestAHostWhoseFilesRedirectToAFailingHostIsNotGivenUpOnButTheFailingHostIs(t *testing.T) {
	// Failures that come at once (a hang-up, a refused connection), so no
	// timeout is waited for.
	mirror := newHangUpHost(t)
	dead := strings.TrimPrefix(refusingHost(t), "http://")
	mirrorHost := strings.TrimPrefix(mirror.URL(), "http://")
	// The depositor's host answers /sized/N itself and redirects
	// /via/HOST/NAME to http://HOST/NAME.
	depositor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := strings.CutPrefix(r.URL.Path, "/sized/"); ok {
			w.Header().Set("Content-Length", n)
			return
		}
		target, ok := strings.CutPrefix(r.URL.Path, "/via/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, "http://"+target, http.StatusFound)
	}))
	t.Cleanup(depositor.Close)
	q := queuetest.Connect(t, zktest.Root(t))
	e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()})
	startEstimator(t, q, e)

	const perTarget = 10
	var files []*v1.ManifestFile
	var declared int64
	for i := range perTarget {
		files = append(files, file(fmt.Sprintf("%s/via/%s/m%d.bin", depositor.URL, mirrorHost, i), 10),
			file(fmt.Sprintf("%s/via/%s/d%d.bin", depositor.URL, dead, i), 10))
		declared += 20
	}
	// The mirror's own URL, and files the depositor's host answers for,
	// after the failures.
	files = append(files, file(mirror.URL()+"/own.bin", 10),
		file(depositor.URL+"/sized/100", -1), file(depositor.URL+"/sized/200", -1))
	declared += 10

	jid := queuetest.Spawn(t, q, objectJob(files...), queue.Pending)
	job := queuetest.WaitState(t, q, jid, queue.Provisioning)

	if want := 300 + declared; job.GetSpaceNeeded() != want {
		t.Errorf("space_needed %d, want %d (the depositor's sizes and the declared ones)", job.GetSpaceNeeded(), want)
	}
	hosts := []string{mirrorHost, dead}
	slices.Sort(hosts)
	notAsked := (perTarget + 1 - e.HostFailures) + (perTarget - e.HostFailures)
	want := fmt.Sprintf("2 of %d files sized by HEAD, %d not (%s failed 3 times in a row: %d files not asked)",
		len(files), len(files)-2, strings.Join(hosts, ", "), notAsked)
	if msg := job.GetStatus().GetMessage(); !strings.Contains(msg, want) {
		t.Errorf("message %q, want it to contain %q: the hosts that failed given up on, not the one that redirected to them", msg, want)
	}
	// The mirror is asked, through redirects and its own URL, no more than
	// a host asked directly.
	if n := mirror.received(); n > e.HostFailures {
		t.Errorf("the mirror received %d HEADs, want at most %d", n, e.HostFailures)
	}
}

func TestTheEstimateBudgetMovesAJobOnWithTheFilesNotSizedKeepingTheirDeclaredSizes(t *testing.T) {
	silent := newSilentHost(t)
	q := queuetest.Connect(t, zktest.Root(t))
	// The silent host never times out and is never given up on: the
	// budget alone ends the job's estimate (without it WaitState gives up).
	e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges(), HeaderTimeout: time.Hour})
	e.Budget = 300 * time.Millisecond
	e.HostFailures = 1000
	startEstimator(t, q, e)
	// Registered after the estimator, so it runs first: should the budget
	// not end the HEADs, closing their connections does, and the runner
	// stops.
	t.Cleanup(silent.close)

	const n = 30
	var files []*v1.ManifestFile
	for i := range n {
		files = append(files, file(fmt.Sprintf("%s/f%d.bin", silent.URL(), i), 5))
	}
	files = append(files, file(silent.URL()+"/undeclared.bin", -1))
	jid := queuetest.Spawn(t, q, objectJob(files...), queue.Pending)
	job := queuetest.WaitState(t, q, jid, queue.Provisioning)

	if job.GetSpaceNeeded() != 5*n {
		t.Errorf("space_needed %d, want %d (the declared sizes)", job.GetSpaceNeeded(), 5*n)
	}
	want := fmt.Sprintf("0 of %d files sized by HEAD, %d not (estimate budget 300ms spent with %d files left)", n+1, n+1, n+1)
	if msg := job.GetStatus().GetMessage(); !strings.Contains(msg, want) || !strings.Contains(msg, "1 of 31 files without a usable size") {
		t.Errorf("message %q, want it to contain %q and the file without a size", msg, want)
	}
	if got := silent.received(); got > e.Concurrency {
		t.Errorf("the silent host received %d HEADs, want at most the %d sent at once", got, e.Concurrency)
	}
}

func TestEstimateSettingsThatCannotWorkAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Estimator)
		want   string
	}{
		{"no budget", func(e *Estimator) { e.Budget = 0 }, "estimate budget 0s must be positive"},
		{"no host failure allowed", func(e *Estimator) { e.HostFailures = 0 }, "estimate host failures 0 must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEstimator(t, fetch.Policy{Allow: fetch.LoopbackRanges()})
			tc.change(e)
			if err := e.Validate(); err == nil || err.Error() != tc.want {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestTheMessageNamesAFewOfTheHostsGivenUpOn(t *testing.T) {
	est := estimate{sizes: make([]int64, 10), byHead: 2, hostDown: 8,
		down: []string{"a.example:80", "b.example:80", "c.example:80", "d.example:80", "e.example:80"}}
	want := "2 of 10 files sized by HEAD, 8 not (a.example:80, b.example:80, c.example:80 and 2 more hosts failed 3 times in a row: 8 files not asked)"
	if got := est.cutShort(time.Minute, 3); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if got := (estimate{sizes: make([]int64, 2), byHead: 1}).cutShort(time.Minute, 3); got != "" {
		t.Errorf("every file asked: message %q, want none", got)
	}
}
