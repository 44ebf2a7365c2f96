package docs

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
)

// TestTheMerrittSettingsTableSaysWhoReadsEach: each row of
// docs/merritt.md's table of settings names exactly the programs whose
// binary reads the setting (-print-env-table).
func TestTheMerrittSettingsTableSaysWhoReadsEach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	readers := map[string][]string{}
	for _, name := range stack.Binaries {
		out, err := exec.CommandContext(ctx, filepath.Join(builtServices(t), name), "-print-env-table").Output()
		if err != nil {
			t.Fatalf("%s -print-env-table: %v", name, err)
		}
		env, _ := parseTable(string(out))
		for v := range env {
			readers[v] = append(readers[v], name)
		}
	}
	doc := docFiles(t)["docs/merritt.md"]
	_, table, ok := strings.Cut(doc, "| Setting | Read by |")
	if !ok {
		t.Fatal("docs/merritt.md has no table | Setting | Read by |")
	}
	rows := 0
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "|") {
			if rows > 0 {
				break
			}
			continue
		}
		cells := splitRow(line)
		if len(cells) < 2 || !strings.HasPrefix(cells[0], "`INGESTQ_") {
			continue
		}
		rows++
		setting, _, _ := strings.Cut(strings.Trim(cells[0], "`"), "=")
		var named []string
		for _, w := range strings.FieldsFunc(cells[1], func(r rune) bool { return r == ',' || r == ' ' }) {
			if slices.Contains(stack.Binaries, w) {
				named = append(named, w)
			}
		}
		slices.Sort(named)
		want := slices.Sorted(slices.Values(readers[setting]))
		if !slices.Equal(named, want) {
			t.Errorf("docs/merritt.md: %s is read by %v, not %v", setting, want, named)
		}
	}
	if rows == 0 {
		t.Error("docs/merritt.md's table of settings has no row")
	}
}

// backupFlag is a flag in the usage ingestq-backup prints.
var backupFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)

// TestEveryFlagOfTheBackupToolIsDocumented: docs/backup.md names every
// flag of ingestq-backup create and restore.
func TestEveryFlagOfTheBackupToolIsDocumented(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "ingestq-backup")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(repo, "tools", "ingestq-backup")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ingestq-backup: %v\n%s", err, out)
	}
	doc := docFiles(t)["docs/backup.md"]
	for _, command := range []string{"create", "restore"} {
		out, _ := exec.CommandContext(ctx, bin, command, "-h").CombinedOutput()
		flags := backupFlag.FindAllStringSubmatch(string(out), -1)
		if len(flags) == 0 {
			t.Fatalf("ingestq-backup %s -h lists no flag:\n%s", command, out)
		}
		for _, f := range flags {
			if !regexp.MustCompile(`(^|[\s(\x60])-` + regexp.QuoteMeta(f[1]) + `\b`).MatchString(doc) {
				t.Errorf("docs/backup.md does not name ingestq-backup %s's flag -%s", command, f[1])
			}
		}
	}
}
