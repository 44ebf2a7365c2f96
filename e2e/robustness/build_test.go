package robustness

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/e2e/robustness/failpoint"
	"github.com/ingestq/ingestq/e2e/stack"
)

// TestTheNormalBuildHasNoFailpoints: a failpoint is a comment until the
// robustness build turns it into code. The services as make build builds
// them link no gofail runtime (so GOFAIL_FAILPOINTS and GOFAIL_HTTP mean
// nothing to them) and hold none of the failpoints' names, which the
// robustness build's binaries do.
func TestTheNormalBuildHasNoFailpoints(t *testing.T) {
	ctx := context.Background()
	root := repoRoot()
	for _, s := range stack.Services {
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", ".")
		cmd.Dir = filepath.Join(root, "services", s)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps of %s: %v", s, err)
		}
		if strings.Contains(string(out), "go.etcd.io/gofail") {
			t.Errorf("the normal build of %s depends on the gofail runtime", s)
		}
	}
	normal := filepath.Join(t.TempDir(), "processor")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", normal, ".")
	cmd.Dir = filepath.Join(root, "services", "processor")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the processor: %v\n%s", err, out)
	}
	bins, err := build(ctx, "failpoints", func(ctx context.Context, dir string) error { return buildFailpoints(ctx, dir) })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		bin  string
		want bool
	}{{normal, false}, {filepath.Join(bins, "processor"), true}} {
		data, err := os.ReadFile(tc.bin)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(data, []byte("go.etcd.io/gofail/runtime")); got != tc.want {
			t.Errorf("%s: gofail runtime linked %t, want %t", tc.bin, got, tc.want)
		}
		for _, p := range failpoint.All {
			if p.Service != "processor" {
				continue
			}
			if got := bytes.Contains(data, []byte(p.Name)); got != tc.want {
				t.Errorf("%s: failpoint %s present %t, want %t", tc.bin, p.Name, got, tc.want)
			}
		}
	}
}

// TestTheCatalogueNamesEveryFailpointOfTheTree: failpoint.All, which the
// schedules and the coverage report go by, lists exactly the failpoints
// the robustness build compiles in, each in the service that has it.
func TestTheCatalogueNamesEveryFailpointOfTheTree(t *testing.T) {
	re := regexp.MustCompile(`// gofail: var ([A-Za-z0-9_]+) struct\{\}`)
	found := map[string]string{} // name → service (or "shared")
	for _, top := range []string{"services", "shared"} {
		filepath.WalkDir(filepath.Join(repoRoot(), top), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repoRoot(), p)
			parts := strings.Split(filepath.ToSlash(rel), "/")
			owner := parts[0]
			if owner == "services" {
				owner = parts[1]
			}
			for _, m := range re.FindAllSubmatch(data, -1) {
				found[string(m[1])] = owner
			}
			return nil
		})
	}
	var names []string
	for _, p := range failpoint.All {
		names = append(names, p.Name)
		owner, ok := found[p.Name]
		switch {
		case !ok:
			t.Errorf("failpoint %s is in the catalogue but not in the tree", p.Name)
		case owner != p.Service && owner != "shared":
			t.Errorf("failpoint %s is in %s, the catalogue says %s", p.Name, owner, p.Service)
		}
	}
	for name := range found {
		if !slices.Contains(names, name) {
			t.Errorf("failpoint %s is in the tree but not in the catalogue (failpoint.All)", name)
		}
	}
}
