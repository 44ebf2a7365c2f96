package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestEveryServiceKeepsItsSessionWhileAZooKeeperServerHangs freezes
// (SIGSTOP) the ZooKeeper leader for hangFor while jobs flow, then a
// follower (the one with the most clients): a hung server still takes
// connections and answers nothing, as in a long GC pause, on a hung disk
// or in a frozen VM. The two others make a quorum, so no service may lose
// its session or stop serving: each one's health is followed all through
// the run and its log must not say its session was lost; a Submit made
// every few seconds while a server hangs is answered within two session
// timeouts (Unavailable only while the client moves to another server),
// and every job completes once.
//
// The session timeout is the stack's (4 s), against the ensemble's 2.5 s
// (syncLimit × tickTime) for followers to notice their leader hung, and an
// election (docs/zookeeper.md says how the two must compare).
func TestEveryServiceKeepsItsSessionWhileAZooKeeperServerHangs(t *testing.T) {
	runScenario(t, scenario{shortJobs: 30, replicas: 1, serverHangs: true, sessionTimeout: 4 * time.Second})
}

// hangFor is how long a hung server stays frozen: many session timeouts.
const hangFor = 20 * time.Second

// A Submit is made every probeEvery while a server hangs, each of a batch
// of its own; each call must be answered within two session timeouts.
const (
	probesPerHang = 8
	probeEvery    = hangFor / probesPerHang
)

// When the hangs come, as the fraction of jobs completed.
const (
	leaderHangAt   = 0.1
	followerHangAt = 0.5
)

// serverHang is what freezing one ZooKeeper server did and saw.
type serverHang struct {
	role    string // "leader" or "follower"
	server  int    // index frozen
	clients int    // its client connections when frozen
	at      time.Duration
	// elected: from the freeze until another server led (the leader's hang).
	elected time.Duration
	calls   []probeCall
}

// probeCall is one Submit call made while a server hung.
type probeCall struct {
	batch int
	at    time.Duration // from the freeze
	took  time.Duration
	code  codes.Code
	err   string
}

// hangServer freezes the ensemble's leader (or the follower with the most
// clients) for hangFor, submits probe batches meanwhile, thaws it, and
// checks that no service stopped serving or lost its session.
func (m *monkey) hangServer(ctx context.Context, role string) error {
	ctx = context.WithoutCancel(ctx) // what is frozen is thawed
	leader, err := waitLeader(ctx, m.r, -1)
	if err != nil {
		return err
	}
	h := &serverHang{role: role, server: leader}
	if role == "follower" {
		h.server = -1
		for i, s := range m.r.ens.Servers {
			if n := clientConnections(s); i != leader && (h.server < 0 || n > h.clients) {
				h.server, h.clients = i, n
			}
		}
	} else {
		h.clients = clientConnections(m.r.ens.Servers[leader])
	}
	server := m.r.ens.Servers[h.server]
	first := m.r.set.batches + len(m.hangs)*probesPerHang
	h.at = time.Since(m.r.start)
	server.Pause()
	frozen := time.Now()
	m.r.logf("SIGSTOP ZooKeeper %s (server %d, %d client connections) for %s", role, h.server+1, h.clients, hangFor)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var probeErrs []error
	for i := range probesPerHang {
		wg.Go(func() {
			waittest.For(ctx, probeEvery/2+time.Duration(i)*probeEvery) // the probe's turn: nothing to wait for
			calls, err := m.r.probe(ctx, m.r.batches[first+i], frozen)
			mu.Lock()
			defer mu.Unlock()
			h.calls = append(h.calls, calls...)
			if err != nil {
				probeErrs = append(probeErrs, err)
			}
		})
	}
	if role == "leader" {
		if _, err := waitLeader(ctx, m.r, h.server); err != nil {
			server.Resume()
			return fmt.Errorf("while ZooKeeper leader %d hung: %w", h.server+1, err)
		}
		h.elected = time.Since(frozen)
		m.r.logf("server %d hung; the others lead after %s", h.server+1, h.elected.Round(time.Millisecond))
	}
	waittest.For(ctx, hangFor-time.Since(frozen)) // the length of the hang itself: nothing to wait for
	server.Resume()
	m.r.logf("SIGCONT ZooKeeper server %d after %s", h.server+1, time.Since(frozen).Round(time.Millisecond))
	wg.Wait()
	slices.SortFunc(h.calls, func(a, b probeCall) int { return int(a.at - b.at) })
	m.hangs = append(m.hangs, h)
	if err := server.WaitServing(ctx); err != nil {
		return fmt.Errorf("ZooKeeper server %d after SIGCONT: %w", h.server+1, err)
	}
	var errs []error
	errs = append(errs, probeErrs...)
	within := 2 * m.r.sc.timeout()
	for _, c := range h.calls {
		switch {
		case c.took > within:
			errs = append(errs, fmt.Errorf("a Submit made %s into the hang answered after %s (%s: %s), over %s",
				c.at.Round(time.Millisecond), c.took.Round(time.Millisecond), c.code, c.err, within))
		case c.code != codes.OK && c.code != codes.Unavailable && c.code != codes.AlreadyExists:
			errs = append(errs, fmt.Errorf("a Submit made %s into the hang answered %s: %s", c.at.Round(time.Millisecond), c.code, c.err))
		}
	}
	errs = append(errs, m.serving.failures()...)
	errs = append(errs, sessionsLost(m.r.stack)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("while ZooKeeper %s (server %d) hung: %w", role, h.server+1, err)
	}
	return nil
}

