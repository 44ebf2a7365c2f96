package telemetry

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gopkg.in/yaml.v3"
)

// monitoringDir holds the alert rules and the dashboard shipped with the
// deploy files.
var monitoringDir = filepath.Join("..", "..", "deploy", "monitoring")

// metricName finds the series names an expression uses: ingestq's own and
// the runtime collectors'.
var metricName = regexp.MustCompile(`\b(?:ingestq|go|process)_[a-z0-9_]+\b`)

// exportedNames scrapes a process whose every instrument has recorded once
// and returns the series names it exports (a histogram's _bucket, _sum and
// _count).
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	tel, err := Setup(t.Context(), "ingestq-test", "v0.0.0", WithSpanExporter(tracetest.NewInMemoryExporter()))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, tel)
	m, ctx := tel.Metrics, t.Context()
	m.StartStep(ctx, "estimating").End(ctx, OutcomeFailed)
	m.StateChanged(ctx, "estimating", "failed", time.Second, time.Minute)
	m.Callback(ctx, "delivered")
	m.Mail(ctx, "report", "sent")
	m.Lease(ctx, "expired")
	for _, reg := range []func() error{
		func() error {
			_, err := m.ObserveQueue(func() *QueueFigures {
				return &QueueFigures{Jobs: map[string]int64{"pending": 1}, OldestAge: map[string]time.Duration{"pending": time.Second},
					Batches: map[string]int64{"processing": 1}, Workers: map[string]int64{"estimating": 1}}
			})
			return err
		},
		func() error { _, err := m.ObserveZooKeeperSession(func() bool { return true }); return err },
		func() error {
			_, err := m.ObserveZooKeeperRequests(func(observe func(op, node string, count int64)) { observe("get", "jobs/*/status", 1) })
			return err
		},
	} {
		if err := reg(); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]bool{}
	for name, family := range scrapeMetrics(t, tel) {
		names[name] = true
		if family.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

// monitoringExprs returns the PromQL of every alert rule (and of the
// queries in their annotations) and of every dashboard panel, by file.
func monitoringExprs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	rulesFile := filepath.Join(monitoringDir, "ingestq-alerts.yaml")
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out[rulesFile] = append(out[rulesFile], r.Expr)
			for _, a := range r.Annotations {
				out[rulesFile] = append(out[rulesFile], a)
			}
		}
	}
	dashFile := filepath.Join(monitoringDir, "grafana-dashboard.json")
	if data, err = os.ReadFile(dashFile); err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashFile, err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashFile, p.Title)
		}
		for _, target := range p.Targets {
			out[dashFile] = append(out[dashFile], target.Expr)
		}
	}
	return out
}

// TestEveryMetricTheAlertsAndTheDashboardUseIsExported: a metric renamed
// or dropped would leave an alert that never fires or an empty panel.
func TestEveryMetricTheAlertsAndTheDashboardUseIsExported(t *testing.T) {
	exported := exportedNames(t)
	for file, exprs := range monitoringExprs(t) {
		var used []string
		for _, e := range exprs {
			used = append(used, metricName.FindAllString(e, -1)...)
		}
		if len(used) == 0 {
			t.Errorf("%s uses no metric", file)
		}
		slices.Sort(used)
		for _, name := range slices.Compact(used) {
			if !exported[name] {
				t.Errorf("%s uses %s, which no ingestq process exports", file, name)
			}
		}
	}
}

// TestTheAlertRulesPassPromtool runs `promtool check rules` (Debian's
// prometheus package; make deps installs it) on the rule file.
func TestTheAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (make deps installs Debian's prometheus package)")
	}
	out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", filepath.Join(monitoringDir, "ingestq-alerts.yaml")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}
