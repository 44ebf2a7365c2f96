package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// TestBuiltConsoleServesTheQueueThroughTheBuiltBatcher runs the two built
// binaries, the console given the batcher's address, with and without an
// admin token, and uses the console over HTTP as a browser would: what it
// shows and does goes through the batcher's API.
func TestBuiltConsoleServesTheQueueThroughTheBuiltBatcher(t *testing.T) {
	batcherBin := servicetest.Build(t, filepath.Join("..", "..", "services", "batcher"))
	consoleBin := servicetest.Build(t, filepath.Join("..", "..", "services", "console"))
	start := func(t *testing.T, token string) (base string, log func() string) {
		b := servicetest.Start(t, batcherBin, zktest.Root(t), "INGESTQ_PROFILES_DIR="+servicetest.ExampleProfiles(t),
			"INGESTQ_WORK_ROOT="+t.TempDir(), "INGESTQ_ADMIN_TOKEN="+token)
		console := servicetest.FreeAddr(t)
		c := servicetest.Start(t, consoleBin, "", "INGESTQ_BATCHER_ADDR="+b.Addr, "INGESTQ_CONSOLE_LISTEN="+console,
			"INGESTQ_ADMIN_TOKEN="+token)
		return "http://" + console, c.Output
	}
	t.Run("read-only without a token", func(t *testing.T) {
		base, log := start(t, "")
		f := &fixture{t: t, client: newClient(t)}
		a := f.do(request(t, "GET", base+"/", nil))
		if a.code != http.StatusOK || !strings.Contains(a.body, "read-only") || strings.Contains(a.body, `action="/queue/pause"`) {
			t.Fatalf("GET /: %d\n%s", a.code, a.body)
		}
		a = f.do(request(t, "POST", base+"/queue/pause", url.Values{}))
		if a.code != http.StatusForbidden || !strings.Contains(a.body, "INGESTQ_ADMIN_TOKEN") {
			t.Fatalf("POST /queue/pause: %d\n%s", a.code, a.body)
		}
		for _, want := range []string{`"msg":"serving the operator console"`, `"url":"` + base + `/"`, `"read_only":true`} {
			if !strings.Contains(log(), want) {
				t.Errorf("the log lacks %s:\n%s", want, log())
			}
		}
	})
	t.Run("signed in with the token", func(t *testing.T) {
		const token = "console-binary-token"
		base, _ := start(t, token)
		f := &fixture{t: t, client: newClient(t)}
		if a := f.do(request(t, "GET", base+"/", nil)); a.code != http.StatusSeeOther || a.header.Get("Location") != "/signin?return=%2F" {
			t.Fatalf("signed out GET /: %d %q", a.code, a.header.Get("Location"))
		}
		if a := f.do(request(t, "POST", base+"/signin", url.Values{"token": {token}})); a.code != http.StatusSeeOther {
			t.Fatalf("sign-in: %d\n%s", a.code, a.body)
		}
		a := f.do(request(t, "GET", base+"/", nil))
		m := csrfField.FindStringSubmatch(a.body)
		if a.code != http.StatusOK || m == nil || !strings.Contains(a.body, `action="/queue/pause"`) {
			t.Fatalf("signed in GET /: %d\n%s", a.code, a.body)
		}
		if a := f.do(request(t, "POST", base+"/queue/pause", url.Values{"csrf": {m[1]}})); a.code != http.StatusSeeOther {
			t.Fatalf("pause: %d\n%s", a.code, a.body)
		}
		a = f.do(request(t, "GET", base+"/api/queue", nil))
		var q struct {
			Paused bool `json:"paused"`
		}
		if err := json.Unmarshal([]byte(a.body), &q); a.code != http.StatusOK || err != nil || !q.Paused {
			t.Fatalf("GET /api/queue: %d %v\n%s", a.code, err, a.body)
		}
	})
}

// request is a browser's request, with form as its urlencoded body.
func request(t *testing.T, method, u string, form url.Values) *http.Request {
	t.Helper()
	var body string
	if form != nil {
		body = form.Encode()
	}
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req
}
