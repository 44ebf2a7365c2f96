package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/names"
	"github.com/ingestq/ingestq/e2e/stack"
)

// repo is the repository's top directory.
var repo = filepath.Join("..", "..")

// The generated block of docs/configuration.md lies between these lines.
const (
	tableStart = "<!-- config-table: output of `make config-table`; regenerate, do not edit by hand -->"
	tableEnd   = "<!-- end config-table -->"
)

// TestConfigurationDocIsTheServicesTable builds the services and checks that
// docs/configuration.md holds exactly what `make config-table` makes of their
// -print-env-table output: every program's rows, in the order of
// stack.Binaries, a variable kept the first time it appears.
func TestConfigurationDocIsTheServicesTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := builtServices(t)
	var want []string
	seen := map[string]bool{}
	for _, name := range stack.Binaries {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, name), "-print-env-table").Output()
		if err != nil {
			t.Fatalf("%s -print-env-table: %v", name, err)
		}
		for _, row := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// The header and separator rows are kept once, as any row: by
			// the whole row for them, by the variable for the others.
			key := row
			if !strings.HasPrefix(row, "| Variable ") && !strings.HasPrefix(row, "|---") {
				key, _, _ = strings.Cut(strings.TrimPrefix(row, "| "), " |")
			}
			if !seen[key] {
				seen[key] = true
				want = append(want, row)
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join(repo, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := bytes.Cut(doc, []byte(tableStart+"\n"))
	if !ok {
		t.Fatalf("docs/configuration.md has no line %s", tableStart)
	}
	block, _, ok := bytes.Cut(after, []byte(tableEnd))
	if !ok {
		t.Fatalf("docs/configuration.md has no line %s", tableEnd)
	}
	got := strings.Split(strings.TrimSpace(string(block)), "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("docs/configuration.md, row %d of the table:\n have %s\n want %s", i+1, g, w)
		}
	}
	if t.Failed() {
		t.Log("regenerate the table: make config-table, and paste its output between the markers")
	}
}

// mdLink is a Markdown link or image: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksLeadSomewhere checks every relative link of README.md,
// BENCHMARKS.md and docs/*.md: its file must exist and, when it names a
// heading (#anchor) of a Markdown file, that heading too.
func TestDocLinksLeadSomewhere(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repo, "README.md"), filepath.Join(repo, "BENCHMARKS.md"))
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repo, file)
		for _, m := range mdLink.FindAllStringSubmatch(names.WithoutCode(string(text)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s: link %s: %v", rel, target, err)
				continue
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			headings, err := names.Anchors(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !headings[anchor] {
				t.Errorf("%s: link %s: no heading with that anchor", rel, target)
			}
		}
	}
}
