package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// consoleClient keeps cookies and shows redirects instead of following them.
func consoleClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func browse(t *testing.T, c *http.Client, method, u string, form url.Values) (int, http.Header, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(data)
}

// TestBuiltBatcherServesTheConsole runs the built binary with and without
// an admin token and uses its console over HTTP as a browser would.
func TestBuiltBatcherServesTheConsole(t *testing.T) {
	bin := servicetest.Build(t, ".")
	t.Run("read-only without a token", func(t *testing.T) {
		console := servicetest.FreeAddr(t)
		p := servicetest.Start(t, bin, zktest.Root(t), "INGESTQ_CONSOLE_LISTEN="+console,
			"INGESTQ_PROFILES_DIR="+examplesProfiles(t), "INGESTQ_WORK_ROOT="+t.TempDir(), "INGESTQ_ADMIN_TOKEN=")
		base := "http://" + console
		c := consoleClient(t)
		code, _, body := browse(t, c, "GET", base+"/", nil)
		if code != http.StatusOK || !strings.Contains(body, "read-only") || strings.Contains(body, `action="/queue/pause"`) {
			t.Fatalf("GET /: %d\n%s", code, body)
		}
		code, _, body = browse(t, c, "POST", base+"/queue/pause", url.Values{})
		if code != http.StatusForbidden || !strings.Contains(body, "INGESTQ_ADMIN_TOKEN") {
			t.Fatalf("POST /queue/pause: %d\n%s", code, body)
		}
		out := p.Output()
		for _, want := range []string{`"msg":"serving the operator console"`, `"url":"http://` + console + `/"`, `"read_only":true`} {
			if !strings.Contains(out, want) {
				t.Errorf("the log lacks %s:\n%s", want, out)
			}
		}
	})
	t.Run("signed in with the token", func(t *testing.T) {
		const token = "console-binary-token"
		console := servicetest.FreeAddr(t)
		servicetest.Start(t, bin, zktest.Root(t), "INGESTQ_CONSOLE_LISTEN="+console,
			"INGESTQ_PROFILES_DIR="+examplesProfiles(t), "INGESTQ_WORK_ROOT="+t.TempDir(), "INGESTQ_ADMIN_TOKEN="+token)
		base := "http://" + console
		c := consoleClient(t)
		if code, h, _ := browse(t, c, "GET", base+"/", nil); code != http.StatusSeeOther || h.Get("Location") != "/signin?return=%2F" {
			t.Fatalf("signed out GET /: %d %q", code, h.Get("Location"))
		}
		if code, _, body := browse(t, c, "POST", base+"/signin", url.Values{"token": {token}}); code != http.StatusSeeOther {
			t.Fatalf("sign-in: %d\n%s", code, body)
		}
		code, _, body := browse(t, c, "GET", base+"/", nil)
		if code != http.StatusOK || !strings.Contains(body, `action="/queue/pause"`) {
			t.Fatalf("signed in GET /: %d\n%s", code, body)
		}
		csrf := body[strings.Index(body, `name="csrf" value="`)+len(`name="csrf" value="`):]
		csrf = csrf[:strings.Index(csrf, `"`)]
		if code, _, body := browse(t, c, "POST", base+"/queue/pause", url.Values{"csrf": {csrf}}); code != http.StatusSeeOther {
			t.Fatalf("pause: %d\n%s", code, body)
		}
		code, _, body = browse(t, c, "GET", base+"/api/queue", nil)
		var q struct {
			Paused bool `json:"paused"`
		}
		if err := json.Unmarshal([]byte(body), &q); code != http.StatusOK || err != nil || !q.Paused {
			t.Fatalf("GET /api/queue: %d %v\n%s", code, err, body)
		}
	})
}

// TestBuiltBatcherRefusesAConsoleItCannotServe: a console address that is
// taken or malformed stops the batcher with a message naming the setting.
func TestBuiltBatcherRefusesAConsoleItCannotServe(t *testing.T) {
	bin := servicetest.Build(t, ".")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := []struct {
		name, value string
		want        []string
	}{
		{"an address in use", taken.Addr().String(), []string{"INGESTQ_CONSOLE_LISTEN", "address already in use"}},
		{"not host:port", "8401", []string{"INGESTQ_CONSOLE_LISTEN", `\"8401\" is not host:port`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runToExit(t, bin, "INGESTQ_CONSOLE_LISTEN="+tt.value)
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
