package console

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/services/console/web"
	"github.com/ingestq/ingestq/shared/zktest"
)

// replay is a browser that holds only a copy of a sign-in cookie and of
// that sign-in's CSRF token, as someone who copied them would.
type replay struct {
	f      *fixture
	cookie string
	csrf   string
}

func (r replay) do(t *testing.T, method, path string, form url.Values) int {
	t.Helper()
	var req *http.Request
	var err error
	if form != nil {
		form.Set("csrf", r.csrf)
		req, err = http.NewRequest(method, r.f.srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req, err = http.NewRequest(method, r.f.srv.URL+path, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: signInCookie, Value: r.cookie})
	resp, err := newClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// grants reports what the copy is still good for: a page, the JSON
// endpoint, an action.
func (r replay) grants(t *testing.T) []string {
	t.Helper()
	var out []string
	if code := r.do(t, http.MethodGet, "/", nil); code == http.StatusOK {
		out = append(out, "GET / "+http.StatusText(code))
	}
	if code := r.do(t, http.MethodGet, "/api/queue", nil); code == http.StatusOK {
		out = append(out, "GET /api/queue "+http.StatusText(code))
	}
	if code := r.do(t, http.MethodPost, "/queue/unpause", url.Values{}); code != http.StatusUnauthorized {
		out = append(out, "POST /queue/unpause "+http.StatusText(code))
	}
	return out
}

// copySignIn signs f's browser in and copies its sign-in cookie and CSRF
// token.
func copySignIn(t *testing.T, f *fixture) replay {
	t.Helper()
	f.signIn()
	u, _ := url.Parse(f.srv.URL)
	for _, ck := range f.client.Jar.Cookies(u) {
		if ck.Name == signInCookie {
			return replay{f: f, cookie: ck.Value, csrf: f.csrf()}
		}
	}
	t.Fatal("no sign-in cookie after sign-in")
	return replay{}
}

// TestACookieCopiedBeforeSignOutGrantsNothingAfterwards signs in over
// HTTP, copies the sign-in cookie, signs out, and replays the copy: it is
// refused, by this console and by another one of the same queue, with a
// batcher of its own (sharing the sign-in key, as replicas with one key
// would), and signing out on the other console ends it here too: the
// sign-out is recorded in ZooKeeper, not in one process.
func TestACookieCopiedBeforeSignOutGrantsNothingAfterwards(t *testing.T) {
	root := zktest.Root(t)
	key := []byte(strings.Repeat("k", web.MinSignInKeyBytes))
	a := newFixtureKeyed(t, testToken, root, key)
	b := newFixtureKeyed(t, testToken, root, key)

	t.Run("signed out where it signed in", func(t *testing.T) {
		copied := copySignIn(t, a)
		onB := replay{f: b, cookie: copied.cookie, csrf: copied.csrf}
		if got := copied.grants(t); len(got) != 3 {
			t.Fatalf("before sign-out the copy grants only %v: this test would prove nothing", got)
		}
		if got := onB.grants(t); len(got) != 3 {
			t.Fatalf("before sign-out the copy grants only %v on the other batcher", got)
		}
		if got := a.act("/signout", nil); got.code != http.StatusSeeOther || !strings.Contains(got.header.Get("Set-Cookie"), "Max-Age=0") {
			t.Fatalf("sign-out: %d %q", got.code, got.header.Get("Set-Cookie"))
		}
		if got := copied.grants(t); len(got) != 0 {
			t.Errorf("after sign-out the copied cookie still grants %v", got)
		}
		if got := onB.grants(t); len(got) != 0 {
			t.Errorf("after sign-out the copied cookie still grants %v on the other batcher", got)
		}
	})
	t.Run("signed out on the other batcher", func(t *testing.T) {
		copied := copySignIn(t, a)
		if code := (replay{f: b, cookie: copied.cookie, csrf: copied.csrf}).do(t, http.MethodPost, "/signout", url.Values{}); code != http.StatusSeeOther {
			t.Fatalf("sign-out on the other batcher: %d", code)
		}
		if got := copied.grants(t); len(got) != 0 {
			t.Errorf("after sign-out on the other batcher the cookie still grants %v here", got)
		}
	})
}

// TestASharedSignInKeyCarriesASignInAcrossReplicasAndRestarts signs in on
// one console and shows the cookie to another of the same queue: with the
// same key (INGESTQ_CONSOLE_KEY_FILE) the other accepts it, as does a
// console started afresh with that key; with keys of their own (no file)
// each accepts only its own sign-ins, as before.
func TestASharedSignInKeyCarriesASignInAcrossReplicasAndRestarts(t *testing.T) {
	root := zktest.Root(t)
	keyFile := filepath.Join(t.TempDir(), "console-key")
	if err := os.WriteFile(keyFile, []byte("  "+strings.Repeat("s", 48)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := web.ReadSignInKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	a := newFixtureKeyed(t, testToken, root, key)
	b := newFixtureKeyed(t, testToken, root, key)
	copied := copySignIn(t, a)
	if got := (replay{f: b, cookie: copied.cookie, csrf: copied.csrf}).grants(t); len(got) != 3 {
		t.Errorf("a replica with the same key grants %v of the sign-in, want all 3", got)
	}
	a.srv.Close()
	restarted := newFixtureKeyed(t, testToken, root, key)
	if got := (replay{f: restarted, cookie: copied.cookie, csrf: copied.csrf}).grants(t); len(got) != 3 {
		t.Errorf("a console restarted with the same key grants %v of the sign-in, want all 3", got)
	}

	own := newFixtureAt(t, testToken, root)
	other := newFixtureAt(t, testToken, root)
	mine := copySignIn(t, own)
	if got := mine.grants(t); len(got) != 3 {
		t.Fatalf("a console with a key of its own grants %v of its own sign-in", got)
	}
	if got := (replay{f: other, cookie: mine.cookie, csrf: mine.csrf}).grants(t); len(got) != 0 {
		t.Errorf("without a shared key another console grants %v of the sign-in, want nothing", got)
	}
}
