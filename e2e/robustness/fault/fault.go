// Package fault makes the robustness suite's faults on a seeded schedule:
// failpoints armed where an effect has happened and its commit not yet
// (crash, stall past the session timeout, error), processes killed
// (kill -9) and frozen (SIGSTOP past the session timeout), the ZooKeeper
// leader killed, the quorum lost, a replica cut off from ZooKeeper (a
// partition: its proxies refuse it), every link to ZooKeeper slowed; and,
// storing into Merritt's storage service, a call the service goes on with
// after its caller gave up (stale), and the service restarted.
// A seed gives the same schedule again (ROBUSTNESS_SEED), though not the
// same timing.
package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ingestq/ingestq/e2e/robustness/failpoint"
	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// Kind is a kind of fault.
type Kind string

const (
	Failpoint Kind = "failpoint"
	Kill      Kind = "kill -9"
	Freeze    Kind = "SIGSTOP"
	Leader    Kind = "leader loss"
	Quorum    Kind = "quorum loss"
	Partition Kind = "partition"
	Slow      Kind = "slow links"
	// StaleCall: Merritt's storage service holds the next add or update
	// past its caller's timeout and goes on with it once the job's next
	// attempt's call has fetched its files.
	StaleCall Kind = "stale storage call"
	// StorageRestart: Merritt's storage service goes down (connections
	// refused, calls in flight ended storing nothing) and comes back.
	StorageRestart Kind = "storage service restart"
)

// Fault is one entry of a schedule.
type Fault struct {
	Kind    Kind
	Point   failpoint.Point  // Failpoint
	Action  failpoint.Action // Failpoint
	Service string           // Kill, Freeze, Partition: whose replica
}

func (f Fault) String() string {
	switch f.Kind {
	case Failpoint:
		return fmt.Sprintf("%s %s at %s (%s)", f.Kind, f.Action, f.Point.Name, f.Point.Service)
	case Kill, Freeze, Partition:
		return fmt.Sprintf("%s %s", f.Kind, f.Service)
	}
	return string(f.Kind)
}

// Plan is what a schedule covers.
type Plan struct {
	Points                                  []failpoint.Point // each armed once, with an action of its own
	Kills                                   int
	Freeze, Leader, Quorum, Partition, Slow bool
	// Merritt: the run stores into Merritt's storage service; a stale
	// call and a restart of the service each come twice.
	Merritt bool
}

