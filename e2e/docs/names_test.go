package docs

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ingestq/ingestq/e2e/names"
	"github.com/ingestq/ingestq/e2e/stack"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// docFiles are the documents the tests read: README.md, BENCHMARKS.md and
// docs/*.md, relative to the repository.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repo, "README.md"), filepath.Join(repo, "BENCHMARKS.md"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repo, f)
		out[rel] = string(b)
	}
	return out
}

var (
	// metricMention is a Prometheus metric of ingestq's, or a family of
	// them written with a trailing *.
	metricMention = regexp.MustCompile(`\bingestq_[a-z0-9_]*[a-z0-9](?:_?\*)?`)
	// alertMention is an alert's name.
	alertMention = regexp.MustCompile(`\bIngestq[A-Z][A-Za-z]+\b`)
	// settingMention is an INGESTQ_ variable, or a family with a trailing *.
	settingMention = regexp.MustCompile(`\bINGESTQ_[A-Z0-9_]*[A-Z0-9](?:_?\*)?`)
	// settingLiteral is a string in the code that is one variable's name.
	settingLiteral = regexp.MustCompile(`^INGESTQ_[A-Z0-9_]*[A-Z0-9]$`)
	// rpcMention is a service or a method of the ingestq.v1 package, in
	// full or as Service/Method.
	rpcMention = regexp.MustCompile(`\bingestq\.v1\.[A-Z]\w*(?:/[A-Z]\w*)?|\b(?:BatchService|AdminService|StageService|RecordingService|PingService)/[A-Z]\w*`)
	// makeMention is a make command in code: make and its target.
	makeMention = regexp.MustCompile(`(?:^|[\s;&|(])make +([a-z][a-z0-9-]*)`)
	// inlineCode is a Markdown code span.
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
)

// codeOf is the code of a Markdown text: its fenced blocks and code spans.
func codeOf(text string) []string {
	var out []string
	var block strings.Builder
	in := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if in {
				out = append(out, block.String())
				block.Reset()
			}
			in = !in
			continue
		}
		if in {
			block.WriteString(line)
		}
	}
	for _, m := range inlineCode.FindAllStringSubmatch(names.WithoutCode(text), -1) {
		out = append(out, m[1])
	}
	return out
}

// known reports whether a mention names a member of set: the name itself,
// or, for a family written with a trailing *, a member that begins so.
func known(mention string, set map[string]bool) bool {
	if prefix, ok := strings.CutSuffix(mention, "*"); ok {
		for name := range set {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		}
		return false
	}
	return set[mention]
}

// TestTheDocsNameOnlyMetricsAlertsSettingsRPCsAndMakeTargetsThatExist reads
// every document for the metrics, alerts, INGESTQ_* settings, RPCs and
// make targets it names and checks each against what the repository
// defines: the metrics the code registers, the alert rules, the variables
// the built services read (-print-env-table), the code spells out (the
// tests' own, the old names of renamed settings) and docker-compose.yml
// takes from the shell, the protos' services and
// methods, the Makefile's targets.
func TestTheDocsNameOnlyMetricsAlertsSettingsRPCsAndMakeTargetsThatExist(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	metrics, err := names.Metrics(repo)
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]bool{}
	for _, m := range metrics {
		series[m.Name] = true
		for _, s := range m.Series() {
			series[s] = true
		}
	}
	alertList, err := names.Alerts(repo)
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, a := range alertList {
		alerts[a.Name] = true
	}
	settings, err := names.Settings(ctx, builtServices(t), stack.Binaries)
	if err != nil {
		t.Fatal(err)
	}
	literals, err := names.StringLiterals(repo, settingLiteral)
	if err != nil {
		t.Fatal(err)
	}
	for s := range literals {
		settings[s] = true
	}
	composed, err := names.ComposeVariables(repo)
	if err != nil {
		t.Fatal(err)
	}
	for s := range composed {
		settings[s] = true
	}
	rpcs := names.RPCs()
	targets, err := names.MakeTargets(repo)
	if err != nil {
		t.Fatal(err)
	}
	for file, text := range docFiles(t) {
		t.Run(file, func(t *testing.T) {
			for _, m := range uniq(metricMention.FindAllString(text, -1)) {
				if !known(m, series) {
					t.Errorf("names metric %s, which no service exports", m)
				}
			}
			for _, a := range uniq(alertMention.FindAllString(text, -1)) {
				if !alerts[a] {
					t.Errorf("names alert %s, which %s does not define", a, names.AlertRulesFile)
				}
			}
			for _, s := range uniq(settingMention.FindAllString(text, -1)) {
				if !known(s, settings) {
					t.Errorf("names setting %s, which no service reads and no code spells", s)
				}
			}
			for _, r := range uniq(rpcMention.FindAllString(text, -1)) {
				if !strings.HasPrefix(r, "ingestq.v1.") {
					r = "ingestq.v1." + r
				}
				if !rpcs[r] {
					t.Errorf("names %s, which the protos do not define", r)
				}
			}
			var made []string
			for _, code := range codeOf(text) {
				for line := range strings.Lines(code) {
					line, _, _ = strings.Cut(line, "#") // a shell comment is prose
					for _, m := range makeMention.FindAllStringSubmatch(line, -1) {
						made = append(made, m[1])
					}
				}
			}
			for _, target := range uniq(made) {
				if !targets[target] {
					t.Errorf("names make %s, which the Makefile does not define", target)
				}
			}
		})
	}
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// metricsTableRow is a row of docs/tracing.md's table of metrics: its name.
var metricsTableRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")

// TestTheMetricsTableListsEveryMetricTheServicesExport: every metric the
// code registers has its row in docs/tracing.md's table, and every row is
// a metric the code registers or, for the libraries' (gRPC's), one a
// running service serves.
func TestTheMetricsTableListsEveryMetricTheServicesExport(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "tracing.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]bool{}
	for _, m := range metricsTableRow.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = true
	}
	metrics, err := names.Metrics(repo)
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, m := range metrics {
		registered[m.Name] = true
		if !rows[m.Name] {
			t.Errorf("docs/tracing.md's metrics table has no row for %s (%s, %s)", m.Name, m.Instrument, m.Where)
		}
	}
	var others []string
	for name := range rows {
		if !registered[name] {
			others = append(others, name)
		}
	}
	if len(others) == 0 {
		return
	}
	served := servedMetrics(t)
	for _, name := range others {
		if !served[name] {
			t.Errorf("docs/tracing.md's metrics table lists %s, which the code does not register and no service serves", name)
		}
	}
}

// servedMetrics starts the stack, makes one gRPC call of every service,
// and returns the metric families every process serves.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := stack.Start(ctx, stack.Options{Dir: t.TempDir(), BinDir: builtServices(t), ProfilesDir: filepath.Join(repo, "examples", "profiles")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.WithoutCancel(ctx))
	out := map[string]bool{}
	for _, name := range stack.Services {
		p := s.Procs(name)[0]
		conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = v1.NewPingServiceClient(conn).Ping(ctx, &v1.PingRequest{Message: "docs"})
		conn.Close()
		if err != nil {
			t.Fatalf("%s Ping: %v", name, err)
		}
		families, err := scrapeFamilies(ctx, p.Metrics)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			out[f] = true
		}
	}
	return out
}

// scrapeFamilies returns the metric families (# TYPE lines) a /metrics
// serves.
func scrapeFamilies(ctx context.Context, addr string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			out = append(out, f[2])
		}
	}
	return out, sc.Err()
}
