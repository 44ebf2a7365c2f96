package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
)

// RequestKind is one kind of ZooKeeper request a service sends.
type RequestKind struct{ Service, Op, Node string }

// requestLine matches a sample of ingestq_zookeeper_requests_total.
var requestLine = regexp.MustCompile(`^ingestq_zookeeper_requests_total\{([^}]*)\} (\S+)`)

var label = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// ServiceRequests scrapes every process of s for the requests it has sent
// to ZooKeeper, summed per service.
func ServiceRequests(ctx context.Context, s *stack.Stack) (map[RequestKind]float64, error) {
	out := map[RequestKind]float64{}
	for _, service := range stack.Services {
		for _, p := range s.Procs(service) {
			if err := scrapeRequests(ctx, service, p.Metrics, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func scrapeRequests(ctx context.Context, service, addr string, into map[RequestKind]float64) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scraping %s: %w", service, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := requestLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		k := RequestKind{Service: service}
		for _, l := range label.FindAllStringSubmatch(m[1], -1) {
			switch l[1] {
			case "op":
				k.Op = l[2]
			case "node":
				k.Node = l[2]
			}
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return fmt.Errorf("scraping %s: %q: %w", service, sc.Text(), err)
		}
		into[k] += v
	}
	return sc.Err()
}

// RequestProfile is where a run's requests went: per job, by service and
// kind, the largest first.
func RequestProfile(before, after map[RequestKind]float64, jobs int) string {
	type row struct {
		k RequestKind
		n float64
	}
	var rows []row
	perService := map[string]float64{}
	for k, n := range after {
		d := (n - before[k]) / float64(jobs)
		if d <= 0 || strings.HasPrefix(k.Op, "multi.") {
			continue
		}
		rows = append(rows, row{k, d})
		perService[k.Service] += d
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.n != b.n {
			if a.n > b.n {
				return -1
			}
			return 1
		}
		return strings.Compare(fmt.Sprint(a.k), fmt.Sprint(b.k))
	})
	var b strings.Builder
	for _, service := range stack.Services {
		fmt.Fprintf(&b, "  %-11s %5.1f requests/job\n", service, perService[service])
	}
	for _, r := range rows[:min(len(rows), 40)] {
		fmt.Fprintf(&b, "    %-11s %-8s %-28s %5.2f\n", r.k.Service, r.k.Op, r.k.Node, r.n)
	}
	return b.String()
}
