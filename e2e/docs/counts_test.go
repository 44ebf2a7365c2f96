package docs

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
)

// numberWords are the counts the prose writes out.
var numberWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
	"seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}

// countedThing is a count of the services or programs in prose: "the
// seven services", "six stage services", "eight images".
var countedThing = regexp.MustCompile(`(?i)\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\d+) (stage services|services|images|binaries|programs)\b`)

// TestTheCountsThePagesStateAreTheCodes: where the prose counts the whole
// (five or more: fewer name a few of them, "three services take the store
// settings"), the services are the stack's (stack.Services: the batcher and
// the stage services), the stage services those less the batcher, and the
// images, binaries or programs every program of services/ (stack.Binaries).
func TestTheCountsThePagesStateAreTheCodes(t *testing.T) {
	want := map[string]int{
		"services":       len(stack.Services),
		"stage services": len(stack.Services) - 1,
		"images":         len(stack.Binaries),
		"binaries":       len(stack.Binaries),
		"programs":       len(stack.Binaries),
	}
	for name, text := range markdownFiles(t) {
		for _, unit := range proseUnits(text) {
			for _, m := range countedThing.FindAllStringSubmatch(unit, -1) {
				n, ok := numberWords[strings.ToLower(m[1])]
				if !ok {
					n, _ = strconv.Atoi(m[1])
				}
				if thing := strings.ToLower(m[2]); n >= 5 && n != want[thing] {
					t.Errorf("%s: %q: there are %d %s (e2e/stack)", name, m[0], want[thing], thing)
				}
			}
		}
	}
}

// portRange is a range of the services' default ports in prose: 7401–7408.
var portRange = regexp.MustCompile(`\b(7|9)4(\d\d)\s*(?:–|-|to)\s*(?:7|9)4(\d\d)\b`)

// portsRow is a row of a table of the programs' default ports: the
// program, its gRPC and its metrics address.
var portsRow = regexp.MustCompile("(?m)^\\| ([a-z]+) \\| `?(127\\.0\\.0\\.1:\\d+)`? \\| `?(127\\.0\\.0\\.1:\\d+)`?")

// TestThePortsThePagesNameAreTheBinariesDefaults: every range of gRPC
// (74xx) or metrics (94xx) ports a page gives spans exactly the programs'
// default ports, and every row of a table of ports gives a program's own,
// each program once, as the binaries print them (-print-env-table).
func TestThePortsThePagesNameAreTheBinariesDefaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grpcPorts, metricsPorts := map[string]string{}, map[string]string{}
	for _, name := range stack.Binaries {
		out, err := exec.CommandContext(ctx, filepath.Join(builtServices(t), name), "-print-env-table").Output()
		if err != nil {
			t.Fatalf("%s -print-env-table: %v", name, err)
		}
		env, err := parseTable(string(out))
		if err != nil {
			t.Fatal(err)
		}
		grpcPorts[name], metricsPorts[name] = env["INGESTQ_LISTEN"], env["INGESTQ_METRICS_LISTEN"]
	}
	span := func(addrs map[string]string) (lo, hi int) {
		lo = 1 << 16
		for _, a := range addrs {
			_, p, _ := strings.Cut(a, ":")
			n, _ := strconv.Atoi(p)
			lo, hi = min(lo, n), max(hi, n)
		}
		return lo, hi
	}
	grpcLo, grpcHi := span(grpcPorts)
	metricsLo, metricsHi := span(metricsPorts)
	for name, text := range markdownFiles(t) {
		for _, m := range portRange.FindAllStringSubmatch(text, -1) {
			lo, _ := strconv.Atoi(m[1] + "4" + m[2])
			hi, _ := strconv.Atoi(m[1] + "4" + m[3])
			wantLo, wantHi := grpcLo, grpcHi
			if m[1] == "9" {
				wantLo, wantHi = metricsLo, metricsHi
			}
			if lo != wantLo || hi != wantHi {
				t.Errorf("%s: %q: the programs' default ports are %d–%d", name, m[0], wantLo, wantHi)
			}
		}
		rows := portsRow.FindAllStringSubmatch(text, -1)
		seen := map[string]bool{}
		for _, m := range rows {
			program, grpc, metrics := m[1], m[2], m[3]
			if _, ok := grpcPorts[program]; !ok {
				continue
			}
			seen[program] = true
			if grpc != grpcPorts[program] || metrics != metricsPorts[program] {
				t.Errorf("%s: %s's ports %s and %s; its binary listens on %s and %s", name, program, grpc, metrics, grpcPorts[program], metricsPorts[program])
			}
		}
		if len(seen) > 0 && len(seen) != len(stack.Binaries) {
			t.Errorf("%s: its table of ports lists %v, not every program of %v", name, slices.Sorted(maps.Keys(seen)), stack.Binaries)
		}
	}
}

