package robustness

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/e2e/robustness/fault"
	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/testenv"
)

// baselineCommit reads the baseline's commit from baseline.txt.
func baselineCommit(t *testing.T) string {
	t.Helper()
	f, err := os.Open("baseline.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	t.Fatal("baseline.txt names no commit")
	return ""
}

// buildBaseline checks the baseline commit out into a git worktree of its
// own and builds its services into dir.
func buildBaseline(ctx context.Context, commit, dir string) error {
	src, err := testenv.MkdirTemp("ingestq-baseline-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	tree := filepath.Join(src, "tree")
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := git("worktree", "add", "--detach", tree, commit); err != nil {
		return err
	}
	defer git("worktree", "remove", "--force", tree)
	// The services only: the runs start no console (the baseline's is
	// inside its batcher).
	return stack.BuildPrograms(ctx, tree, dir, stack.Services)
}

// TestMixedVersionsKeepTheQueuesPromisesWhileRolled runs half of each
// service's replicas from the baseline (the commit baseline.txt names,
// built from a git worktree) and half from the current code, under kills,
// a freeze and a leader loss, then rolls the baseline replicas to the
// current code one by one, as a Kubernetes rollout does. The checker must
// find the queue's contract kept throughout.
func TestMixedVersionsKeepTheQueuesPromisesWhileRolled(t *testing.T) {
	if !full() {
		t.Skipf("the mixed-version run is part of the full suite (make robustness, %s=1)", envFull)
	}
	if out, err := exec.Command("git", "-C", repoRoot(), "rev-parse", "--git-dir").CombinedOutput(); err != nil {
		t.Skipf("the baseline is built from a git worktree, and this tree has no git repository: %v: %s", err, out)
	}
	ctx := context.Background()
	commit := baselineCommit(t)
	baseline, err := build(ctx, "baseline", func(ctx context.Context, dir string) error { return buildBaseline(ctx, commit, dir) })
	if err != nil {
		t.Fatal(err)
	}
	current, err := build(ctx, "failpoints", func(ctx context.Context, dir string) error { return buildFailpoints(ctx, dir) })
	if err != nil {
		t.Fatal(err)
	}
	seed := seeds(t)[0]
	replay := fmt.Sprintf("cd e2e && %s=1 %s=%d go test -count=1 -v -timeout 30m -run 'TestMixedVersionsKeepTheQueuesPromisesWhileRolled$' ./robustness/",
		envFull, envSeed, seed)
	r := startRun(ctx, t, runOpts{seed: seed, batches: 8, bins: current, failpoints: true, mixed: baseline, replay: replay,
		plan: fault.Plan{Kills: 3, Freeze: true, Leader: true}})
	t.Logf("mixed versions: baseline %s beside the current code, seed %d; replay: %s", commit, seed, replay)
	res := r.do(ctx)
	r.logReport(res)
	if res.err != nil {
		t.Errorf("the mixed-version run failed: %v\nreplay: %s", res.err, replay)
	}
	if res.report != nil && len(res.report.Violations) > 0 {
		t.Errorf("the checker found %d violations across the versions (above)\nreplay: %s", len(res.report.Violations), replay)
	}
	for _, s := range stack.Services {
		for _, p := range r.stack.Procs(s) {
			if filepath.Dir(p.Bin()) != current {
				t.Errorf("%s-%d still runs %s after the roll", s, p.Index, p.Bin())
			}
		}
	}
}
