// Package names finds what the repository really defines, from the code
// and the configuration rather than from a list kept by hand: the metrics
// the services register, the alerts of deploy/monitoring, the RPCs of the
// protos, the make targets, and the headings of a Markdown file. The
// documentation tests (e2e/docs) and the deployment tests (e2e/deploy)
// check the documents and the files against them.
package names

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/prometheus/otlptranslator"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"gopkg.in/yaml.v3"

	// The ingestq.v1 descriptors, registered in protoregistry.GlobalFiles.
	_ "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// Kind is the kind of an OpenTelemetry instrument, as its Prometheus
// metric shows it.
type Kind int

const (
	Counter Kind = iota
	Gauge
	Histogram
)

// Metric is one instrument a service registers.
type Metric struct {
	// Instrument is its OpenTelemetry name (ingestq.fixity.failures).
	Instrument string
	Unit       string
	Kind       Kind
	// Name is its Prometheus name as shared/telemetry exports it
	// (ingestq_fixity_failures_total).
	Name string
	// Where is the file and line that creates it.
	Where string
}

// Series are the Prometheus series names the metric exports: a
// histogram's _bucket, _sum and _count, otherwise its name.
func (m Metric) Series() []string {
	if m.Kind == Histogram {
		return []string{m.Name + "_bucket", m.Name + "_sum", m.Name + "_count"}
	}
	return []string{m.Name}
}

// instrumentKinds maps the metric.Meter methods that create an instrument
// to the kind of metric it becomes.
var instrumentKinds = map[string]Kind{
	"Int64Counter": Counter, "Float64Counter": Counter,
	"Int64ObservableCounter": Counter, "Float64ObservableCounter": Counter,
	"Int64UpDownCounter": Gauge, "Float64UpDownCounter": Gauge,
	"Int64ObservableUpDownCounter": Gauge, "Float64ObservableUpDownCounter": Gauge,
	"Int64Gauge": Gauge, "Float64Gauge": Gauge,
	"Int64ObservableGauge": Gauge, "Float64ObservableGauge": Gauge,
	"Int64Histogram": Histogram, "Float64Histogram": Histogram,
}

