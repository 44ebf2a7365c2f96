package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/service"
)

// TestTheWorkRootIsTheOneTheSettingsParsed: a relative INGESTQ_WORK_ROOT
// is made absolute when the settings are parsed, as for every stage, and
// the downloader works under that root, created if missing, with no rule
// of its own.
func TestTheWorkRootIsTheOneTheSettingsParsed(t *testing.T) {
	t.Chdir(t.TempDir())
	var s settings
	fs := flag.NewFlagSet("downloader", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := config.New(fs, func(name string) (string, bool) {
		if name == "INGESTQ_WORK_ROOT" {
			return "shared/../work", true
		}
		return "", false
	})
	s.register(r)
	if err := r.Parse(nil); err != nil {
		t.Fatal(err)
	}
	d, err := s.downloader(&service.Env{Config: &config.Common{Concurrency: 2}, Logger: slog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.Abs("work")
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkRoot.Dir() != want {
		t.Errorf("work root %q, want %q", d.WorkRoot.Dir(), want)
	}
	if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
		t.Errorf("work root not created: %v", err)
	}
}
