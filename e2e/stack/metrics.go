package stack

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"
)

// Sample is one sample of a process's Prometheus metrics.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)`)
	labelPair  = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)
)

// ScrapeMetrics reads the Prometheus text served at addr (a process's
// Metrics address) and returns the samples of the metrics named.
func ScrapeMetrics(ctx context.Context, addr string, names ...string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", addr, err)
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil || !want[m[1]] {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("scraping %s: %q: %w", addr, sc.Text(), err)
		}
		s := Sample{Name: m[1], Labels: map[string]string{}, Value: v}
		for _, l := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.Labels[l[1]] = l[2]
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scraping %s: %w", addr, err)
	}
	return out, nil
}
