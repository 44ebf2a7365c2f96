package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Build compiles the binaries of the repository at repo (Binaries) into bin.
func Build(ctx context.Context, repo, bin string) error {
	return BuildPrograms(ctx, repo, bin, Binaries)
}

// BuildPrograms compiles the named programs of services/ into bin.
func BuildPrograms(ctx context.Context, repo, bin string, names []string) error {
	for _, name := range names {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, name), ".")
		cmd.Dir = filepath.Join(repo, "services", name)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("stack: building %s: %w\n%s", name, err, out)
		}
	}
	return nil
}