// Schedule orders the plan's faults, seeded: each failpoint once with an
// action drawn from those it takes, the others among them at random.
func Schedule(seed uint64, p Plan) []Fault {
	rng := rand.New(rand.NewPCG(seed, 11))
	var out []Fault
	for i, pt := range p.Points {
		acts := pt.Actions()
		// Drawn, but every action comes round: offset by the seed.
		out = append(out, Fault{Kind: Failpoint, Point: pt, Action: acts[(i+rng.IntN(len(acts)))%len(acts)]})
	}
	for range p.Kills {
		out = append(out, Fault{Kind: Kill, Service: stack.Services[rng.IntN(len(stack.Services))]})
	}
	if p.Freeze {
		out = append(out, Fault{Kind: Freeze, Service: []string{"downloader", "processor"}[rng.IntN(2)]})
	}
	if p.Partition {
		out = append(out, Fault{Kind: Partition, Service: []string{"downloader", "processor", "notifier"}[rng.IntN(3)]})
	}
	for k, on := range map[Kind]bool{Leader: p.Leader, Quorum: p.Quorum, Slow: p.Slow} {
		if on {
			out = append(out, Fault{Kind: k})
		}
	}
	if p.Merritt {
		out = append(out, Fault{Kind: StaleCall}, Fault{Kind: StaleCall}, Fault{Kind: StorageRestart}, Fault{Kind: StorageRestart})
	}
	// Map order above is random: sort before the seeded shuffle.
	slices.SortStableFunc(out, func(a, b Fault) int { return strings.Compare(a.String(), b.String()) })
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Env is what the faults act on.
type Env struct {
	Stack    *stack.Stack
	Ensemble *zktest.Ensemble
	// Proxies are each replica's ways to the ensemble ("processor-1").
	Proxies map[string][]*zktest.Proxy
	// Failpoints reach each replica's failpoint endpoint (nil for a build
	// without failpoints).
	Failpoints     map[string]*failpoint.Client
	SessionTimeout time.Duration
	Logf           func(format string, args ...any)
	// Nudge, when set, brings the next deposit once a failpoint is armed:
	// work that reaches it arrives whatever the rest of the traffic did.
	Nudge func()
	// Merritt is the stand-in for Merritt's storage service the stack
	// stores into (nil: none).
	Merritt *merritttest.Service
}

// Outcome is how one fault went.
type Outcome struct {
	Fault   Fault
	Replica string
	Reached bool // a failpoint: reached while armed
	Detail  string
	Took    time.Duration
}

// cutFor is how long a stall, a freeze, a partition and a quorum loss last.
func (e *Env) cutFor() time.Duration { return 3 * e.SessionTimeout }

// reachWithin bounds the wait for an armed failpoint to be reached.
const reachWithin = 60 * time.Second

// Make makes one fault and undoes it; an error is a fault that could not
// be undone (a process or server that would not start again).
func (e *Env) Make(ctx context.Context, rng *rand.Rand, f Fault) (Outcome, error) {
	start := time.Now()
	out := Outcome{Fault: f}
	var err error
	switch f.Kind {
	case Failpoint:
		err = e.failpoint(ctx, f, &out)
	case Kill:
		p := e.pick(rng, f.Service)
		out.Replica = name(p)
		p.Kill()
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second)))) // how long it stays dead
		err = e.restart(ctx, p)
	case Freeze:
		p := e.pick(rng, f.Service)
		out.Replica = name(p)
		p.Freeze()
		time.Sleep(e.cutFor()) // the length of the freeze
		p.Thaw()
	case Partition:
		p := e.pick(rng, f.Service)
		out.Replica = name(p)
		for _, px := range e.Proxies[name(p)] {
			px.Block()
		}
		time.Sleep(e.cutFor()) // the length of the partition
		for _, px := range e.Proxies[name(p)] {
			px.Unblock()
		}
	case Leader:
		err = e.killLeader(ctx, &out)
	case Quorum:
		err = e.loseQuorum(ctx, rng, &out)
	case StaleCall:
		err = e.staleCall(ctx, &out)
	case StorageRestart:
		if e.Merritt == nil {
			return out, errors.New("a storage service restart in a run that stores elsewhere")
		}
		e.Merritt.Down()
		time.Sleep(e.cutFor()) // how long it stays down
		err = e.Merritt.Up()
		out.Detail = fmt.Sprintf("down for %s", e.cutFor())
	case Slow:
		d := zktest.Delay{Min: 20 * time.Millisecond, Max: 50 * time.Millisecond}
		for _, ps := range e.Proxies {
			for _, px := range ps {
				px.SetDelay(d, d)
			}
		}
		time.Sleep(3 * e.cutFor()) // how long the links stay slow
		for _, ps := range e.Proxies {
			for _, px := range ps {
				px.SetDelay(zktest.Delay{}, zktest.Delay{})
			}
		}
		out.Detail = "20–50 ms each way"
	}
	if err == nil {
		// A process the fault ended (a panic where nothing recovers it) is
		// started again, as its supervisor would.
		for _, s := range stack.Services {
			for _, p := range e.Stack.Procs(s) {
				if p.Exited() {
					out.Detail += fmt.Sprintf("; %s exited and was started again", name(p))
					if err = e.restart(ctx, p); err != nil {
						break
					}
				}
			}
		}
	}
	out.Took = time.Since(start)
	return out, err
}

func name(p *stack.Proc) string { return fmt.Sprintf("%s-%d", p.Service, p.Index) }

func (e *Env) pick(rng *rand.Rand, service string) *stack.Proc {
	ps := e.Stack.Procs(service)
	return ps[rng.IntN(len(ps))]
}

// maxStarts bounds the starts of a replica that exits while starting (a
// leader election, say), as its supervisor would start it again.
const maxStarts = 5

func (e *Env) restart(ctx context.Context, p *stack.Proc) error {
	var err error
	for range maxStarts {
		if err = p.Restart(context.WithoutCancel(ctx)); err == nil || !errors.Is(err, stack.ErrExitedStarting) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("restarting %s: %w", name(p), err)
	}
	return nil
}

