package telemetry

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/freeport"
	"github.com/ingestq/ingestq/shared/waittest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMetricsEndpointServesRecordedInstrumentsUnderDocumentedNames(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)

	m := tel.Metrics
	ctx := t.Context()
	m.StartStep(ctx, "estimating").End(ctx, EndAdvanced)
	m.StartStep(ctx, "estimating").End(ctx, EndAdvanced)
	m.StartStep(ctx, "estimating").End(ctx, EndRetried)
	m.StartStep(ctx, "downloading").End(ctx, EndFenced)
	m.StartStep(ctx, "downloading") // still running at scrape time
	if _, err := m.ObserveQueue(func() *QueueFigures {
		return &QueueFigures{Jobs: map[string]int64{"pending": 7, "estimating": 2},
			OldestAge: map[string]time.Duration{"pending": 90 * time.Second},
			Batches:   map[string]int64{"processing": 3}, Workers: map[string]int64{"estimating": 2, "notify": 0}}
	}); err != nil {
		t.Fatalf("ObserveQueue: %v", err)
	}
	m.StateChanged(ctx, "", "pending", -1, -1) // a job created
	m.StateChanged(ctx, "estimating", "provisioning", 2*time.Second, -1)
	m.StateChanged(ctx, "downloading", "failed", time.Second, time.Minute)
	m.StateChanged(ctx, "notify", "completed", time.Second, time.Hour)
	m.Callback(ctx, "delivered")
	m.Mail(ctx, "report", "sent")
	m.Lease(ctx, "expired")
	m.BytesMoved(ctx, "downloading", 1000)
	m.BytesMoved(ctx, "downloading", 24)
	m.BytesMoved(ctx, "storing", 7)
	m.Resume(ctx, "downloading", "resumed")
	m.Resume(ctx, "downloading", "resumed")
	m.Resume(ctx, "downloading", "restarted")
	if _, err := m.ObserveZooKeeperSession(func() bool { return true }); err != nil {
		t.Fatalf("ObserveZooKeeperSession: %v", err)
	}
	if _, err := m.ObserveZooKeeperRequests(func(observe func(op, node string, count int64)) {
		observe("get", "jobs/*/status", 12)
		observe("multi.create", "jobs/*/lock", 3)
	}); err != nil {
		t.Fatalf("ObserveZooKeeperRequests: %v", err)
	}

	families := scrapeMetrics(t, tel)

	tests := []struct {
		family string
		kind   dto.MetricType
		labels map[string]string
		want   float64 // counter or gauge value, or histogram sample count
	}{
		{"ingestq_jobs_handled_total", dto.MetricType_COUNTER, map[string]string{"stage": "estimating", "outcome": "advanced"}, 2},
		{"ingestq_jobs_handled_total", dto.MetricType_COUNTER, map[string]string{"stage": "estimating", "outcome": "retried"}, 1},
		{"ingestq_jobs_handled_total", dto.MetricType_COUNTER, map[string]string{"stage": "downloading", "outcome": "fenced"}, 1},
		{"ingestq_step_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"stage": "estimating", "outcome": "advanced"}, 2},
		{"ingestq_jobs_in_flight", dto.MetricType_GAUGE, map[string]string{"stage": "estimating"}, 0},
		{"ingestq_jobs_in_flight", dto.MetricType_GAUGE, map[string]string{"stage": "downloading"}, 1},
		{"ingestq_queue_jobs", dto.MetricType_GAUGE, map[string]string{"state": "pending"}, 7},
		{"ingestq_queue_jobs", dto.MetricType_GAUGE, map[string]string{"state": "estimating"}, 2},
		{"ingestq_zookeeper_session_connected", dto.MetricType_GAUGE, nil, 1},
		{"ingestq_zookeeper_requests_total", dto.MetricType_COUNTER, map[string]string{"op": "get", "node": "jobs/*/status"}, 12},
		{"ingestq_zookeeper_requests_total", dto.MetricType_COUNTER, map[string]string{"op": "multi.create", "node": "jobs/*/lock"}, 3},
		{"ingestq_queue_oldest_job_age_seconds", dto.MetricType_GAUGE, map[string]string{"state": "pending"}, 90},
		{"ingestq_queue_batches", dto.MetricType_GAUGE, map[string]string{"state": "processing"}, 3},
		{"ingestq_workers", dto.MetricType_GAUGE, map[string]string{"stage": "notify"}, 0},
		{"ingestq_job_state_duration_seconds", dto.MetricType_HISTOGRAM, map[string]string{"state": "estimating"}, 1},
		{"ingestq_job_latency_seconds", dto.MetricType_HISTOGRAM, map[string]string{"state": "completed"}, 1},
		{"ingestq_job_latency_seconds", dto.MetricType_HISTOGRAM, map[string]string{"state": "failed"}, 1},
		{"ingestq_job_failures_total", dto.MetricType_COUNTER, map[string]string{"stage": "downloading"}, 1},
		{"ingestq_callbacks_total", dto.MetricType_COUNTER, map[string]string{"outcome": "delivered"}, 1},
		{"ingestq_mails_total", dto.MetricType_COUNTER, map[string]string{"kind": "report", "outcome": "sent"}, 1},
		{"ingestq_leases_total", dto.MetricType_COUNTER, map[string]string{"outcome": "expired"}, 1},
		{"ingestq_download_bytes_total", dto.MetricType_COUNTER, map[string]string{"stage": "downloading"}, 1024},
		{"ingestq_download_bytes_total", dto.MetricType_COUNTER, map[string]string{"stage": "storing"}, 7},
		{"ingestq_download_resumes_total", dto.MetricType_COUNTER, map[string]string{"stage": "downloading", "outcome": "resumed"}, 2},
		{"ingestq_download_resumes_total", dto.MetricType_COUNTER, map[string]string{"stage": "downloading", "outcome": "restarted"}, 1},
	}
	// No series carries the instrumentation scope, nor a label without a value.
	for name, family := range families {
		for _, sample := range family.GetMetric() {
			for _, l := range sample.GetLabel() {
				if strings.HasPrefix(l.GetName(), "otel_scope_") || l.GetValue() == "" {
					t.Errorf("%s has label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s%v", tt.family, tt.labels), func(t *testing.T) {
			family, ok := families[tt.family]
			if !ok {
				t.Fatalf("no family %s in /metrics", tt.family)
			}
			if family.GetType() != tt.kind {
				t.Errorf("type = %v, want %v", family.GetType(), tt.kind)
			}
			sample := findSample(family, tt.labels)
			if sample == nil {
				t.Fatalf("no %s sample with labels %v", tt.family, tt.labels)
			}
			if got := sampleValue(sample); got != tt.want {
				t.Errorf("value = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestZooKeeperGaugeIsZeroWhileDisconnected(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)
	if _, err := tel.Metrics.ObserveZooKeeperSession(func() bool { return false }); err != nil {
		t.Fatalf("ObserveZooKeeperSession: %v", err)
	}

	family := scrapeMetrics(t, tel)["ingestq_zookeeper_session_connected"]
	if sample := findSample(family, nil); sample == nil || sampleValue(sample) != 0 {
		t.Errorf("ingestq_zookeeper_session_connected = %v, want one sample of 0", family)
	}
}

func TestQueueGaugesAreEmptyUntilFiguresAreReadButScrapeWorks(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)
	if _, err := tel.Metrics.ObserveQueue(func() *QueueFigures { return nil }); err != nil {
		t.Fatalf("ObserveQueue: %v", err)
	}
	tel.Metrics.StartStep(t.Context(), "notifying").End(t.Context(), EndAdvanced)

	families := scrapeMetrics(t, tel)
	if _, ok := families["ingestq_jobs_handled_total"]; !ok {
		t.Error("queue figures not read yet hid ingestq_jobs_handled_total")
	}
	if family, ok := families["ingestq_queue_jobs"]; ok && len(family.GetMetric()) > 0 {
		t.Errorf("ingestq_queue_jobs has samples %v although no figures were read", family.GetMetric())
	}
}

func TestServeMetricsWithEmptyAddressIsDisabled(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)
	// The context never ends: only being disabled lets it return.
	if err := tel.ServeMetrics(context.Background(), ""); err != nil {
		t.Errorf("ServeMetrics(\"\") = %v, want nil", err)
	}
}

func TestServeMetricsReportsAnAddressItCannotListenOn(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer taken.Close()
	if err := tel.ServeMetrics(t.Context(), taken.Addr().String()); err == nil {
		t.Error("ServeMetrics on a taken address returned nil")
	}
}

func TestServeMetricsServesUntilContextEnds(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)
	// ServeMetrics takes an address: a port freeport holds for this test.
	reserved := freeport.Reserve()
	defer reserved.Close()
	ports, err := reserved.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := ports[0].String()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- tel.ServeMetrics(ctx, addr) }()

	waittest.Until(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return fmt.Errorf("ServeMetrics never answered on %s: %w", addr, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %s", resp.Status)
		}
		return nil
	})

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeMetrics after its context ended = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeMetrics did not return after its context ended")
	}
}

// scrapeMetrics serves tel's metrics on a loopback port, GETs /metrics as
// Prometheus would and parses the text format.
func scrapeMetrics(t *testing.T, tel *Telemetry) map[string]*dto.MetricFamily {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- tel.serveMetrics(ctx, listener) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serveMetrics: %v", err)
		}
	}()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+listener.Addr().String()+"/metrics", nil)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// findSample returns the metric of family whose labels include labels, or