// Metrics reads every Go file of shared/ and services/ under repo (tests
// left out) and returns the instruments whose name is a string literal
// starting with "ingestq.", with the Prometheus name each gets: the
// translation shared/telemetry's exporter makes (UnderscoreEscapingWithSuffixes).
func Metrics(repo string) ([]Metric, error) {
	var out []Metric
	fset := token.NewFileSet()
	for _, dir := range []string{"shared", "services"} {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			var inspectErr error
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				kind, ok := instrumentKinds[sel.Sel.Name]
				if !ok {
					return true
				}
				name, ok := stringLiteral(call.Args[0])
				if !ok || !strings.HasPrefix(name, "ingestq.") {
					return true
				}
				m := Metric{Instrument: name, Kind: kind, Where: fset.Position(call.Pos()).String()}
				for _, opt := range call.Args[1:] {
					if c, ok := opt.(*ast.CallExpr); ok && len(c.Args) == 1 {
						if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "WithUnit" {
							m.Unit, _ = stringLiteral(c.Args[0])
						}
					}
				}
				if m.Name, err = prometheusName(m); err != nil {
					inspectErr = fmt.Errorf("%s: %w", m.Where, err)
				}
				out = append(out, m)
				return true
			})
			return inspectErr
		})
		if err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("names: no instrument found under %s", repo)
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func stringLiteral(e ast.Expr) (string, bool) {
	if e == nil {
		return "", false
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// prometheusName is the name the exporter gives an instrument.
func prometheusName(m Metric) (string, error) {
	types := map[Kind]otlptranslator.MetricType{
		Counter:   otlptranslator.MetricTypeMonotonicCounter,
		Gauge:     otlptranslator.MetricTypeGauge,
		Histogram: otlptranslator.MetricTypeHistogram,
	}
	namer := otlptranslator.NewMetricNamer("", otlptranslator.UnderscoreEscapingWithSuffixes)
	return namer.Build(otlptranslator.Metric{Name: m.Instrument, Unit: m.Unit, Type: types[m.Kind]})
}

// Alert is one alert rule of deploy/monitoring/ingestq-alerts.yaml.
type Alert struct {
	Name        string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// AlertRulesFile is the alert rules' file, relative to the repository.
const AlertRulesFile = "deploy/monitoring/ingestq-alerts.yaml"

// Alerts reads the alert rules of the repository.
func Alerts(repo string) ([]Alert, error) {
	data, err := os.ReadFile(filepath.Join(repo, AlertRulesFile))
	if err != nil {
		return nil, err
	}
	var rules struct {
		Groups []struct {
			Rules []Alert `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		return nil, fmt.Errorf("%s: %w", AlertRulesFile, err)
	}
	var out []Alert
	for _, g := range rules.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no alert rule", AlertRulesFile)
	}
	return out, nil
}

// RPCs returns every method of the ingestq.v1 services, as
// "ingestq.v1.AdminService/GetQueue", and the services themselves
// ("ingestq.v1.AdminService").
func RPCs() map[string]bool {
	out := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("ingestq.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			out[string(sd.FullName())] = true
			for j := range sd.Methods().Len() {
				out[string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name())] = true
			}
		}
		return true
	})
	return out
}

// makeRule is a rule's target line of a Makefile: "name: prerequisites".
var makeRule = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*)\s*:([^=]|$)`)

// MakeTargets returns the targets the repository's Makefile defines.
func MakeTargets(repo string) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range makeRule.FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = true
	}
	if len(out) == 0 {
		return nil, errors.New("names: no target found in the Makefile")
	}
	return out, nil
}

// WithoutCode blanks a Markdown text's fenced code blocks.
func WithoutCode(s string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Anchors lists the anchors GitHub gives a Markdown file's headings: lower
// case, punctuation dropped but for - and _, spaces as -, repeats numbered.
func Anchors(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	count := map[string]int{}
	for line := range strings.Lines(WithoutCode(string(text))) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "#") {
			continue
		}
		a := Anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))
		if n := count[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		count[a]++
	}
	return out, nil
}

// Anchor is the anchor GitHub gives a heading's title.
func Anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && unicode.IsLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// envTableRow is a row of a binary's -print-env-table: its variable.
var envTableRow = regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|")

// Settings returns the variables every service binary in binDir reads,
// from its -print-env-table (binaries built by stack.Build): the
// configuration registry of each.
func Settings(ctx context.Context, binDir string, services []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, name := range services {
		table, err := exec.CommandContext(ctx, filepath.Join(binDir, name), "-print-env-table").Output()
		if err != nil {
			return nil, fmt.Errorf("%s -print-env-table: %w", name, err)
		}
		for _, m := range envTableRow.FindAllStringSubmatch(string(table), -1) {
			out[m[1]] = true
		}
	}
	if len(out) == 0 {
		return nil, errors.New("names: no setting found")
	}
	return out, nil
}

// StringLiterals returns the string literals of the Go files under repo
// (tests included: the tests' own variables are read there) that match
// pattern in whole: the names the code spells out, such as the
// environment variables of the tests and the old names of renamed
// settings.
func StringLiterals(repo string, pattern *regexp.Regexp) (map[string]bool, error) {
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "run", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if s, ok := stringLiteral(asExpr(n)); ok && pattern.MatchString(s) {
				out[s] = true
			}
			return true
		})
		return nil
	})
	return out, err
}

func asExpr(n ast.Node) ast.Expr {
	if e, ok := n.(ast.Expr); ok {
		return e
	}
	return nil
}

// composeVariable is a variable docker-compose.yml takes from the shell or
// .env: ${NAME}, ${NAME:-default}.
var composeVariable = regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*)`)

// ComposeVariables returns the variables docker-compose.yml takes from the
// shell or .env.
func ComposeVariables(repo string) (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(repo, "docker-compose.yml"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range composeVariable.FindAllStringSubmatch(string(data), -1) {
		out[m[1]] = true
	}
	return out, nil
}
