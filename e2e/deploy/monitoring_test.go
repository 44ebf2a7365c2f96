package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/e2e/names"
	"gopkg.in/yaml.v3"
)

// The alert rules' unit tests and the runbook, relative to the repository.
const (
	alertTestsFile = "deploy/monitoring/ingestq-alerts.test.yaml"
	dashboardFile  = "deploy/monitoring/grafana-dashboard.json"
	runbookFile    = "docs/runbook.md"
)

// promtool finds Debian's promtool (make deps installs the prometheus
// package); its absence fails the test rather than skipping it, so that CI
// cannot pass without the rules being tested.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: make deps installs Debian's prometheus package")
	}
	return p
}

// TestTheAlertRulesPassPromtoolAndTheirUnitTests runs `promtool check
// rules` on the rules and `promtool test rules` on their unit tests.
func TestTheAlertRulesPassPromtoolAndTheirUnitTests(t *testing.T) {
	repo := repoDir(t)
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", filepath.Join(repo, names.AlertRulesFile)},
		{"test", "rules", filepath.Join(repo, alertTestsFile)},
	} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
	}
}

// alertTests is the part of a promtool unit test file this test reads.
type alertTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string           `yaml:"eval_time"`
			AlertName string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestEveryAlertHasATestThatFiresItAndOneThatDoesNot: promtool passes a
// file that tests only some alerts, or only that they stay quiet.
func TestEveryAlertHasATestThatFiresItAndOneThatDoesNot(t *testing.T) {
	repo := repoDir(t)
	alerts, err := names.Alerts(repo)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(repo, alertTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	var tests alertTests
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatalf("%s: %v", alertTestsFile, err)
	}
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(names.AlertRulesFile)}) {
		t.Errorf("%s tests %v, want %s", alertTestsFile, tests.RuleFiles, filepath.Base(names.AlertRulesFile))
	}
	fires, quiet := map[string]int{}, map[string]int{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName]++
			} else {
				quiet[a.AlertName]++
			}
		}
	}
	for _, a := range alerts {
		if fires[a.Name] == 0 {
			t.Errorf("%s: no test expects %s to fire", alertTestsFile, a.Name)
		}
		if quiet[a.Name] == 0 {
			t.Errorf("%s: no test expects %s to stay quiet", alertTestsFile, a.Name)
		}
		delete(fires, a.Name)
		delete(quiet, a.Name)
	}
	for name := range fires {
		t.Errorf("%s tests %s, which is no alert", alertTestsFile, name)
	}
	for name := range quiet {
		t.Errorf("%s tests %s, which is no alert", alertTestsFile, name)
	}
}

// TestEveryAlertLinksItsOwnRunbookSection: each alert's runbook_url is
// docs/runbook.md#<its name>, a heading there, and the runbook has no
// section of an alert that does not exist.
func TestEveryAlertLinksItsOwnRunbookSection(t *testing.T) {
	repo := repoDir(t)
	alerts, err := names.Alerts(repo)
	if err != nil {
		t.Fatal(err)
	}
	anchors, err := names.Anchors(filepath.Join(repo, runbookFile))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for a := range anchors {
		if strings.HasPrefix(a, "ingestq") {
			sections[a] = true
		}
	}
	for _, a := range alerts {
		want := runbookFile + "#" + names.Anchor(a.Name)
		if got := a.Annotations["runbook_url"]; got != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Name, got, want)
		}
		if !anchors[names.Anchor(a.Name)] {
			t.Errorf("%s has no section %q", runbookFile, a.Name)
		}
		delete(sections, names.Anchor(a.Name))
	}
	for s := range sections {
		t.Errorf("%s has a section #%s, but no alert has that name", runbookFile, s)
	}
}

// metricName finds the series names an expression uses: ingestq's own and
// the runtime collectors'.
var metricName = regexp.MustCompile(`\b(?:ingestq|go|process)_[a-z0-9_]+\b`)

// TestEveryMetricTheAlertsAndTheDashboardUseIsExported: a metric renamed
// or dropped would leave an alert that never fires or an empty panel.
func TestEveryMetricTheAlertsAndTheDashboardUseIsExported(t *testing.T) {
	repo := repoDir(t)
	metrics, err := names.Metrics(repo)
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, m := range metrics {
		for _, s := range m.Series() {
			exported[s] = true
		}
	}
	alerts, err := names.Alerts(repo)
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string][]string{}
	for _, a := range alerts {
		exprs[names.AlertRulesFile] = append(exprs[names.AlertRulesFile], a.Expr)
		for _, v := range a.Annotations {
			exprs[names.AlertRulesFile] = append(exprs[names.AlertRulesFile], v)
		}
	}
	dash, err := dashboardExprs(filepath.Join(repo, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	exprs[dashboardFile] = dash
	for file, list := range exprs {
		var used []string
		for _, e := range list {
			used = append(used, metricName.FindAllString(e, -1)...)
		}
		if len(used) == 0 {
			t.Errorf("%s uses no metric", file)
		}
		slices.Sort(used)
		for _, name := range slices.Compact(used) {
			if !exported[name] && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
				t.Errorf("%s uses %s, which no ingestq process exports", file, name)
			}
		}
	}
}

// dashboardExprs returns the queries of every panel of the dashboard.
func dashboardExprs(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			return nil, fmt.Errorf("%s: panel %q has no query", file, p.Title)
		}
		for _, target := range p.Targets {
			out = append(out, target.Expr)
		}
	}
	return out, nil
}

func repoDir(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}