// failpoint arms a failpoint on every replica of its service; the first
// replica to reach it takes the fault, the others are disarmed.
func (e *Env) failpoint(ctx context.Context, f Fault, out *Outcome) error {
	procs := e.Stack.Procs(f.Point.Service)
	term := "1*panic"
	if f.Action != failpoint.Error {
		// Asleep at the failpoint until killed, or until after the stall.
		term = fmt.Sprintf("1*sleep(%d)", (e.cutFor() + 3*time.Second).Milliseconds())
	}
	for _, p := range procs {
		if c := e.Failpoints[name(p)]; c != nil {
			if err := c.Enable(ctx, f.Point.Name, term); err != nil {
				e.Logf("arming %s on %s: %v", f.Point.Name, name(p), err)
			}
		}
	}
	if e.Nudge != nil {
		e.Nudge() // a batch arrives to reach it
	}
	disarm := func() {
		for _, p := range procs {
			if c := e.Failpoints[name(p)]; c != nil {
				c.Disable(context.WithoutCancel(ctx), f.Point.Name)
			}
		}
	}
	defer disarm()
	// The first replica to reach it.
	waitCtx, cancel := context.WithTimeout(ctx, reachWithin)
	defer cancel()
	var hit *stack.Proc
	for hit == nil && waitCtx.Err() == nil {
		for _, p := range procs {
			if c := e.Failpoints[name(p)]; c != nil {
				if n, err := c.Count(waitCtx, f.Point.Name); err == nil && n > 0 {
					hit = p
					break
				}
			}
		}
		if hit == nil {
			select {
			case <-waitCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if hit == nil {
		out.Detail = "not reached within " + reachWithin.String()
		return nil
	}
	out.Reached, out.Replica = true, name(hit)
	switch f.Action {
	case failpoint.Crash:
		hit.Kill()
		disarm()
		return e.restart(ctx, hit)
	case failpoint.Stall:
		hit.Freeze()
		disarm()
		time.Sleep(e.cutFor()) // past the session timeout: its session expires
		hit.Thaw()
		out.Detail = fmt.Sprintf("stopped %s, then continued to its commit", e.cutFor())
	case failpoint.Error:
		out.Detail = "the step failed with the failpoint's panic"
	}
	return nil
}

func (e *Env) waitLeader(ctx context.Context, not int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if leader := e.Ensemble.Leader(); leader >= 0 && leader != not {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no ZooKeeper leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *Env) killLeader(ctx context.Context, out *Outcome) error {
	ctx = context.WithoutCancel(ctx)
	idx, err := e.waitLeader(ctx, -1)
	if err != nil {
		return err
	}
	e.Ensemble.Servers[idx].Kill()
	killed := time.Now()
	next, err := e.waitLeader(ctx, idx)
	if err != nil {
		return err
	}
	out.Detail = fmt.Sprintf("server %d killed; server %d leads after %s", idx+1, next+1, time.Since(killed).Round(time.Millisecond))
	return e.Ensemble.Servers[idx].Restart(ctx)
}

func (e *Env) loseQuorum(ctx context.Context, rng *rand.Rand, out *Outcome) error {
	ctx = context.WithoutCancel(ctx)
	leader, err := e.waitLeader(ctx, -1)
	if err != nil {
		return err
	}
	var others []int
	for i := range e.Ensemble.Servers {
		if i != leader {
			others = append(others, i)
		}
	}
	stopped := []int{leader, others[rng.IntN(len(others))]}
	var wg sync.WaitGroup
	for _, i := range stopped {
		wg.Go(e.Ensemble.Servers[i].Stop)
	}
	wg.Wait()
	time.Sleep(e.cutFor()) // the length of the outage
	for _, i := range stopped {
		if err := e.Ensemble.Servers[i].Restart(ctx); err != nil {
			return fmt.Errorf("restarting ZooKeeper server %d: %w", i+1, err)
		}
	}
	next, err := e.waitLeader(ctx, -1)
	out.Detail = fmt.Sprintf("servers %d and %d stopped for %s; server %d leads", stopped[0]+1, stopped[1]+1, e.cutFor(), next+1)
	return err
}

// staleCall makes the service's next add or update a stale call: held
// past its caller's timeout until the job's next attempt has fetched its
// files. It waits for a call to take it, a deposit nudged to come; one
// not taken in time is dropped.
func (e *Env) staleCall(ctx context.Context, out *Outcome) error {
	if e.Merritt == nil {
		return errors.New("a stale storage call in a run that stores elsewhere")
	}
	e.Merritt.Next(merritttest.Fault{HoldForNext: true})
	if e.Nudge != nil {
		e.Nudge()
	}
	waitCtx, cancel := context.WithTimeout(ctx, reachWithin)
	defer cancel()
	for e.Merritt.Pending() > 0 && waitCtx.Err() == nil {
		select {
		case <-waitCtx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if e.Merritt.DropFaults() > 0 {
		out.Detail = "no call within " + reachWithin.String()
		return nil
	}
	out.Reached = true
	out.Detail = "the next call held until its object's next call fetched its files"
	return nil
}
