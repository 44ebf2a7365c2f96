package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheAdminTokenFileIsReadAsTheServicesReadIt: the demo reads
// INGESTQ_ADMIN_TOKEN_FILE as every service does (shared/config): the white
// space around the token dropped, and a file that holds nothing refused
// before any process starts, not by each service once it is started.
func TestTheAdminTokenFileIsReadAsTheServicesReadIt(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, token, _, err := callerSettings([]string{"INGESTQ_ADMIN_TOKEN_FILE=" + file("token", "  s3cret\n")})
	if err != nil || token != "s3cret" {
		t.Errorf("a token file holding %q: token %q, %v; want s3cret", "  s3cret\n", token, err)
	}
	_, token, _, err = callerSettings([]string{"INGESTQ_ADMIN_TOKEN_FILE=" + file("empty", "\n")})
	if err == nil || !strings.Contains(err.Error(), "INGESTQ_ADMIN_TOKEN_FILE") || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("an empty token file: token %q, error %v; want an error naming INGESTQ_ADMIN_TOKEN_FILE and saying it is empty", token, err)
	}
	if _, _, _, err = callerSettings([]string{"INGESTQ_ADMIN_TOKEN_FILE=" + filepath.Join(dir, "missing")}); err == nil {
		t.Error("a missing token file: no error")
	}
}

// TestTheConsoleIsAt8401UnlessTheCallerSaysOtherwise: make demo and make
// up put the console at its documented default address; a caller's
// INGESTQ_CONSOLE_LISTEN moves it, empty turns it off.
func TestTheConsoleIsAt8401UnlessTheCallerSaysOtherwise(t *testing.T) {
	for _, tt := range []struct {
		environ []string
		want    string
	}{
		{nil, "127.0.0.1:8401"},
		{[]string{"INGESTQ_CONSOLE_LISTEN=127.0.0.1:9999"}, "127.0.0.1:9999"},
		{[]string{"INGESTQ_CONSOLE_LISTEN="}, ""},
	} {
		opts, _, _, err := callerSettings(tt.environ)
		if got, set := opts.Env["INGESTQ_CONSOLE_LISTEN"]; err != nil || !set || got != tt.want {
			t.Errorf("callerSettings(%q): the console at %q (set %t), %v; want %q", tt.environ, got, set, err, tt.want)
		}
	}
}
