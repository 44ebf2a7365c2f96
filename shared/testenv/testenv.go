// Package testenv keeps the settings of the machine that runs the tests out
// of them. A test proves what the code does with the settings the test
// gives it; the services it starts inherit the test binary's environment,
// and the AWS SDK and OpenTelemetry read theirs in the test binary itself,
// so a variable the machine happens to set (an OTLP endpoint, an AWS
// profile, an ingestq setting of a developer's own stack) would change
// what is tested, or fail it.
package testenv

import (
	"os"
	"strings"
	"testing"
)

// Main runs a package's tests isolated from the machine's settings:
// func TestMain(m *testing.M) { testenv.Main(m) }. A TestMain that does
// more calls Isolate first.
func Main(m *testing.M) {
	Isolate()
	os.Exit(m.Run())
}

// Isolate removes from the process's environment every variable that
// configures ingestq (INGESTQ_*, but for the tests' own: see testVariable)
// or the libraries it uses (OTEL_*, AWS_*), and points the AWS SDK away
// from the shared files in $HOME/.aws. Call it first in TestMain, before
// any test runs: what a test sets afterwards (t.Setenv, a child's Env) is
// what the code sees.
func Isolate() {
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if hostSetting(name) {
			os.Unsetenv(name)
		}
	}
	os.Setenv("AWS_CONFIG_FILE", os.DevNull)
	os.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
}

// hostSetting reports whether the variable name configures the code under
// test rather than the tests.
func hostSetting(name string) bool {
	switch {
	case strings.HasPrefix(name, "OTEL_"), strings.HasPrefix(name, "AWS_"):
		return true
	case strings.HasPrefix(name, "INGESTQ_"):
		return !testVariable(name)
	}
	return false
}

// testVariable reports whether name is one of the variables of the tests
// (docs/configuration.md), which no service reads.
func testVariable(name string) bool {
	switch name {
	case "INGESTQ_CHROMIUM", "INGESTQ_ARTIFACTS_DIR", "INGESTQ_VERSITYGW", "INGESTQ_KUSTOMIZE", "INGESTQ_SEARCH_JOBS":
		return true
	}
	for _, prefix := range []string{"INGESTQ_TEST_", "INGESTQ_CHAOS_", "INGESTQ_BENCH_"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// GitEnv is the environment for git run on a throw-away repository in
// repo: none of the machine's GIT_* variables, which a git hook running the
// tests sets (GIT_DIR, GIT_INDEX_FILE: git would commit the test's files
// into the repository being pushed), nor its system or global settings
// (signing, hooks, default branch).
func GitEnv(repo string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+repo)
}

// MkdirTemp makes a new folder for a TestMain, which has no t.TempDir, where
// t.TempDir would: under GOTMPDIR when set. A machine whose /tmp is
// mounted noexec sets GOTMPDIR to run tests at all; binaries a suite
// builds into TMPDIR could not run there.
func MkdirTemp(pattern string) (string, error) {
	return os.MkdirTemp(os.Getenv("GOTMPDIR"), pattern)
}
