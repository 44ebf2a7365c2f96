package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/e2e/names"
)

// markdownFiles are every Markdown file of the repository (git ls-files),
// relative to it: the pages and the READMEs beside the code and the tests.
func markdownFiles(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("git", "-C", repo, "ls-files", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Skipf("the Markdown files come from git ls-files, which needs the repository: %v", err)
	}
	files := map[string]string{}
	for line := range strings.Lines(string(out)) {
		rel := strings.TrimSpace(line)
		if rel == "" || strings.Contains(rel, "/testdata/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(repo, rel))
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		} else if err != nil {
			t.Fatal(err)
		}
		files[rel] = string(b)
	}
	return files
}

var (
	// htmlComment is a Markdown file's HTML comment, which a reader never sees.
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	// linkText is a Markdown link or image: its text stays, its target goes.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)\s]*\)`)
	// listItem begins an item of a list.
	listItem = regexp.MustCompile(`^\s*(?:[-*+]|\d+\.)\s+`)
	// sentenceEnd ends a sentence: a full stop, question or exclamation
	// mark before a space or the end.
	sentenceEnd = regexp.MustCompile(`[.!?]["')\]]*(?:\s+|$)`)
)

// proseUnits are the pieces of a Markdown text a reader reads as prose: each
// paragraph, list item, heading and table cell, without fenced code and
// comments; a code span reads as one word, a link as its text.
func proseUnits(text string) []string {
	text = htmlComment.ReplaceAllString(text, "")
	var units []string
	var para []string
	flush := func() {
		if len(para) > 0 {
			units = append(units, strings.Join(para, " "))
			para = nil
		}
	}
	for line := range strings.Lines(names.WithoutCode(text)) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			flush()
		case strings.HasPrefix(trimmed, "|"):
			flush()
			if strings.Trim(trimmed, "|-: ") == "" {
				continue // a table's separator row
			}
			units = append(units, splitRow(trimmed)...)
		case strings.HasPrefix(trimmed, "#"):
			flush()
			units = append(units, strings.TrimLeft(trimmed, "# "))
		case listItem.MatchString(line):
			flush()
			para = append(para, listItem.ReplaceAllString(line, ""))
		default:
			para = append(para, trimmed)
		}
	}
	flush()
	for i, u := range units {
		u = inlineCode.ReplaceAllString(u, "code")
		units[i] = linkText.ReplaceAllString(u, "$1")
	}
	return units
}

// splitRow splits a table row into its cells; `\|` is a bar within a cell.
func splitRow(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(strings.TrimSuffix(row, "|"), "|")
	var cells []string
	var cell strings.Builder
	inCode := false
	for i := 0; i < len(row); i++ {
		switch c := row[i]; {
		case c == '\\' && i+1 < len(row) && row[i+1] == '|':
			cell.WriteByte('|')
			i++
		case c == '`':
			inCode = !inCode
			cell.WriteByte(c)
		case c == '|' && !inCode:
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// sentences splits a unit of prose into its sentences.
func sentences(unit string) []string {
	var out []string
	start := 0
	for _, loc := range sentenceEnd.FindAllStringIndex(unit, -1) {
		out = append(out, strings.TrimSpace(unit[start:loc[1]]))
		start = loc[1]
	}
	if s := strings.TrimSpace(unit[start:]); s != "" {
		out = append(out, s)
	}
	return out
}

// words counts the words of a text as wc -w does: runs of non-space.
func words(text string) int { return len(strings.Fields(text)) }
