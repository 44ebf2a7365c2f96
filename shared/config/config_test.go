package config

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var testDefaults = Defaults{Listen: "127.0.0.1:7401", MetricsListen: "127.0.0.1:9401"}

// parse registers the common settings and parses args with env as the
// whole environment.
func parse(t *testing.T, env map[string]string, args ...string) (*Common, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := New(fs, func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	c := RegisterCommon(r, testDefaults)
	c.RegisterQueue(r)
	return c, r.Parse(args)
}

func TestBuiltInDefaultsApplyWithoutEnvOrFlags(t *testing.T) {
	c, err := parse(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Common{
		ZooKeeper: ZooKeeper{
			Servers:        []string{"127.0.0.1:2181"},
			SessionTimeout: 10 * time.Second,
		},
		Listen:           "127.0.0.1:7401",
		MetricsListen:    "127.0.0.1:9401",
		Concurrency:      4,
		ProgressInterval: 5 * time.Second,
		DrainTimeout:     30 * time.Second,
		LogLevel:         slog.LevelInfo,
	}
	if got := *c; !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
}

func TestEnvSetsDefaultsAndFlagsOverrideThem(t *testing.T) {
	env := map[string]string{
		"INGESTQ_ZK_SERVERS":         "127.0.0.1:2181, 127.0.0.2:2181",
		"INGESTQ_ZK_SESSION_TIMEOUT": "4s",
		"INGESTQ_CONCURRENCY":        "8",
		"INGESTQ_LOG_LEVEL":          "debug",
		"INGESTQ_METRICS_LISTEN":     "",
	}
	tests := []struct {
		name string
		args []string
		want func(*Common) bool
	}{
		{"env value used when no flag given", nil, func(c *Common) bool {
			return c.Concurrency == 8 && c.ZooKeeper.SessionTimeout == 4*time.Second && c.LogLevel == slog.LevelDebug
		}},
		{"comma list from env is split and trimmed", nil, func(c *Common) bool {
			return strings.Join(c.ZooKeeper.Servers, " ") == "127.0.0.1:2181 127.0.0.2:2181"
		}},
		{"empty env value disables metrics", nil, func(c *Common) bool { return c.MetricsListen == "" }},
		{"flag overrides env", []string{"-concurrency", "2", "-zk-session-timeout=1m"}, func(c *Common) bool {
			return c.Concurrency == 2 && c.ZooKeeper.SessionTimeout == time.Minute
		}},
		{"flag overrides built-in default", []string{"-listen", "127.0.0.1:0"}, func(c *Common) bool {
			return c.Listen == "127.0.0.1:0"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse(t, env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Errorf("got %+v", *c)
			}
		})
	}
}

func TestBadValuesAreRefusedNamingTheVariable(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr []string // substrings of the error
	}{
		{"bad duration in env", map[string]string{"INGESTQ_DRAIN_TIMEOUT": "ten"}, nil,
			[]string{"INGESTQ_DRAIN_TIMEOUT", `not a duration`, `"ten"`}},
		{"bad duration in flag", nil, []string{"-drain-timeout", "ten"},
			[]string{"-drain-timeout", "not a duration"}},
		{"negative duration", map[string]string{"INGESTQ_ZK_SESSION_TIMEOUT": "-1s"}, nil,
			[]string{"INGESTQ_ZK_SESSION_TIMEOUT", "must be positive"}},
		{"zero concurrency", map[string]string{"INGESTQ_CONCURRENCY": "0"}, nil,
			[]string{"INGESTQ_CONCURRENCY", "at least 1"}},
		{"server without port", map[string]string{"INGESTQ_ZK_SERVERS": "zk1"}, nil,
			[]string{"INGESTQ_ZK_SERVERS", `"zk1" is not host:port`}},
		{"relative root", map[string]string{"INGESTQ_ZK_ROOT": "ingestq"}, nil,
			[]string{"INGESTQ_ZK_ROOT", "start with /"}},
		{"unknown log level", map[string]string{"INGESTQ_LOG_LEVEL": "loud"}, nil,
			[]string{"INGESTQ_LOG_LEVEL", "want debug, info, warn or error"}},
		{"auth without password separator", map[string]string{"INGESTQ_ZK_AUTH": "secret"}, nil,
			[]string{"INGESTQ_ZK_AUTH", "user:password"}},
		{"key without certificate", map[string]string{"INGESTQ_TLS_KEY": "k.pem"}, nil,
			[]string{"INGESTQ_TLS_CERT and INGESTQ_TLS_KEY"}},
		{"advertised address without port", map[string]string{"INGESTQ_ADVERTISE_ADDR": "pod-1"}, nil,
			[]string{"INGESTQ_ADVERTISE_ADDR", `"pod-1" is not host:port`}},
		{"client CA without TLS", map[string]string{"INGESTQ_TLS_CLIENT_CA": "ca.pem"}, nil,
			[]string{"INGESTQ_TLS_CLIENT_CA needs"}},
		{"token and token file", map[string]string{"INGESTQ_ADMIN_TOKEN": "a", "INGESTQ_ADMIN_TOKEN_FILE": "f"}, nil,
			[]string{"both set"}},
		{"missing token file", map[string]string{"INGESTQ_ADMIN_TOKEN_FILE": filepath.Join(t.TempDir(), "absent")}, nil,
			[]string{"INGESTQ_ADMIN_TOKEN_FILE", "no such file"}},
		{"two bad variables both reported",
			map[string]string{"INGESTQ_CONCURRENCY": "many", "INGESTQ_DRAIN_TIMEOUT": "long"}, nil,
			[]string{"INGESTQ_CONCURRENCY", "INGESTQ_DRAIN_TIMEOUT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.env, tt.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestFlagOverridingABadEnvValueIsAccepted(t *testing.T) {
	c, err := parse(t, map[string]string{"INGESTQ_DRAIN_TIMEOUT": "ten"}, "-drain-timeout", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if c.DrainTimeout != 5*time.Second {
		t.Errorf("drain timeout %s, want 5s", c.DrainTimeout)
	}
}

func TestAdminTokenIsReadFromFileWithoutTrailingNewline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parse(t, map[string]string{"INGESTQ_ADMIN_TOKEN_FILE": path})
	if err != nil {
		t.Fatal(err)
	}
	if c.AdminToken != "s3cret" {
		t.Errorf("token %q, want s3cret", c.AdminToken)
	}
}

func TestServiceVariablesJoinTheTableWithBuiltInDefaults(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	// The environment's value must not leak into the table (it may be a secret).
	r := New(fs, func(name string) (string, bool) { return "from-env", name == "INGESTQ_WORK_ROOT" })
	RegisterCommon(r, testDefaults).RegisterQueue(r)
	workRoot := r.String("work-root", "INGESTQ_WORK_ROOT", "/var/lib/ingestq/work", "where downloads go | per job")
	if err := r.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if *workRoot != "from-env" {
		t.Errorf("work root %q, want the environment's value", *workRoot)
	}
	var b strings.Builder
	if err := r.WriteMarkdownTable(&b); err != nil {
		t.Fatal(err)
	}
	table := b.String()
	for _, want := range []string{
		"| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n",
		"| `INGESTQ_ZK_SERVERS` | `-zk-servers` | `127.0.0.1:2181` |",
		"| `INGESTQ_ZK_ROOT` | `-zk-root` | (empty) |",
		"| `INGESTQ_WORK_ROOT` | `-work-root` | `/var/lib/ingestq/work` | where downloads go \\| per job |\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, "\n"); n != len(r.Variables())+2 {
		t.Errorf("table has %d lines for %d variables", n, len(r.Variables()))
	}
}

func TestABooleanSettingTakesEnvThenFlagAndRefusesOtherWords(t *testing.T) {
	read := func(env map[string]string, args ...string) (bool, error) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		r := New(fs, func(name string) (string, bool) { v, ok := env[name]; return v, ok })
		on := r.Bool("storing", "INGESTQ_STORING", true, "store versions")
		err := r.Parse(args)
		return *on, err
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want bool
	}{
		{"default", nil, nil, true},
		{"env", map[string]string{"INGESTQ_STORING": "false"}, nil, false},
		{"flag over env", map[string]string{"INGESTQ_STORING": "false"}, []string{"-storing=true"}, true},
	} {
		if got, err := read(tc.env, tc.args...); err != nil || got != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := read(map[string]string{"INGESTQ_STORING": "off"}); err == nil ||
		!strings.Contains(err.Error(), "INGESTQ_STORING") || !strings.Contains(err.Error(), `"off"`) {
		t.Errorf("INGESTQ_STORING=off: %v, want a refusal naming the variable and the value", err)
	}
}

// TestAdvertiseAddrIsWhatOthersDial: the address given, else a listen
// address that names a host, else this host's name with the listen port.
func TestAdvertiseAddrIsWhatOthersDial(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"INGESTQ_ADVERTISE_ADDR": "10.1.2.3:7404", "INGESTQ_LISTEN": "0.0.0.0:7404"}, "10.1.2.3:7404"},
		{map[string]string{"INGESTQ_LISTEN": "127.0.0.1:7404"}, "127.0.0.1:7404"},
		{map[string]string{"INGESTQ_LISTEN": "0.0.0.0:7404"}, host + ":7404"},
		{map[string]string{"INGESTQ_LISTEN": ":7404"}, host + ":7404"},
	} {
		cfg, err := parse(t, c.env)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.AdvertiseAddr(); got != c.want {
			t.Errorf("%v: %q, want %q", c.env, got, c.want)
		}
	}
}

func TestTheWorkRootIsMadeAbsoluteOnceWhenParsed(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ env, want string }{
		{"", "/var/lib/ingestq/work"},
		{"/srv/ingestq/work/", "/srv/ingestq/work"},
		{"work/../scratch", filepath.Join(wd, "scratch")},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		r := New(fs, func(name string) (string, bool) {
			return tc.env, name == "INGESTQ_WORK_ROOT" && tc.env != ""
		})
		root := RegisterWorkRoot(r)
		if err := r.Parse(nil); err != nil || *root != tc.want {
			t.Errorf("INGESTQ_WORK_ROOT=%q: %q, %v; want %q", tc.env, *root, err, tc.want)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	r := New(fs, func(name string) (string, bool) { return "", name == "INGESTQ_WORK_ROOT" })
	RegisterWorkRoot(r)
	if err := r.Parse(nil); err == nil || !strings.Contains(err.Error(), "INGESTQ_WORK_ROOT") {
		t.Errorf("an empty work root: %v", err)
	}
}

func TestASecretFileIsReadWithoutItsSurroundingSpace(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSecretFile(p); got != "s3cret" || err != nil {
		t.Errorf("ReadSecretFile = %q, %v", got, err)
	}
	if _, err := ReadSecretFile(p + ".missing"); err == nil {
		t.Error("a missing file was read")
	}
}
