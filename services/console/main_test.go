package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestBinaryServesWithoutZooKeeperAndStopsOnSIGTERM: the console runs
// with no ZooKeeper at all (it reaches the queue through the batcher).
func TestBinaryServesWithoutZooKeeperAndStopsOnSIGTERM(t *testing.T) {
	// Not the console's default port, which another console may hold.
	t.Setenv("INGESTQ_CONSOLE_LISTEN", servicetest.FreeAddr(t))
	servicetest.CheckProgram(t, "console")
}

// TestBinaryRefusesUnusableSettingsSayingWhich: a console address that is
// taken or malformed, a key file too short, a batcher address that is no
// address stop the console at start with a message naming the setting.
func TestBinaryRefusesUnusableSettingsSayingWhich(t *testing.T) {
	bin := servicetest.Build(t, ".")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	shortKey := filepath.Join(t.TempDir(), "console-key")
	if err := os.WriteFile(shortKey, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"a console address in use", []string{"INGESTQ_CONSOLE_LISTEN=" + taken.Addr().String()},
			[]string{"INGESTQ_CONSOLE_LISTEN", "address already in use"}},
		{"a console address that is not host:port", []string{"INGESTQ_CONSOLE_LISTEN=8401"},
			[]string{"INGESTQ_CONSOLE_LISTEN", `\"8401\" is not host:port`}},
		{"a batcher address that is not host:port", []string{"INGESTQ_BATCHER_ADDR=batcher"},
			[]string{"INGESTQ_BATCHER_ADDR", `\"batcher\" is not host:port`}},
		{"a session key too short", []string{"INGESTQ_ADMIN_TOKEN=t", "INGESTQ_CONSOLE_KEY_FILE=" + shortKey},
			[]string{"INGESTQ_CONSOLE_KEY_FILE: " + shortKey + " holds 5 bytes: a session key needs at least 32"}},
		{"no stage timeout", []string{"INGESTQ_CONSOLE_STAGE_TIMEOUT=0s"},
			[]string{"INGESTQ_CONSOLE_STAGE_TIMEOUT 0s: want a positive duration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append(append(os.Environ(), "INGESTQ_LISTEN="+servicetest.FreeAddr(t), "INGESTQ_METRICS_LISTEN=",
				"INGESTQ_CONSOLE_LISTEN="+servicetest.FreeAddr(t)), tt.env...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1\n%s", err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
