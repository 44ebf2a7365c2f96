package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ingestq/ingestq/e2e/stack"
)

// RequestKind is one kind of ZooKeeper request a service sends.
type RequestKind struct{ Service, Op, Node string }

// Scrape is what the services' metrics said at one moment.
type Scrape struct {
	Requests map[RequestKind]float64
	// StepSeconds and Steps are the time spent in job steps and their
	// number, by stage.
	StepSeconds, Steps map[string]float64
}

// ScrapeServices scrapes every process of s for the requests it has sent
// to ZooKeeper (summed per service) and its job steps.
func ScrapeServices(ctx context.Context, s *stack.Stack) (*Scrape, error) {
	out := &Scrape{Requests: map[RequestKind]float64{}, StepSeconds: map[string]float64{}, Steps: map[string]float64{}}
	for _, service := range stack.Services {
		for _, p := range s.Procs(service) {
			if err := scrape(ctx, service, p.Metrics, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func scrape(ctx context.Context, service, addr string, into *Scrape) error {
	samples, err := stack.ScrapeMetrics(ctx, addr, "ingestq_zookeeper_requests_total",
		"ingestq_step_duration_seconds_sum", "ingestq_step_duration_seconds_count")
	if err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	for _, s := range samples {
		switch s.Name {
		case "ingestq_zookeeper_requests_total":
			into.Requests[RequestKind{Service: service, Op: s.Labels["op"], Node: s.Labels["node"]}] += s.Value
		case "ingestq_step_duration_seconds_sum":
			into.StepSeconds[s.Labels["stage"]] += s.Value
		case "ingestq_step_duration_seconds_count":
			into.Steps[s.Labels["stage"]] += s.Value
		}
	}
	return nil
}

// Profile is where a run's time and requests went: each stage's mean step,
// then the requests per job, by service and kind, the largest first.
func Profile(before, after *Scrape, jobs int) string {
	var b strings.Builder
	b.WriteString("  mean step:")
	for _, stage := range []string{"pending", "estimating", "provisioning", "downloading", "processing", "storing", "recording", "notifying"} {
		if n := after.Steps[stage] - before.Steps[stage]; n > 0 {
			fmt.Fprintf(&b, " %s %.0f ms,", stage, 1000*(after.StepSeconds[stage]-before.StepSeconds[stage])/n)
		}
	}
	b.WriteString("\n")
	b.WriteString(requestProfile(before.Requests, after.Requests, jobs))
	return b.String()
}

func requestProfile(before, after map[RequestKind]float64, jobs int) string {
	type row struct {
		k RequestKind
		n float64
	}
	var rows, inner []row
	perService := map[string]float64{}
	ops := map[string]float64{} // operations inside requests, by kind
	for k, n := range after {
		d := (n - before[k]) / float64(jobs)
		if d <= 0 {
			continue
		}
		// "multi.set", "multiread.get": operations inside a request, not requests.
		if _, op, inside := strings.Cut(k.Op, "."); inside {
			if !strings.HasPrefix(op, "refused-") { // counted among the operations already
				ops[op] += d
			}
			inner = append(inner, row{k, d})
			continue
		}
		rows = append(rows, row{k, d})
		perService[k.Service] += d
	}
	byCount := func(a, b row) int {
		if a.n != b.n {
			if a.n > b.n {
				return -1
			}
			return 1
		}
		return strings.Compare(fmt.Sprint(a.k), fmt.Sprint(b.k))
	}
	slices.SortFunc(rows, byCount)
	slices.SortFunc(inner, byCount)
	var b strings.Builder
	b.WriteString("  operations per job inside multis and multiReads:")
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		fmt.Fprintf(&b, " %s %.1f,", op, ops[op])
	}
	b.WriteString("\n")
	for _, service := range stack.Services {
		fmt.Fprintf(&b, "  %-11s %5.1f requests/job\n", service, perService[service])
	}
	for _, r := range rows[:min(len(rows), 40)] {
		fmt.Fprintf(&b, "    %-11s %-9s %-28s %5.2f\n", r.k.Service, r.k.Op, r.k.Node, r.n)
	}
	b.WriteString("  operations per job inside multis and multiReads, by service and node:\n")
	for _, r := range inner[:min(len(inner), 200)] {
		fmt.Fprintf(&b, "    %-11s %-15s %-28s %5.2f\n", r.k.Service, r.k.Op, r.k.Node, r.n)
	}
	return b.String()
}