// parseTable reads a -print-env-table: each variable's default.
func parseTable(table string) (map[string]string, error) {
	out := map[string]string{}
	for line := range strings.Lines(table) {
		cells := splitRow(line)
		if len(cells) < 3 || !strings.HasPrefix(cells[0], "`INGESTQ_") {
			continue
		}
		out[strings.Trim(cells[0], "`")] = strings.Trim(cells[2], "`")
	}
	return out, nil
}

// makeHelpLine is a line of the Makefile's help: the target it describes.
var makeHelpLine = regexp.MustCompile(`(?m)^\t@echo "make ([a-z][a-z0-9-]*) `)

// makeTableRow is a row of the developer guide's table of make targets.
var makeTableRow = regexp.MustCompile("(?m)^\\| `make ([a-z][a-z0-9-]*)[^`]*` \\|")

// TestTheMakeTargetsTableIsTheMakefilesHelp: docs/developer.md's table of
// make targets lists exactly the targets `make help` describes.
func TestTheMakeTargetsTableIsTheMakefilesHelp(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var help []string
	for _, m := range makeHelpLine.FindAllStringSubmatch(string(makefile), -1) {
		help = append(help, m[1])
	}
	doc := docFiles(t)["docs/developer.md"]
	var table []string
	for _, m := range makeTableRow.FindAllStringSubmatch(doc, -1) {
		table = append(table, m[1])
	}
	slices.Sort(help)
	slices.Sort(table)
	if len(help) == 0 || !slices.Equal(slices.Compact(help), slices.Compact(table)) {
		t.Errorf("docs/developer.md's make targets %v; make help describes %v", table, help)
	}
}

// e2eMention is an e2e package named in a code span.
var e2eMention = regexp.MustCompile("`e2e/([a-z0-9/]+?)/?`")