// probe submits a probe batch to the batcher, once again after each
// answer that says to try again, and returns every call it made.
func (r *run) probe(ctx context.Context, b *depositBatch, since time.Time) ([]probeCall, error) {
	req := &v1.SubmitRequest{Submitter: "chaos", Profile: profileName, PayloadUrl: r.deposits.URL + b.path,
		PayloadType: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, BatchUuid: b.uuid,
		Metadata: &v1.Metadata{Who: "Chaos", What: fmt.Sprintf("probe batch %d", b.index), When: "2026"}}
	var calls []probeCall
	for {
		start := time.Now()
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := r.batchers[0].Submit(callCtx, req)
		cancel()
		c := probeCall{batch: b.index, at: start.Sub(since), took: time.Since(start), code: status.Code(err)}
		if err != nil {
			c.err = status.Convert(err).Message()
		}
		calls = append(calls, c)
		bid := resp.GetBatchId()
		switch c.code {
		case codes.OK:
		case codes.AlreadyExists: // a call before was applied, its answer lost
			if bid, err = batches.New(r.q).BatchByUUID(ctx, b.uuid); err != nil {
				return calls, fmt.Errorf("probe batch %d was submitted, but: %w", b.index, err)
			}
		case codes.Unavailable, codes.Internal, codes.DeadlineExceeded:
			if len(calls) < 50 {
				if waittest.For(ctx, 200*time.Millisecond) { // a client's pause before it tries again
					continue
				}
			}
			fallthrough
		default:
			return calls, fmt.Errorf("probe batch %d not submitted: %v", b.index, err)
		}
		r.mu.Lock()
		r.bids[b.index] = bid
		r.mu.Unlock()
		r.logf("probe batch %d submitted as %s, %s into the hang", b.index, bid, c.at.Round(time.Millisecond))
		return calls, nil
	}
}

// clientConnections is how many client connections a server has ("srvr"),
// -1 when it does not say.
func clientConnections(s *zktest.Server) int {
	out, err := zktest.FourLetter(s.Addr, "srvr")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Connections: "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}

// sessionsLost reads every service's log for a ZooKeeper session lost, or
// more than the one session it established.
func sessionsLost(s *stack.Stack) []error {
	var errs []error
	for _, name := range stack.Services {
		for _, p := range s.Procs(name) {
			var established int
			var lost []string
			eachLogLine(p.LogPath(), func(l logLine) {
				switch l.Msg {
				case "zookeeper session established":
					established++
				case "zookeeper session lost":
					lost = append(lost, l.Session)
				}
			})
			if len(lost) > 0 || established != 1 {
				errs = append(errs, fmt.Errorf("%s-%d lost ZooKeeper sessions %v and established %d (log %s)",
					p.Service, p.Index, lost, established, p.LogPath()))
			}
		}
	}
	return errs
}

// servingWatch follows every service's gRPC health from the start of the
// run (Health/Watch: each change as it happens) and notes every status
// other than SERVING.
type servingWatch struct {
	start time.Time
	mu    sync.Mutex
	not   []string // "estimator-0 NOT_SERVING at 12.3s"
}

func watchServing(ctx context.Context, r *run) *servingWatch {
	w := &servingWatch{start: r.start}
	for _, name := range stack.Services {
		for _, p := range r.stack.Procs(name) {
			go w.follow(ctx, p)
		}
	}
	return w
}

// follow watches one service's health until ctx ends, watching again when
// the stream breaks.
func (w *servingWatch) follow(ctx context.Context, p *stack.Proc) {
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		w.note(fmt.Sprintf("%s-%d health not followed: %v", p.Service, p.Index, err))
		return
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for ctx.Err() == nil {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		for err == nil {
			var resp *healthpb.HealthCheckResponse
			if resp, err = stream.Recv(); err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				w.note(fmt.Sprintf("%s-%d %s at %s", p.Service, p.Index, resp.GetStatus(), time.Since(w.start).Round(100*time.Millisecond)))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *servingWatch) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.not = append(w.not, s)
}

// failures are the statuses other than SERVING seen so far.
func (w *servingWatch) failures() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, s := range w.not {
		errs = append(errs, errors.New("not serving: "+s))
	}
	return errs
}

// hangFigures is the figures' line of one hang.
func (h *serverHang) figures() string {
	ok, unavailable, slowest := 0, 0, time.Duration(0)
	for _, c := range h.calls {
		switch c.code {
		case codes.OK, codes.AlreadyExists:
			ok++
		case codes.Unavailable:
			unavailable++
		}
		slowest = max(slowest, c.took)
	}
	elected := ""
	if h.role == "leader" {
		elected = fmt.Sprintf("; the others led after %s", h.elected.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s (server %d, %d client connections) frozen at %s for %s%s; %d Submit calls: %d answered OK, %d Unavailable, slowest %s",
		h.role, h.server+1, h.clients, h.at.Round(time.Second), hangFor, elected, len(h.calls), ok, unavailable, slowest.Round(time.Millisecond))
}
