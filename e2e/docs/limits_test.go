package docs

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The limits that keep the documentation something a reader finishes.
const (
	// maxWords is what all the pages (README.md, BENCHMARKS.md, docs/*.md)
	// hold together.
	maxWords = 30000
	// maxPageWords is what one page holds.
	maxPageWords = 4000
	// maxReadmeWords is what README.md holds.
	maxReadmeWords = 1000
	// maxSentenceWords is the longest sentence of any Markdown file.
	maxSentenceWords = 50
	// firstScreen is how many lines of README.md a reader sees first.
	firstScreen = 30
)

// TestThePagesKeepToTheirLengths: all the pages together, each page and
// README.md stay within their word counts (words as wc -w counts them, code
// and tables included), and README.md's first screen shows the two
// commands a newcomer runs.
func TestThePagesKeepToTheirLengths(t *testing.T) {
	pages := docFiles(t)
	total := 0
	var counts []string
	for _, name := range sortedKeys(pages) {
		n := words(pages[name])
		total += n
		counts = append(counts, fmt.Sprintf("%s %d", name, n))
		if n > maxPageWords {
			t.Errorf("%s has %d words, more than the %d a page may have", name, n, maxPageWords)
		}
	}
	t.Logf("%d words in %d pages: %s", total, len(pages), strings.Join(counts, ", "))
	if total > maxWords {
		t.Errorf("the pages have %d words in all, more than %d", total, maxWords)
	}
	readme := pages["README.md"]
	if n := words(readme); n > maxReadmeWords {
		t.Errorf("README.md has %d words, more than %d", n, maxReadmeWords)
	}
	lines := strings.Split(readme, "\n")
	screen := strings.Join(lines[:min(firstScreen, len(lines))], "\n")
	for _, cmd := range []string{"make demo", "make test"} {
		if !strings.Contains(screen, cmd) {
			t.Errorf("README.md's first %d lines do not show %q", firstScreen, cmd)
		}
	}
}

// TestNoSentenceIsLongerThanFiftyWords reads every Markdown file's prose
// (paragraphs, list items, headings, table cells; code blocks left out, a
// code span as one word) sentence by sentence.
func TestNoSentenceIsLongerThanFiftyWords(t *testing.T) {
	for name, text := range markdownFiles(t) {
		for _, unit := range proseUnits(text) {
			for _, s := range sentences(unit) {
				if n := words(s); n > maxSentenceWords {
					t.Errorf("%s: a sentence of %d words: %s", name, n, s)
				}
			}
		}
	}
}

// historyPhrases tell how the product came to be rather than how it is:
// the documentation speaks of the product alone.
var historyPhrases = regexp.MustCompile(`(?i)\b(?:yet|now|nowadays|no longer|any ?more|previously|formerly|originally|recently|so far|to date|until it has one|used to be|track record|(?:before|after|without) (?:this|the|its) fix|was fixed|were fixed|found by|we (?:found|fixed|added|changed)|in (?:two|three|four|five|\d+) runs|(?:the|a) machine loaded|at the time|these days)\b`)

// TestNoPageTellsHistory: no Markdown file's prose holds a phrase of
// history. Code and its spans are left out (a log message may say "now").
func TestNoPageTellsHistory(t *testing.T) {
	for name, text := range markdownFiles(t) {
		for _, unit := range proseUnits(text) {
			for _, m := range historyPhrases.FindAllString(unit, -1) {
				t.Errorf("%s: %q tells history: %s", name, m, unit)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// internalWords are the words of ingestq's own the pages use in a sense a
// newcomer cannot guess; each has its entry in docs/glossary.md.
var internalWords = []string{"claim", "fenced", "spawn", "relist", "ceiling", "floor", "lease", "drain",
	"fsck", "hold", "requeue", "queue bound", "retention", "multi", "working storage", "update report"}

// TestTheGlossaryExplainsTheInternalWords: docs/glossary.md has an entry
// for every internal word the pages use.
func TestTheGlossaryExplainsTheInternalWords(t *testing.T) {
	pages := docFiles(t)
	entries := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([^|]+?) \|`).FindAllStringSubmatch(pages["docs/glossary.md"], -1) {
		for _, w := range strings.Split(m[1], ", ") {
			entries[strings.ToLower(w)] = true
		}
	}
	for _, w := range internalWords {
		used := false
		for name, text := range pages {
			if name != "docs/glossary.md" && regexp.MustCompile(`(?i)\b`+w).MatchString(text) {
				used = true
			}
		}
		if used && !entries[w] {
			t.Errorf("docs/glossary.md has no entry for %q, which the pages use", w)
		}
	}
}