// TestTheDeveloperGuideNamesEveryE2EPackage: docs/developer.md names every
// package of e2e/ (its top folders, and cmd/demo), and no other.
func TestTheDeveloperGuideNamesEveryE2EPackage(t *testing.T) {
	var tree []string
	entries, err := os.ReadDir(filepath.Join(repo, "e2e"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if e.Name() == "cmd" {
			subs, _ := os.ReadDir(filepath.Join(repo, "e2e", "cmd"))
			for _, s := range subs {
				tree = append(tree, "cmd/"+s.Name())
			}
			continue
		}
		tree = append(tree, e.Name())
	}
	named := map[string]bool{}
	for _, m := range e2eMention.FindAllStringSubmatch(docFiles(t)["docs/developer.md"], -1) {
		top := m[1]
		if !strings.HasPrefix(top, "cmd/") {
			top, _, _ = strings.Cut(top, "/")
		}
		named[top] = true
	}
	for _, p := range tree {
		if !named[p] {
			t.Errorf("docs/developer.md does not name e2e/%s", p)
		}
	}
	for p := range named {
		if !slices.Contains(tree, p) {
			t.Errorf("docs/developer.md names e2e/%s, which is not a package of e2e/", p)
		}
	}
}

// testVariableRow is a row of docs/configuration.md's table of the tests'
// variables: one variable or several, a family with a trailing *.
var testVariableRow = regexp.MustCompile("(?m)^\\| (`[A-Z][A-Z0-9_]*\\*?`(?:, `[A-Z][A-Z0-9_]*\\*?`)*) \\|")

// notForPeople are variables test code reads that no person sets: the
// system's own, and those a test sets for the process it starts (a test
// binary run again as a helper).
var notForPeople = []string{"PATH", "GOTMPDIR", "NO_PROXY", "no_proxy",
	"FREEPORT_TEST_BASE", "INGESTQ_STAGE_REPLICA_ROOT", "INGESTQ_INVENTORY_OPEN_HELPER"}

// TestTheTestVariablesTableIsWhatTheTestsRead: docs/configuration.md's
// table of the tests' variables lists every variable test code reads
// (os.Getenv, os.LookupEnv, directly or through a helper given the name;
// test code: _test.go files, e2e/, and the packages of shared/ made for
// tests), and each of its rows is read by test code or the Makefile.
func TestTheTestVariablesTableIsWhatTheTestsRead(t *testing.T) {
	read, err := testCodeVariables(repo)
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	doc := docFiles(t)["docs/configuration.md"]
	_, section, ok := strings.Cut(doc, "## Variables of the tests")
	if !ok {
		t.Fatal("docs/configuration.md has no section Variables of the tests")
	}
	var listed []string
	for _, m := range testVariableRow.FindAllStringSubmatch(section, -1) {
		for _, v := range strings.Split(m[1], ", ") {
			listed = append(listed, strings.Trim(v, "`"))
		}
	}
	covered := func(v string) bool {
		for _, l := range listed {
			if l == v || strings.HasSuffix(l, "*") && strings.HasPrefix(v, strings.TrimSuffix(l, "*")) {
				return true
			}
		}
		return false
	}
	for _, v := range slices.Sorted(maps.Keys(read)) {
		if !slices.Contains(notForPeople, v) && !covered(v) {
			t.Errorf("docs/configuration.md's table of the tests' variables does not list %s (%s)", v, read[v])
		}
	}
	for _, l := range listed {
		prefix, family := strings.CutSuffix(l, "*")
		found := strings.Contains(string(makefile), "$("+l+")") || strings.Contains(string(makefile), l+" ?=")
		for v := range read {
			if v == l || family && strings.HasPrefix(v, prefix) {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/configuration.md lists %s, which neither test code nor the Makefile reads", l)
		}
	}
	for _, v := range notForPeople {
		if _, ok := read[v]; !ok {
			t.Errorf("%s is left out of the table as read by test code, which does not read it", v)
		}
	}
}

// testCodeVariables finds the variables test code reads, each with a file
// that reads it. A name is a string literal, a constant (of the package, or
// of another named pkg.Name), or the parameter of a helper that passes it
// on to os.Getenv, called with one of those.
func testCodeVariables(repo string) (map[string]string, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	var paths []string
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, path)
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || name == "bin" || name == "run" || strings.HasPrefix(name, ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !isTestCode(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Constants by name, and by package.Name.
	consts := map[string]string{}
	for i, f := range files {
		dir := filepath.Dir(paths[i])
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := literal(vs.Values[i]); ok {
							consts[dir+" "+name.Name] = s
							consts[f.Name.Name+"."+name.Name] = s
						}
					}
				}
			}
		}
	}
	resolve := func(dir string, e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			return literal(e)
		case *ast.Ident:
			s, ok := consts[dir+" "+e.Name]
			return s, ok
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				s, ok := consts[x.Name+"."+e.Sel.Name]
				return s, ok
			}
		}
		return "", false
	}
	isGetenv := func(call *ast.CallExpr) bool {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || len(call.Args) != 1 {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv")
	}
	out := map[string]string{}
	// Helpers: functions that pass a parameter (by position) to os.Getenv.
	helpers := map[string]int{}
	for i, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && fd.Body != nil {
				params := map[string]int{}
				pos := 0
				for _, field := range fd.Type.Params.List {
					for _, name := range field.Names {
						params[name.Name] = pos
						pos++
					}
				}
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok && isGetenv(call) {
						if id, ok := call.Args[0].(*ast.Ident); ok {
							if p, ok := params[id.Name]; ok {
								helpers[fd.Name.Name] = p
							}
						}
					}
					return true
				})
			}
			if call, ok := n.(*ast.CallExpr); ok && isGetenv(call) {
				if s, ok := resolve(filepath.Dir(paths[i]), call.Args[0]); ok {
					out[s] = paths[i]
				}
			}
			return true
		})
	}
	for i, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			id, ok := call.Fun.(*ast.Ident)
			if !ok {
				return true
			}
			if p, ok := helpers[id.Name]; ok && p < len(call.Args) {
				if s, ok := resolve(filepath.Dir(paths[i]), call.Args[p]); ok {
					out[s] = paths[i]
				}
			}
			return true
		})
	}
	return out, nil
}

// isTestCode says whether a Go file is test code: a _test.go file, a file
// of e2e/, or of a package of shared/ made for tests (zktest, testenv,
// queuetest, ...).
func isTestCode(rel string) bool {
	rel = filepath.ToSlash(rel)
	if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "e2e/") {
		return true
	}
	dir := filepath.Base(filepath.Dir(rel))
	return strings.HasPrefix(rel, "shared/") && (strings.HasSuffix(dir, "test") || strings.HasPrefix(dir, "test"))
}

func literal(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
