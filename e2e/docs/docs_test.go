package docs

import (
	"bytes"
	"context"
	"fmt"
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

// TestEveryLinkAndAnchorResolves checks every relative link of every
// Markdown file of the repository: its file must exist and, when it names
// a heading (#anchor) of a Markdown file, that heading too.
func TestEveryLinkAndAnchorResolves(t *testing.T) {
	for rel, text := range markdownFiles(t) {
		file := filepath.Join(repo, rel)
		for _, m := range mdLink.FindAllStringSubmatch(names.WithoutCode(htmlComment.ReplaceAllString(text, "")), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			if err := resolves(dest, anchor); err != nil {
				t.Errorf("%s: link %s: %v", rel, target, err)
			}
		}
	}
}

// docReference is a page of the documentation named in code or
// configuration, with the heading it points at: docs/runbook.md#anchor.
var docReference = regexp.MustCompile(`\b(docs/[a-z0-9-]+\.md|BENCHMARKS\.md)(#[a-z0-9_-]+)?`)

// consoleDocReference is a page the console links to by its name alone
// (runbook.md#ingestqfixityfailure), under a base address of the docs.
var consoleDocReference = regexp.MustCompile(`\b([a-z0-9-]+\.md)(#[a-z0-9_-]+)?`)

// TestThePagesCodeAndConsoleNameExist: every page (and heading) that a
// file other than Markdown names (the alert rules' runbook links, the
// deployment files, comments and messages in the code) exists, and so
// does every page the console's code links to.
func TestThePagesCodeAndConsoleNameExist(t *testing.T) {
	out, err := exec.Command("git", "-C", repo, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("the files come from git ls-files, which needs the repository: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		rel := strings.TrimSpace(line)
		if rel == "" || strings.HasSuffix(rel, ".md") || strings.HasPrefix(rel, "e2e/docs/") || strings.Contains(rel, "/testdata/") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, rel))
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			continue // gone from the working tree, or not text
		}
		for _, m := range docReference.FindAllStringSubmatch(string(data), -1) {
			if err := resolves(filepath.Join(repo, m[1]), strings.TrimPrefix(m[2], "#")); err != nil {
				t.Errorf("%s names %s%s: %v", rel, m[1], m[2], err)
			}
		}
		if !strings.HasPrefix(rel, "services/console/") || strings.HasSuffix(rel, "_test.go") {
			continue
		}
		for _, m := range consoleDocReference.FindAllStringSubmatch(string(data), -1) {
			if err := resolves(filepath.Join(repo, "docs", m[1]), strings.TrimPrefix(m[2], "#")); err != nil {
				t.Errorf("the console (%s) links to %s%s: %v", rel, m[1], m[2], err)
			}
		}
	}
}

// resolves says whether a file exists and, for a Markdown file, whether it
// has a heading of the anchor given ("" for none).
func resolves(dest, anchor string) error {
	if _, err := os.Stat(dest); err != nil {
		return err
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return nil
	}
	headings, err := names.Anchors(dest)
	if err != nil {
		return err
	}
	if !headings[anchor] {
		return fmt.Errorf("no heading with the anchor %s", anchor)
	}
	return nil
}
