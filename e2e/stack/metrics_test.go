package stack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestScrapeMetricsReturnsTheSamplesOfTheNamedMetrics(t *testing.T) {
	const text = `# HELP ingestq_jobs_handled_total Job steps finished.
# TYPE ingestq_jobs_handled_total counter
ingestq_jobs_handled_total{outcome="fenced",stage="downloading"} 2
ingestq_jobs_handled_total{outcome="advanced",stage="downloading"} 40
ingestq_zookeeper_requests_total{node="jobs/*/status",op="get"} 7.5
target_info{service_name="downloader"} 1
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, text)
	}))
	defer srv.Close()
	got, err := ScrapeMetrics(context.Background(), strings.TrimPrefix(srv.URL, "http://"), "ingestq_jobs_handled_total", "ingestq_zookeeper_requests_total")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ingestq_jobs_handled_total outcome=fenced stage=downloading 2",
		"ingestq_jobs_handled_total outcome=advanced stage=downloading 40",
		"ingestq_zookeeper_requests_total node=jobs/*/status op=get 7.5",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d samples %+v, want %d", len(got), got, len(want))
	}
	for i, s := range got {
		line := fmt.Sprintf("%s outcome=%s stage=%s %g", s.Name, s.Labels["outcome"], s.Labels["stage"], s.Value)
		if s.Name == "ingestq_zookeeper_requests_total" {
			line = fmt.Sprintf("%s node=%s op=%s %g", s.Name, s.Labels["node"], s.Labels["op"], s.Value)
		}
		if line != want[i] {
			t.Errorf("sample %d = %q, want %q", i, line, want[i])
		}
	}
}
