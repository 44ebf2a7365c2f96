package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestIsolateRemovesTheMachinesSettingsAndKeepsTheTests(t *testing.T) {
	removed := []string{"INGESTQ_ADMIN_TOKEN", "INGESTQ_PROVISION_MAX_USAGE", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "AWS_PROFILE", "AWS_ACCESS_KEY_ID"}
	kept := []string{"INGESTQ_TEST_ZK", "INGESTQ_CHAOS_JOBS", "INGESTQ_BENCH_RUNS", "INGESTQ_CHROMIUM", "INGESTQ_ARTIFACTS_DIR", "INGESTQ_VERSITYGW",
		"INGESTQ_KUSTOMIZE", "INGESTQ_SEARCH_JOBS", "ZOOKEEPER_CLASSPATH", "PATH", "HOME"}
	for _, name := range append(removed, kept...) {
		t.Setenv(name, "set by the machine")
	}
	t.Setenv("AWS_CONFIG_FILE", "/home/someone/.aws/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/home/someone/.aws/credentials")
	Isolate()
	for _, name := range removed {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("%s=%q left in the environment", name, v)
		}
	}
	for _, name := range kept {
		if v := os.Getenv(name); v != "set by the machine" {
			t.Errorf("%s=%q, want it kept", name, v)
		}
	}
	for _, name := range []string{"AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		if v := os.Getenv(name); v != os.DevNull {
			t.Errorf("%s=%q, want %s: the AWS SDK reads no file of the machine's", name, v, os.DevNull)
		}
	}
}

func TestGitEnvLeavesOutTheMachinesGitSettings(t *testing.T) {
	t.Setenv("GIT_DIR", "/home/someone/project/.git")
	t.Setenv("GIT_INDEX_FILE", "/home/someone/project/.git/index")
	t.Setenv("XDG_CONFIG_HOME", "/home/someone/.config")
	t.Setenv("PATH", "/usr/bin")
	env := GitEnv("/tmp/repo")
	for _, kv := range env {
		if strings.HasPrefix(kv, "GIT_DIR=") || strings.HasPrefix(kv, "GIT_INDEX_FILE=") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			t.Errorf("%s kept", kv)
		}
	}
	for _, want := range []string{"PATH=/usr/bin", "HOME=/tmp/repo", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull} {
		if !slices.Contains(env, want) {
			t.Errorf("%s missing from %q", want, env)
		}
	}
}

func TestMkdirTempFollowsGOTMPDIRAsTTempDirDoes(t *testing.T) {
	goTmp := t.TempDir()
	t.Setenv("GOTMPDIR", goTmp)
	t.Setenv("TMPDIR", t.TempDir())
	dir, err := MkdirTemp("suite-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if filepath.Dir(dir) != goTmp {
		t.Errorf("MkdirTemp made %s, want it in GOTMPDIR %s", dir, goTmp)
	}
}
