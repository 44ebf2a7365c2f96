package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/robustness/failpoint"
	"github.com/ingestq/ingestq/e2e/robustness/fault"
	"github.com/ingestq/ingestq/e2e/robustness/validate"
	"github.com/ingestq/ingestq/e2e/stack"
)

// The checker proves it can fail: each test here builds the services with
// a patch that breaks a promise on purpose (e2e/robustness/broken), runs
// the suite against them, and requires the checker to name the broken
// promise, with the command that replays the run.

func brokenReplay(test string, seed uint64) string {
	return fmt.Sprintf("cd e2e && %s=1 %s=%d go test -count=1 -v -timeout 30m -run '%s$' ./robustness/", envFull, envSeed, seed, test)
}

// runBroken runs the suite on a broken build and returns its report.
func runBroken(t *testing.T, patch string, opts runOpts) *validate.Report {
	t.Helper()
	if !full() {
		t.Skipf("the broken builds run in the full suite (make robustness, %s=1)", envFull)
	}
	ctx := context.Background()
	bins, err := build(ctx, "broken-"+patch, func(ctx context.Context, dir string) error { return buildFailpoints(ctx, dir, patch) })
	if err != nil {
		t.Fatal(err)
	}
	opts.bins, opts.failpoints = bins, true
	opts.seed = seeds(t)[0]
	opts.replay = brokenReplay(t.Name(), opts.seed)
	r := startRun(ctx, t, opts)
	t.Logf("broken build %s, seed %d; replay: %s", patch, opts.seed, opts.replay)
	res := r.do(ctx)
	r.logReport(res)
	if res.report == nil {
		t.Fatalf("the checker did not run: %v", res.err)
	}
	return res.report
}

// requireViolation fails unless the report names check.
func requireViolation(t *testing.T, rep *validate.Report, check, replay string) {
	t.Helper()
	i := slices.IndexFunc(rep.Violations, func(v validate.Violation) bool { return v.Check == check })
	if i < 0 {
		t.Fatalf("the checker missed the broken promise %q (violations: %v); replay: %s", check, rep.Violations, replay)
	}
	t.Logf("caught: %s\nreplay: %s", rep.Violations[i], replay)
}

// TestEveryBrokenBuildsPatchAppliesToTheTree: the broken builds run only
// in the full suite; a change to the code a patch breaks must show in
// make test, not first in make robustness.
func TestEveryBrokenBuildsPatchAppliesToTheTree(t *testing.T) {
	patches, err := filepath.Glob(filepath.Join("broken", "*.patch"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no patch in broken/ (%v)", err)
	}
	root, err := filepath.Abs(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patches {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		// As build-failpoints.sh applies them to its copy of the tree.
		cmd := exec.Command("git", "apply", "--check", "--unsafe-paths", "--directory=.", abs)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s does not apply to the tree: %v\n%s", p, err, out)
		}
	}
}

// TestTheCheckerCatchesACommitBeforeTheStoreWrite: the storing step's
// version completes only after the job moved on to Recording.
func TestTheCheckerCatchesACommitBeforeTheStoreWrite(t *testing.T) {
	opts := runOpts{batches: 3, plan: fault.Plan{}}
	rep := runBroken(t, "commit-before-store.patch", opts)
	requireViolation(t, rep, validate.CheckEffectFirst, brokenReplay(t.Name(), seeds(t)[0]))
}

// TestTheCheckerCatchesACommitWithoutItsFence: commits look neither at
// the claim's lock nor at the status version it owns. A processor stalled
// after storing a version, past its session, is continued while another
// processor works on the same job's step, and commits over it.
func TestTheCheckerCatchesACommitWithoutItsFence(t *testing.T) {
	opts := runOpts{batches: 1, files: true, scenario: overlappingSteps}
	rep := runBroken(t, "unfenced-commit.patch", opts)
	requireViolation(t, rep, validate.CheckMutualExclusion, brokenReplay(t.Name(), seeds(t)[0]))
}

// overlappingSteps stalls the first processor to reach the end of a
// storing step, past its session timeout, until the other processor has
// taken the same job and reached the same point; then continues it.
func overlappingSteps(ctx context.Context, r *run) error {
	const name = "storingVersionStored"
	procs := r.stack.Procs("processor")
	client := func(p *stack.Proc) *failpoint.Client { return r.fps[fmt.Sprintf("%s-%d", p.Service, p.Index)] }
	for _, p := range procs {
		if err := client(p).Enable(ctx, name, "1*sleep(30000)"); err != nil {
			return err
		}
	}
	defer func() {
		for _, p := range procs {
			client(p).Disable(context.WithoutCancel(ctx), name)
		}
	}()
	first := func(ps []*stack.Proc, within time.Duration) (*stack.Proc, error) {
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		for {
			for _, p := range ps {
				if n, err := client(p).Count(wctx, name); err == nil && n > 0 {
					return p, nil
				}
			}
			select {
			case <-wctx.Done():
				return nil, fmt.Errorf("%s not reached: %w", name, wctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	a, err := first(procs, 2*time.Minute)
	if err != nil {
		return err
	}
	var others []*stack.Proc
	for _, p := range procs {
		if p != a {
			others = append(others, p)
			// The other sleeps longer, inside its step, while a commits.
			client(p).Enable(ctx, name, "1*sleep(60000)")
		}
	}
	a.Freeze()
	r.logf("processor-%d stopped at %s; waiting for another processor to reach the same step", a.Index, name)
	b, err := first(others, time.Minute)
	a.Thaw()
	if err != nil {
		return err
	}
	r.logf("processor-%d is inside the step; processor-%d continued", b.Index, a.Index)
	return nil
}

// TestTheCheckerCatchesAStaleStorageCall: a storing attempt's URLs are
// served on after the attempt ended. Merritt's storage service goes on
// with a call whose caller gave up, woken while the job's next attempt
// runs (on either processor): it fetches its files and stores a version
// too.
func TestTheCheckerCatchesAStaleStorageCall(t *testing.T) {
	opts := runOpts{batches: 2, merritt: true, scenario: staleCalls}
	rep := runBroken(t, "attempt-urls-served-on.patch", opts)
	requireViolation(t, rep, validate.CheckStoredOnce, brokenReplay(t.Name(), seeds(t)[0]))
}

// staleCalls makes three storing calls stale, one after another.
func staleCalls(ctx context.Context, r *run) error {
	rng := rand.New(rand.NewPCG(r.opts.seed, 17))
	for range 3 {
		out, err := r.env.Make(ctx, rng, fault.Fault{Kind: fault.StaleCall})
		r.mu.Lock()
		r.outcomes = append(r.outcomes, out)
		r.mu.Unlock()
		r.logf("fault: %s: %s", out.Fault, out.Detail)
		if err != nil {
			return err
		}
	}
	return nil
}