// the only metric when labels is empty.
func findSample(family *dto.MetricFamily, labels map[string]string) *dto.Metric {
	for _, metric := range family.GetMetric() {
		matched := 0
		for _, pair := range metric.GetLabel() {
			if want, ok := labels[pair.GetName()]; ok && want == pair.GetValue() {
				matched++
			}
		}
		if matched == len(labels) {
			return metric
		}
	}
	return nil
}

func sampleValue(metric *dto.Metric) float64 {
	switch {
	case metric.GetCounter() != nil:
		return metric.GetCounter().GetValue()
	case metric.GetGauge() != nil:
		return metric.GetGauge().GetValue()
	case metric.GetHistogram() != nil:
		return float64(metric.GetHistogram().GetSampleCount())
	}
	return 0
}

func TestProfilesAreServedOnlyWhenAskedFor(t *testing.T) {
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	defer shutdown(t, tel)
	cases := []struct {
		name string
		opts []ServeOption
		want int
	}{
		{"by default", nil, http.StatusNotFound},
		{"WithPprof", []ServeOption{WithPprof()}, http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			listener, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			served := make(chan error, 1)
			go func() { served <- tel.serveMetrics(ctx, listener, tc.opts...) }()
			defer func() {
				cancel()
				<-served
			}()
			resp, err := http.Get("http://" + listener.Addr().String() + "/debug/pprof/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("GET /debug/pprof/cmdline: %s, want %d", resp.Status, tc.want)
			}
		})
	}
}
