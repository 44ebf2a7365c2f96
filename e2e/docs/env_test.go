package docs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ingestq/ingestq/e2e/stack"
	"github.com/ingestq/ingestq/shared/testenv"
)

// binDir holds the service binaries, built once for the package's tests.
var binDir string

func TestMain(m *testing.M) {
	testenv.Isolate()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := testenv.MkdirTemp("ingestq-docs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	binDir = filepath.Join(dir, "bin")
	if err := stack.Build(ctx, repo, binDir); err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		return 1
	}
	return m.Run()
}

// builtServices returns the folder of the built service binaries.
func builtServices(t *testing.T) string {
	t.Helper()
	if binDir == "" {
		t.Fatal("the services were not built")
	}
	return binDir
}
