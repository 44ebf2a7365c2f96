package names

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ingestq/ingestq/shared/telemetry"
)

var repo = filepath.Join("..", "..")

// TestTheMetricNamesAreThoseTheExporterServes registers every instrument
// found in the code, with its unit and kind, on a process's telemetry as
// shared/telemetry sets it up, records each once, and checks that the
// Prometheus names Metrics computed are the ones /metrics serves.
func TestTheMetricNamesAreThoseTheExporterServes(t *testing.T) {
	found, err := Metrics(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ingestq.jobs.handled", "ingestq.fixity.failures", "ingestq.queue.oldest_job_age"} {
		if !strings.Contains(instruments(found), " "+want+" ") {
			t.Errorf("Metrics found no instrument %s", want)
		}
	}
	ctx := context.Background()
	tel, err := telemetry.Setup(ctx, "names-test", "v0.0.0", telemetry.WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	meter := tel.MeterProvider.Meter("names-test")
	for _, m := range found {
		unit := metric.WithUnit(m.Unit)
		switch m.Kind {
		case Counter:
			c, err := meter.Int64Counter(m.Instrument+".probe", unit)
			if err != nil {
				t.Fatal(err)
			}
			c.Add(ctx, 1)
		case Gauge:
			g, err := meter.Int64Gauge(m.Instrument+".probe", unit)
			if err != nil {
				t.Fatal(err)
			}
			g.Record(ctx, 1)
		case Histogram:
			h, err := meter.Float64Histogram(m.Instrument+".probe", unit)
			if err != nil {
				t.Fatal(err)
			}
			h.Record(ctx, 1)
		}
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	served := map[string]bool{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if name, _, ok := strings.Cut(sc.Text(), " "); ok && !strings.HasPrefix(name, "#") {
			name, _, _ = strings.Cut(name, "{")
			served[name] = true
		}
	}
	for _, m := range found {
		// The probe's name is the instrument's with ".probe": its
		// Prometheus name has "_probe" where the instrument's name ends.
		for _, series := range m.Series() {
			probe := probeName(m, series)
			if !served[probe] {
				t.Errorf("%s (%s): computed series %s, but /metrics serves no %s", m.Instrument, m.Where, series, probe)
			}
		}
	}
}

// probeName puts "_probe" after the instrument's own name in a series name.
func probeName(m Metric, series string) string {
	base := strings.ReplaceAll(m.Instrument, ".", "_")
	return strings.Replace(series, base, base+"_probe", 1)
}

func instruments(ms []Metric) string {
	var b strings.Builder
	b.WriteString(" ")
	for _, m := range ms {
		b.WriteString(m.Instrument + " ")
	}
	return b.String()
}

func TestMakeTargetsAreTheMakefilesRules(t *testing.T) {
	targets, err := MakeTargets(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"test", "demo", "up", "lint", "bench", "deps"} {
		if !targets[want] {
			t.Errorf("MakeTargets has no %s: %v", want, targets)
		}
	}
	if targets["BIN"] || targets["SHELL"] {
		t.Errorf("a variable taken for a target: %v", targets)
	}
}

func TestRPCsAreTheProtosMethods(t *testing.T) {
	rpcs := RPCs()
	for _, want := range []string{"ingestq.v1.AdminService/GetQueue", "ingestq.v1.StageService/Drain", "ingestq.v1.RecordingService"} {
		if !rpcs[want] {
			t.Errorf("RPCs has no %s", want)
		}
	}
	if rpcs["ingestq.v1.AdminService/Backup"] {
		t.Error("RPCs has a method the protos do not define")
	}
}
