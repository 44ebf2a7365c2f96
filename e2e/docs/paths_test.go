package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// pathMention is a path in the repository written in a code span: it
	// begins with one of the repository's top folders.
	pathMention = regexp.MustCompile(`^(?:services|shared|e2e|tools|examples|deploy|scripts|proto)/[A-Za-z0-9_./-]*$`)
	// versionTag is a module's release tag (services/batcher/v1.4.0), a
	// name of git's, not a path.
	versionTag = regexp.MustCompile(`/v\d+\.\d+\.\d+$`)
	// testMention is a Go test's name in a code span.
	testMention = regexp.MustCompile(`^Test[A-Z][A-Za-z0-9_]*$`)
)

// TestTheDocsNameOnlyPathsAndTestsThatExist: every repository path a
// document writes in a code span exists, and every test it names is a
// test function of the repository, so that a file moved or a test renamed
// shows here.
func TestTheDocsNameOnlyPathsAndTestsThatExist(t *testing.T) {
	out, err := exec.Command("git", "-C", repo, "grep", "-h", "-o", "-E", `^func Test[A-Za-z0-9_]+\(`, "--", "*_test.go").Output()
	if err != nil {
		t.Skipf("the test names come from git grep, which needs the repository: %v", err)
	}
	tests := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		tests[strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(line), "func "), "(")] = true
	}
	for doc, text := range docFiles(t) {
		for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
			span := m[1]
			switch {
			case pathMention.MatchString(span) && !versionTag.MatchString(span):
				if _, err := os.Stat(filepath.Join(repo, strings.TrimSuffix(span, "/"))); err != nil {
					t.Errorf("%s names %s, which is not in the repository", doc, span)
				}
			case testMention.MatchString(span):
				if !tests[span] {
					t.Errorf("%s names the test %s, which no test file defines", doc, span)
				}
			}
		}
	}
}
