package robustness

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/robustness/failpoint"
	"github.com/ingestq/ingestq/e2e/robustness/fault"
)

// shortPoints is how many failpoints a seed of the short run arms (make
// test); the seed picks which.
const shortPoints = 5

// seeds are the seeds to run: ROBUSTNESS_SEED, or ROBUSTNESS_SEEDS, or one
// from the clock.
func seeds(t *testing.T) []uint64 {
	t.Helper()
	raw := os.Getenv(envSeed)
	if raw == "" {
		raw = os.Getenv(envSeeds)
	}
	if raw == "" {
		return []uint64{uint64(time.Now().UnixNano())}
	}
	var out []uint64
	for _, f := range strings.Split(raw, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			t.Fatalf("%s/%s=%q: %v", envSeed, envSeeds, raw, err)
		}
		out = append(out, n)
	}
	return out
}

func full() bool { return os.Getenv(envFull) != "" }

// planFor is a seed's faults: in the full run every failpoint and every
// kind of fault; in the short one shortPoints failpoints (the seed picks),
// kills, a freeze and a leader loss.
func planFor(seed uint64) fault.Plan {
	if full() {
		return fault.Plan{Points: failpoint.All, Kills: 4, Freeze: true, Leader: true, Quorum: true, Partition: true, Slow: true}
	}
	pts := slices.Clone(failpoint.All)
	off := int(seed % uint64(len(pts)))
	pts = append(pts[off:], pts[:off]...)
	return fault.Plan{Points: pts[:shortPoints], Kills: 2, Freeze: true, Leader: true}
}

// coverage counts, across the seeds of a test binary, each failpoint's
// arming and reaching.
var coverage = struct {
	sync.Mutex
	armed, reached map[string]int
}{armed: map[string]int{}, reached: map[string]int{}}

func replayCommand(seed uint64) string {
	env := fmt.Sprintf("%s=%d", envSeed, seed)
	if full() {
		env = envFull + "=1 " + env
	}
	return fmt.Sprintf("cd e2e && %s go test -count=1 -v -timeout 60m -run 'TestEverySeedKeepsTheQueuesPromises$' ./robustness/", env)
}

// TestEverySeedKeepsTheQueuesPromises runs each seed: the stack with
// failpoints, the traffic, the seed's faults, then the checker, which must
// find no violation. At the end it prints the failpoints reached, and in
// the full run (make robustness) fails if one never was.
func TestEverySeedKeepsTheQueuesPromises(t *testing.T) {
	ctx := context.Background()
	bins, err := build(ctx, "failpoints", func(ctx context.Context, dir string) error { return buildFailpoints(ctx, dir) })
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds(t) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			batches := 8
			if full() {
				batches = 14
			}
			r := startRun(ctx, t, runOpts{seed: seed, plan: planFor(seed), batches: batches, bins: bins, failpoints: true,
				replay: replayCommand(seed)})
			t.Logf("robustness: seed %d (%s=%d replays it: %s); data and logs in %s", seed, envSeed, seed, r.opts.replay, r.dir)
			res := r.do(ctx)
			r.logReport(res)
			coverage.Lock()
			for _, o := range res.outcomes {
				if o.Fault.Kind == fault.Failpoint {
					coverage.armed[o.Fault.Point.Name]++
					if o.Reached {
						coverage.reached[o.Fault.Point.Name]++
					}
				}
			}
			coverage.Unlock()
			if res.err != nil {
				t.Errorf("seed %d: the run failed: %v\nreplay: %s", seed, res.err, r.opts.replay)
			}
			if full() && res.err == nil && r.traffic.Actions()["leases completed"] == 0 {
				t.Errorf("seed %d: the external inventory completed no lease through RecordingService (%s)", seed, r.traffic.ActionsLine())
			}
			if res.report != nil && len(res.report.Violations) > 0 {
				t.Errorf("seed %d: the checker found %d violations (above)\nreplay: %s", seed, len(res.report.Violations), r.opts.replay)
			}
		})
	}
	coverage.Lock()
	defer coverage.Unlock()
	var b strings.Builder
	b.WriteString("failpoint coverage (armed / reached, over the seeds run):\n")
	var never []string
	for _, p := range failpoint.All {
		fmt.Fprintf(&b, "  %-26s %-10s %d / %d   %s\n", p.Name, p.Service, coverage.armed[p.Name], coverage.reached[p.Name], p.Effect)
		if coverage.reached[p.Name] == 0 {
			never = append(never, p.Name)
		}
	}
	fmt.Fprintf(&b, "  %d of %d failpoints reached", len(failpoint.All)-len(never), len(failpoint.All))
	t.Log(b.String())
	if full() && len(never) > 0 {
		t.Errorf("failpoints never reached in the full run: %v", never)
	}
}

// merrittPoints are the failpoints a run storing into Merritt's storage
// service reaches: the version stored by the service and the job not yet
// in Recording, and the recorder's, reading the version there.
var merrittPoints = []string{"storingVersionStored", "processorManifestWritten", "recorderLeased", "recorderRowWritten"}

// merrittPlan is a seed's faults storing into Merritt's storage service:
// the failpoints between the storage call and its commit (each action in
// the full run; the seed picks one point in the short one), stale calls
// and restarts of the service, and kills.
func merrittPlan(seed uint64) fault.Plan {
	var pts []failpoint.Point
	for _, n := range merrittPoints {
		p, ok := failpoint.Named(n)
		if !ok {
			panic("no failpoint " + n)
		}
		pts = append(pts, p)
	}
	if full() {
		return fault.Plan{Points: pts, Kills: 2, Freeze: true, Leader: true, Merritt: true}
	}
	return fault.Plan{Points: pts[:1], Kills: 1, Merritt: true}
}

// TestASeedStoringThroughMerrittsStorageServiceKeepsTheQueuesPromises runs
// the stack storing into a node of Merritt's storage service (the
// stand-in answering as mrt-store does) under the seed's traffic and the
// faults of merrittPlan, then the checker, which holds the service's own
// record to one version per object, made by one call.
func TestASeedStoringThroughMerrittsStorageServiceKeepsTheQueuesPromises(t *testing.T) {
	ctx := context.Background()
	bins, err := build(ctx, "failpoints", func(ctx context.Context, dir string) error { return buildFailpoints(ctx, dir) })
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds(t) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			batches := 4
			if full() {
				batches = 8
			}
			replay := strings.Replace(replayCommand(seed), "TestEverySeedKeepsTheQueuesPromises", "TestASeedStoringThroughMerrittsStorageServiceKeepsTheQueuesPromises", 1)
			r := startRun(ctx, t, runOpts{seed: seed, plan: merrittPlan(seed), batches: batches, bins: bins, failpoints: true,
				merritt: true, replay: replay})
			t.Logf("robustness through Merritt's storage service: seed %d; data and logs in %s", seed, r.dir)
			res := r.do(ctx)
			r.logReport(res)
			if res.err != nil {
				t.Errorf("seed %d: the run failed: %v\nreplay: %s", seed, res.err, replay)
			}
			if res.report != nil && len(res.report.Violations) > 0 {
				t.Errorf("seed %d: the checker found %d violations (above)\nreplay: %s", seed, len(res.report.Violations), replay)
			}
			if res.report != nil && res.report.Figures["storage calls"] == 0 {
				t.Errorf("seed %d: no call reached the storage service", seed)
			}
		})
	}
}
