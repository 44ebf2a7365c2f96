package fetch_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
)

// countingServer is a loopback HTTP server that counts the requests it got.
type countingServer struct {
	*httptest.Server
	hits atomic.Int64
}

// serve starts a server on ip (a loopback address) running h.
func serve(t *testing.T, ip string, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") }

func port(s *countingServer) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// local allows p to reach the tests' servers, which listen on loopback.
func local(p fetch.Policy) fetch.Policy {
	p.Allow = append(p.Allow, fetch.LoopbackRanges()...)
	return p
}

func mustDeny(t *testing.T, list string) []netip.Prefix {
	t.Helper()
	d, err := fetch.ParseDeny(list)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSchemesOutsideThePolicyAreRefused(t *testing.T) {
	c := fetch.New(local(fetch.Policy{}))
	for _, raw := range []string{"ftp://127.0.0.1/a.txt", "file:///etc/passwd", "gopher://127.0.0.1:70/", "javascript:alert(1)", "127.0.0.1/a"} {
		t.Run(raw, func(t *testing.T) {
			_, err := c.Get(t.Context(), raw)
			if !errors.Is(err, fetch.ErrScheme) {
				t.Fatalf("Get error = %v, want ErrScheme", err)
			}
			if !strings.Contains(err.Error(), raw) || !strings.Contains(err.Error(), "allowed: http, https") {
				t.Errorf("error %q does not name the URL and the allowed schemes", err)
			}
		})
	}
	t.Run("a policy of https only refuses http", func(t *testing.T) {
		s := serve(t, "127.0.0.1", ok)
		_, err := fetch.New(fetch.Policy{Schemes: []string{"HTTPS"}}).Fetch(t.Context(), s.URL, 100)
		if !errors.Is(err, fetch.ErrScheme) || s.hits.Load() != 0 {
			t.Fatalf("Fetch error = %v (server hits %d), want ErrScheme and no request", err, s.hits.Load())
		}
	})
	t.Run("scheme case does not matter", func(t *testing.T) {
		s := serve(t, "127.0.0.1", ok)
		body, err := c.Fetch(t.Context(), strings.Replace(s.URL, "http://", "HTTP://", 1), 100)
		if err != nil || string(body) != "hello" {
			t.Fatalf("Fetch = %q, %v", body, err)
		}
	})
}

func TestDeniedAddressesAreRefusedBeforeAnyConnection(t *testing.T) {
	// A server on 127.0.0.1 that 0.0.0.0 would reach if it were dialled.
	s := serve(t, "127.0.0.1", ok)
	c := fetch.New(fetch.Policy{})
	tests := []struct {
		url, in string
	}{
		{"http://169.254.169.254/latest/meta-data/", "169.254.0.0/16"},
		{"http://[::ffff:169.254.169.254]/latest/meta-data/", "169.254.0.0/16"},
		{"http://[::ffff:a9fe:a9fe]/", "169.254.0.0/16"},
		{"http://[64:ff9b::a9fe:a9fe]/", "169.254.0.0/16"},
		{"http://[fe80::1%25lo]:" + port(s) + "/", "fe80::/10"},
		{"http://[fd00:ec2::254]/", "fd00:ec2::254/128"},
		{"http://0.0.0.0:" + port(s) + "/", "0.0.0.0/8"},
		{"http://[::]:" + port(s) + "/", "::/128"},
		{"http://224.0.0.1/", "224.0.0.0/4"},
		{"http://[ff02::1]/", "ff00::/8"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := c.Get(t.Context(), tt.url)
			if !errors.Is(err, fetch.ErrDenied) {
				t.Fatalf("Get error = %v, want ErrDenied", err)
			}
			// Refused on the URL itself: no dial was tried.
			if strings.Contains(err.Error(), "dial") || !strings.Contains(err.Error(), " is in "+tt.in) || !strings.HasPrefix(err.Error(), "fetch: http://") {
				t.Errorf("error %q: want the URL and %q, and no dial", err, tt.in)
			}
			if _, err := fetch.CheckURL(tt.url, fetch.Policy{}); !errors.Is(err, fetch.ErrDenied) {
				t.Errorf("CheckURL error = %v, want ErrDenied", err)
			}
		})
	}
	if n := s.hits.Load(); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
}

func TestLoopbackDeniedByPolicy(t *testing.T) {
	s := serve(t, "127.0.0.1", ok)
	c := fetch.New(local(fetch.Policy{Deny: mustDeny(t, "loopback")}))
	for _, m := range []struct {
		name string
		call func(url string) error
	}{
		{"Get", func(u string) error { _, err := c.Get(t.Context(), u); return err }},
		{"Head", func(u string) error { _, err := c.Head(t.Context(), u); return err }},
		{"Fetch", func(u string) error { _, err := c.Fetch(t.Context(), u, 100); return err }},
		{"PostJSON", func(u string) error { _, err := c.PostJSON(t.Context(), u, map[string]int{"a": 1}); return err }},
		{"Post", func(u string) error { _, err := c.Post(t.Context(), u, "text/plain", []byte("x"), nil); return err }},
	} {
		t.Run(m.name, func(t *testing.T) {
			err := m.call(s.URL + "/x")
			if !errors.Is(err, fetch.ErrDenied) || !strings.Contains(err.Error(), s.URL+"/x") {
				t.Fatalf("error = %v, want ErrDenied naming %s/x", err, s.URL)
			}
		})
	}
	if n := s.hits.Load(); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
	// The same server is reachable once loopback is allowed and not denied.
	if _, err := fetch.New(local(fetch.Policy{})).Fetch(t.Context(), s.URL, 100); err != nil {
		t.Fatalf("loopback allowed: %v", err)
	}
}

func TestInternalAddressesAreDeniedUnlessAllowed(t *testing.T) {
	s := serve(t, "127.0.0.1", ok)
	internal := []struct{ addr, in string }{
		{"127.0.0.1", "127.0.0.0/8"}, {"127.9.9.9", "127.0.0.0/8"}, {"::1", "::1/128"}, {"::ffff:127.0.0.1", "127.0.0.0/8"},
		{"10.1.2.3", "10.0.0.0/8"}, {"172.16.0.1", "172.16.0.0/12"}, {"172.31.255.255", "172.16.0.0/12"},
		{"192.168.1.1", "192.168.0.0/16"}, {"fd12::1", "fc00::/7"}, {"100.64.0.1", "100.64.0.0/10"}, {"100.127.255.254", "100.64.0.0/10"},
	}
	for _, tt := range internal {
		url := "http://" + net.JoinHostPort(tt.addr, port(s)) + "/x"
		_, err := fetch.CheckURL(url, fetch.Policy{AllowSetting: "INGESTQ_FETCH_ALLOW"})
		want := fmt.Sprintf("address denied by policy: %s is in %s, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=%s allows it)", tt.addr, tt.in, tt.in)
		if !errors.Is(err, fetch.ErrDenied) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%s by default: %v, want ErrDenied ending %q", tt.addr, err, want)
		}
		if _, err := fetch.CheckURL(url, fetch.Policy{Allow: fetch.InternalRanges()}); err != nil {
			t.Errorf("%s with the internal ranges allowed: %v", tt.addr, err)
		}
	}
	for _, public := range []string{"8.8.8.8", "172.32.0.1", "100.128.0.1", "2001:4860::8888"} {
		if _, err := fetch.CheckURL("http://"+net.JoinHostPort(public, "80")+"/", fetch.Policy{}); err != nil {
			t.Errorf("%s: %v, want it allowed by default", public, err)
		}
	}

	// A real server on loopback gets no request under the default policy,
	// whatever the method, nor through a name that resolves to it.
	c := fetch.New(fetch.Policy{})
	for _, m := range []struct {
		name string
		call func(url string) error
	}{
		{"Get", func(u string) error { _, err := c.Get(t.Context(), u); return err }},
		{"Head", func(u string) error { _, err := c.Head(t.Context(), u); return err }},
		{"Fetch", func(u string) error { _, err := c.Fetch(t.Context(), u, 100); return err }},
		{"PostJSON", func(u string) error { _, err := c.PostJSON(t.Context(), u, map[string]int{"a": 1}); return err }},
		{"Post", func(u string) error { _, err := c.Post(t.Context(), u, "text/plain", []byte("x"), nil); return err }},
	} {
		for _, url := range []string{s.URL + "/x", "http://localhost:" + port(s) + "/x"} {
			if err := m.call(url); !errors.Is(err, fetch.ErrDenied) || !strings.Contains(err.Error(), url) || !strings.Contains(err.Error(), "Policy.Allow=") {
				t.Errorf("%s %s: %v, want ErrDenied naming the URL and what allows it", m.name, url, err)
			}
		}
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("the server got %d requests under the default policy", n)
	}

	// Allowed, it is reached; denied as well, the deny list wins.
	allow, err := fetch.ParseAllow("loopback")
	if err != nil {
		t.Fatal(err)
	}
	if body, err := fetch.New(fetch.Policy{Allow: allow}).Fetch(t.Context(), "http://localhost:"+port(s)+"/x", 100); err != nil || string(body) != "hello" {
		t.Fatalf("loopback allowed: %q, %v", body, err)
	}
	_, err = fetch.New(fetch.Policy{Allow: allow, Deny: mustDeny(t, "127.0.0.1")}).Fetch(t.Context(), s.URL, 100)
	if !errors.Is(err, fetch.ErrDenied) || !strings.HasSuffix(err.Error(), "127.0.0.1 is in 127.0.0.1/32") {
		t.Fatalf("loopback allowed and 127.0.0.1 denied: %v, want the deny list's refusal", err)
	}
}

func TestParseAllow(t *testing.T) {
	tests := []struct {
		list    string
		allowed []string
		denied  []string
		wantErr string
	}{
		{list: "", denied: []string{"127.0.0.1", "10.0.0.1"}},
		{list: "loopback", allowed: []string{"127.0.0.1", "::1"}, denied: []string{"10.0.0.1", "192.168.0.1"}},
		{list: "private", allowed: []string{"10.0.0.1", "172.20.0.1", "192.168.0.1", "fd00::1", "100.64.1.1"}, denied: []string{"127.0.0.1"}},
		{list: "10.1.0.0/16, 127.0.0.2", allowed: []string{"10.1.2.3", "127.0.0.2"}, denied: []string{"10.2.0.1", "127.0.0.1"}},
		{list: "link-local", wantErr: "fetch: allow list item 169.254.0.0/16 is in 169.254.0.0/16, which is always denied"},
		{list: "loopback,169.254.169.254", wantErr: "allow list item 169.254.169.254/32 is in 169.254.0.0/16, which is always denied"},
		{list: "8.8.8.0/24", wantErr: "allow list item 8.8.8.0/24 is in no internal range (loopback, private): it is not denied, there is nothing to allow"},
		{list: "intranet", wantErr: `fetch: allow list item "intranet" is not a CIDR, an address, or one of loopback, private, link-local`},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			allow, err := fetch.ParseAllow(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tt.allowed {
				if _, err := fetch.CheckURL("http://"+net.JoinHostPort(a, "80")+"/", fetch.Policy{Allow: allow}); err != nil {
					t.Errorf("%s: refused: %v", a, err)
				}
			}
			for _, a := range tt.denied {
				if _, err := fetch.CheckURL("http://"+net.JoinHostPort(a, "80")+"/", fetch.Policy{Allow: allow}); !errors.Is(err, fetch.ErrDenied) {
					t.Errorf("%s: error = %v, want ErrDenied", a, err)
				}
			}
		})
	}
}

func TestHostNameResolvingToADeniedAddressIsRefusedAtDial(t *testing.T) {
	s := serve(t, "127.0.0.1", ok)
	c := fetch.New(local(fetch.Policy{Deny: mustDeny(t, "loopback")}))
	url := "http://localhost:" + port(s) + "/doc"
	_, err := c.Fetch(t.Context(), url, 100)
	if !errors.Is(err, fetch.ErrDenied) {
		t.Fatalf("Fetch error = %v, want ErrDenied", err)
	}
	// The name passed the URL check; the resolved address was refused.
	if !strings.Contains(err.Error(), "GET "+url) || !strings.Contains(err.Error(), "dial") || !strings.Contains(err.Error(), "is in ") {
		t.Errorf("error %q: want the URL and the dial refusal", err)
	}
	if n := s.hits.Load(); n != 0 {
		t.Errorf("the server got %d requests", n)
	}
}

func TestRedirectIntoADeniedRangeIsRefused(t *testing.T) {
	// target listens on 127.0.0.1, which the policy denies; the redirecting
	// server listens on 127.0.0.2, which it allows.
	target := serve(t, "127.0.0.1", ok)
	deny := mustDeny(t, "127.0.0.1,::1")
	tests := []struct {
		name, location string
		dial           bool // refused when dialled rather than on the URL
	}{
		{name: "to the metadata address", location: "http://169.254.169.254/latest/meta-data/iam"},
		{name: "to a denied address literal", location: target.URL + "/secret"},
		{name: "to a host name resolving to a denied address", location: "http://localhost:" + port(target) + "/secret", dial: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			redirector := serve(t, "127.0.0.2", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, tt.location, http.StatusFound)
			})
			_, err := fetch.New(local(fetch.Policy{Deny: deny})).Get(t.Context(), redirector.URL+"/start")
			if !errors.Is(err, fetch.ErrDenied) {
				t.Fatalf("Get error = %v, want ErrDenied", err)
			}
			want := fmt.Sprintf("fetch: GET %s/start (redirected to %s): ", redirector.URL, tt.location)
			if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "dial") != tt.dial {
				t.Errorf("error %q, want it to start %q (dial %v)", err, want, tt.dial)
			}
			if redirector.hits.Load() != 1 {
				t.Errorf("redirector hits = %d, want 1", redirector.hits.Load())
			}
		})
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("the denied server got %d requests", n)
	}
}

func TestRedirectsAreBounded(t *testing.T) {
	// /hop/N redirects to /hop/N-1; /hop/0 answers.
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
		if r.URL.Path == "/loop" {
			http.Redirect(w, r, "/loop", http.StatusMovedPermanently)
			return
		}
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusTemporaryRedirect)
			return
		}
		io.WriteString(w, "arrived")
	})
	tests := []struct {
		name    string
		max     int
		path    string
		wantErr string // "" for success
		hits    int64
	}{
		{name: "redirect loop stops at the default of 5", max: 0, path: "/loop", wantErr: "stopped after 5 redirects", hits: 6},
		{name: "exactly MaxRedirects hops are followed", max: 2, path: "/hop/2", hits: 3},
		{name: "one hop more than MaxRedirects fails", max: 2, path: "/hop/3", wantErr: "stopped after 2 redirects", hits: 3},
		{name: "negative MaxRedirects follows none", max: -1, path: "/hop/1", wantErr: "stopped after 0 redirects", hits: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.hits.Load()
			body, err := fetch.New(local(fetch.Policy{MaxRedirects: tt.max})).Fetch(t.Context(), s.URL+tt.path, 100)
			if tt.wantErr == "" && (err != nil || string(body) != "arrived") {
				t.Fatalf("Fetch = %q, %v", body, err)
			}
			if tt.wantErr != "" && (err == nil || !strings.HasSuffix(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "fetch: GET "+s.URL+tt.path+" (redirected to "+s.URL+"/")) {
				t.Fatalf("Fetch error = %v, want %q naming the URL and the absolute redirect target", err, tt.wantErr)
			}
			if got := s.hits.Load() - before; got != tt.hits {
				t.Errorf("server hits = %d, want %d", got, tt.hits)
			}
		})
	}
}

func TestARedirectCheckSeesEveryHopAndCanStopTheRequestBeforeTheTargetIsAsked(t *testing.T) {
	// first (127.0.0.1) redirects to mid (127.0.0.2), which redirects to
	// last (127.0.0.1 again, another port).
	last := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Content-Length", "42") })
	mid := serve(t, "127.0.0.2", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, last.URL+"/end", http.StatusFound)
	})
	first := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, mid.URL+"/mid", http.StatusFound)
	})
	c := fetch.New(local(fetch.Policy{}))
	var hops []string
	stop := errors.New("host given up on")
	check := func(refuse string) fetch.RedirectCheck {
		return func(ctx context.Context, target *url.URL) error {
			hops = append(hops, target.String())
			if target.Host == refuse {
				return stop
			}
			return nil
		}
	}

	size, err := c.Head(fetch.WithRedirectCheck(t.Context(), check("")), first.URL+"/start")
	if err != nil || size != 42 {
		t.Fatalf("Head = %d, %v; want 42", size, err)
	}
	if want := []string{mid.URL + "/mid", last.URL + "/end"}; !slices.Equal(hops, want) {
		t.Errorf("the check saw %q, want every hop %q", hops, want)
	}

	hops = nil
	size, err = c.Head(fetch.WithRedirectCheck(t.Context(), check(last.Listener.Addr().String())), first.URL+"/start")
	var re *fetch.RedirectError
	if size != -1 || !errors.Is(err, stop) || !errors.As(err, &re) || re.Target != last.URL+"/end" {
		t.Fatalf("Head = %d, %v; want the check's error in a RedirectError naming %s/end", size, err, last.URL)
	}
	if want := fmt.Sprintf("fetch: HEAD %s/start (redirected to %s/end): %v", first.URL, last.URL, stop); err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if n := last.hits.Load(); n != 1 {
		t.Errorf("the refused target got %d requests, want only the first Head's", n)
	}

	// The policy's and MaxRedirects' refusals are RedirectErrors too, and
	// the check is not asked about a target the policy refuses.
	hops = nil
	denying := fetch.New(local(fetch.Policy{Deny: mustDeny(t, "127.0.0.2")}))
	_, err = denying.Head(fetch.WithRedirectCheck(t.Context(), check("")), first.URL+"/start")
	if !errors.As(err, &re) || re.Target != mid.URL+"/mid" || !errors.Is(err, fetch.ErrDenied) || len(hops) != 0 {
		t.Errorf("redirect to a denied address: error %v, hops checked %q; want a RedirectError naming %s/mid, none checked", err, hops, mid.URL)
	}
	_, err = fetch.New(local(fetch.Policy{MaxRedirects: 1})).Head(t.Context(), first.URL+"/start")
	if !errors.As(err, &re) || re.Target != last.URL+"/end" || !strings.HasSuffix(err.Error(), "stopped after 1 redirects") {
		t.Errorf("one redirect too many: error %v, want a RedirectError naming %s/end", err, last.URL)
	}
}

// stall blocks a handler until the test ends or the client goes away.
func stall(t *testing.T, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-t.Context().Done():
	}
}

func TestServersThatStopAnsweringAreCutOff(t *testing.T) {
	// Each case bounds only the wait that the server never ends; what the
	// server does send has the default bounds, however slow the machine.
	t.Run("no response headers", func(t *testing.T) {
		s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) { stall(t, r) })
		policy := local(fetch.Policy{HeaderTimeout: 200 * time.Millisecond})
		_, err := fetch.New(policy).Get(t.Context(), s.URL+"/silent")
		if !errors.Is(err, fetch.ErrTimeout) || !strings.Contains(err.Error(), "GET "+s.URL+"/silent") || !strings.Contains(err.Error(), "awaiting response headers") {
			t.Fatalf("Get error = %v, want ErrTimeout awaiting headers, naming the URL", err)
		}
	})
	t.Run("headers then nothing", func(t *testing.T) {
		s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			stall(t, r)
		})
		policy := local(fetch.Policy{IdleTimeout: 200 * time.Millisecond})
		resp, err := fetch.New(policy).Get(t.Context(), s.URL+"/half")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if string(data) != "part" || !errors.Is(err, fetch.ErrTimeout) || !strings.Contains(err.Error(), "GET "+s.URL+"/half: reading the body") || !strings.Contains(err.Error(), "IdleTimeout") {
			t.Fatalf("ReadAll = %q, %v; want the first bytes, then ErrTimeout (IdleTimeout) naming the URL", data, err)
		}
		_, err = fetch.New(policy).Fetch(t.Context(), s.URL+"/half", 1<<20)
		if !errors.Is(err, fetch.ErrTimeout) {
			t.Fatalf("Fetch error = %v, want ErrTimeout", err)
		}
	})
	t.Run("a trickle that never ends is cut by the FetchTimeout", func(t *testing.T) {
		s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-tick.C:
					io.WriteString(w, ".")
					w.(http.Flusher).Flush()
				}
			}
		})
		p := local(fetch.Policy{IdleTimeout: time.Minute, FetchTimeout: 300 * time.Millisecond})
		_, err := fetch.New(p).Fetch(t.Context(), s.URL+"/trickle", 1<<20)
		if !errors.Is(err, fetch.ErrTimeout) || !strings.Contains(err.Error(), "whole fetch took longer than 300ms") || !strings.Contains(err.Error(), s.URL+"/trickle") {
			t.Fatalf("Fetch error = %v, want the FetchTimeout naming the URL", err)
		}
	})
	t.Run("the caller's context ends a request", func(t *testing.T) {
		s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) { stall(t, r) })
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := fetch.New(local(fetch.Policy{})).Get(ctx, s.URL)
		if !errors.Is(err, context.Canceled) || errors.Is(err, fetch.ErrTimeout) {
			t.Fatalf("Get error = %v, want context.Canceled", err)
		}
	})
}

// trickle sends a byte every interval until the client goes away.
func trickle(interval time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				io.WriteString(w, ".")
				w.(http.Flusher).Flush()
			}
		}
	}
}

func TestABodySlowerThanTheMinRateFailsNamingTheURLAndTheRate(t *testing.T) {
	// Short windows stand for the real ones: a byte every 20ms is 50 bytes/s
	// where 1000 are asked for, and the idle timeout never runs out.
	policy := local(fetch.Policy{MinRate: 1000, RateWindow: 200 * time.Millisecond, IdleTimeout: time.Minute})
	slow := serve(t, "127.0.0.1", trickle(20*time.Millisecond))
	// Bounds the test, not the fetch: without a least rate the trickle
	// would never end.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, m := range []struct {
		name string
		read func(url string) error
	}{
		{"Get", func(u string) error {
			resp, err := fetch.New(policy).Get(ctx, u)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}},
		{"Fetch", func(u string) error { _, err := fetch.New(policy).Fetch(ctx, u, 1<<20); return err }},
	} {
		t.Run(m.name, func(t *testing.T) {
			url := slow.URL + "/big.bin"
			err := m.read(url)
			if !errors.Is(err, fetch.ErrTooSlow) || fetch.Retryable(err) {
				t.Fatalf("error = %v, want ErrTooSlow, not retryable", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "fetch: GET "+url+": reading the body: too slow: ") || !strings.Contains(msg, " bytes/s over the last ") ||
				!strings.HasSuffix(msg, "below the least allowed 1000 bytes/s (MinRate)") {
				t.Errorf("error %q: want the URL, the rate measured and the least allowed", msg)
			}
		})
	}

	// A server at a normal pace sends a large body under the same policy.
	big := strings.Repeat("0123456789abcdef", 256<<10) // 4 MiB
	fast := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	if body, err := fetch.New(policy).Fetch(t.Context(), fast.URL, 8<<20); err != nil || len(body) != len(big) {
		t.Fatalf("Fetch at a normal pace: %d bytes, %v", len(body), err)
	}

	// A caller slow to read is not cut off: only time spent waiting for
	// data counts, not the caller's pauses between reads (here longer in
	// all than the window, at a rate far below the least asked for).
	resp, err := fetch.New(local(fetch.Policy{MinRate: 1 << 30, RateWindow: 500 * time.Millisecond})).Get(t.Context(), fast.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := 0
	buf := make([]byte, 64<<10)
	for got < 1<<20 {
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			t.Fatalf("a slow reader was cut off after %d bytes: %v", got, err)
		}
		time.Sleep(50 * time.Millisecond) // a slow reader: its slowness is the point
	}
}

func TestFetchRefusesBodiesOverMaxBytes(t *testing.T) {
	endless := func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 32<<10))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	announced := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5000000")
		io.WriteString(w, "short")
	}
	exact := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat("y", 1000)) }
	tests := []struct {
		name    string
		h       http.HandlerFunc
		wantErr string
	}{
		{name: "endless body", h: endless, wantErr: "body too large: more than 1000 bytes"},
		{name: "Content-Length over the limit", h: announced, wantErr: "body too large: Content-Length 5000000 is over the limit of 1000 bytes"},
		{name: "body of exactly maxBytes", h: exact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serve(t, "127.0.0.1", tt.h)
			data, err := fetch.New(local(fetch.Policy{})).Fetch(t.Context(), s.URL+"/doc", 1000)
			if tt.wantErr == "" {
				if err != nil || len(data) != 1000 {
					t.Fatalf("Fetch = %d bytes, %v", len(data), err)
				}
				return
			}
			if !errors.Is(err, fetch.ErrTooLarge) || err.Error() != "fetch: GET "+s.URL+"/doc: "+tt.wantErr {
				t.Fatalf("Fetch error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestHeadReturnsTheContentLength(t *testing.T) {
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sized":
			w.Header().Set("Content-Length", "123456789")
		case "/missing":
			http.NotFound(w, r)
		}
		// /unsized: no Content-Length at all.
	})
	tests := []struct {
		path    string
		want    int64
		wantErr string
	}{
		{path: "/sized", want: 123456789},
		{path: "/unsized", want: -1},
		{path: "/missing", want: -1, wantErr: "HEAD " + s.URL + "/missing: HTTP 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			size, err := fetch.New(local(fetch.Policy{})).Head(t.Context(), s.URL+tt.path)
			if size != tt.want {
				t.Errorf("size = %d, want %d", size, tt.want)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
				t.Errorf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestHeadRefusesAMalformedContentLength(t *testing.T) {
	// A raw server: net/http would not send a broken header.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		http.ReadRequest(bufio.NewReader(conn))
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n")
	}()
	url := "http://" + ln.Addr().String() + "/odd"
	size, err := fetch.New(local(fetch.Policy{})).Head(t.Context(), url)
	if err == nil || size != -1 || !strings.Contains(err.Error(), "HEAD "+url) || !strings.Contains(err.Error(), `bad Content-Length "lots"`) {
		t.Fatalf("Head = %d, %v; want -1 and an error naming the URL and the header", size, err)
	}
}

func TestNon2xxIsAStatusErrorNamingTheURL(t *testing.T) {
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.WriteHeader(code)
	})
	for _, code := range []int{404, 500, 403} {
		_, err := fetch.New(local(fetch.Policy{})).Get(t.Context(), fmt.Sprintf("%s/%d", s.URL, code))
		var se *fetch.StatusError
		if !errors.As(err, &se) || se.Code != code {
			t.Fatalf("Get error = %v, want a StatusError %d", err, code)
		}
		if len(se.Body) != 0 {
			t.Errorf("Body = %q of an empty answer", se.Body)
		}
		want := fmt.Sprintf("GET %s/%d: HTTP %d %s", s.URL, code, code, http.StatusText(code))
		if se.Error() != want || se.URL != fmt.Sprintf("%s/%d", s.URL, code) {
			t.Errorf("Error() = %q, want %q", se.Error(), want)
		}
	}
}

func TestErrorsHideURLPasswords(t *testing.T) {
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		if u, p, _ := r.BasicAuth(); u != "depositor" || p != "s3cret" {
			t.Errorf("basic auth = %q %q", u, p)
		}
		http.NotFound(w, r)
	})
	url := strings.Replace(s.URL, "http://", "http://depositor:s3cret@", 1) + "/gone"
	_, err := fetch.New(local(fetch.Policy{})).Get(t.Context(), url)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "depositor:xxxxx@") {
		t.Fatalf("error = %v, want the URL with its password redacted", err)
	}
	// Refused before the URL is checked: still redacted.
	_, err = fetch.New(local(fetch.Policy{})).Fetch(t.Context(), url, 0)
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "maxBytes must be positive") {
		t.Fatalf("error = %v, want maxBytes refused with the password redacted", err)
	}
}

func TestPostJSONRoundTrip(t *testing.T) {
	type note struct {
		Batch string   `json:"batch"`
		Jobs  []string `json:"jobs"`
	}
	var agent atomic.Value
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		agent.Store(r.UserAgent())
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		var n note
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n.Jobs = append(n.Jobs, "seen")
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(n)
	})
	c := fetch.New(local(fetch.Policy{}))
	resp, err := c.PostJSON(t.Context(), s.URL+"/callback", note{Batch: "bid-1", Jobs: []string{"jid-1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got note
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Batch != "bid-1" || strings.Join(got.Jobs, ",") != "jid-1,seen" {
		t.Errorf("echo = %+v", got)
	}
	if ua, _ := agent.Load().(string); !strings.HasPrefix(ua, "ingestq/") {
		t.Errorf("User-Agent = %q, want ingestq/<version>", ua)
	}

	_, err = c.PostJSON(t.Context(), s.URL+"/callback", "not an object")
	var se *fetch.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusBadRequest || se.Error() != "POST "+s.URL+"/callback: HTTP 400 Bad Request" {
		t.Errorf("error = %v, want a 400 StatusError", err)
	}
	_, err = c.PostJSON(t.Context(), s.URL+"/callback", func() {})
	if err == nil || !strings.Contains(err.Error(), "POST "+s.URL+"/callback: encoding the body as JSON") {
		t.Errorf("error = %v, want a JSON encoding error naming the URL", err)
	}
}

func TestParseDeny(t *testing.T) {
	tests := []struct {
		list    string
		denied  []string
		allowed []string
		wantErr string
	}{
		{list: "", allowed: []string{"127.0.0.1", "10.0.0.1"}},
		{list: "loopback", denied: []string{"127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"}, allowed: []string{"10.0.0.1", "::2"}},
		{list: "Private, link-local", denied: []string{"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "fd12::1", "169.254.1.1", "fe80::1"}, allowed: []string{"172.32.0.1", "127.0.0.1", "8.8.8.8"}},
		{list: "10.1.0.0/16, 192.0.2.7 ,,2001:db8::/32", denied: []string{"10.1.200.1", "192.0.2.7", "2001:db8::5"}, allowed: []string{"10.2.0.1", "192.0.2.8"}},
		{list: "::ffff:10.0.0.0/104", denied: []string{"10.0.0.1", "::ffff:10.9.9.9"}, allowed: []string{"11.0.0.1"}},
		{list: "loopback,intranet", wantErr: `fetch: deny list item "intranet" is not a CIDR, an address, or one of loopback, private, link-local`},
		{list: "10.0.0.0/33", wantErr: `deny list item "10.0.0.0/33"`},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			deny, err := fetch.ParseDeny(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Deny wins over Allow: with every internal range allowed, what
			// is denied is the deny list's doing.
			p := fetch.Policy{Deny: deny, Allow: fetch.InternalRanges()}
			for _, a := range tt.denied {
				if _, err := fetch.CheckURL("http://"+net.JoinHostPort(a, "80")+"/", p); !errors.Is(err, fetch.ErrDenied) {
					t.Errorf("%s: error = %v, want ErrDenied", a, err)
				}
			}
			for _, a := range tt.allowed {
				if _, err := fetch.CheckURL("http://"+net.JoinHostPort(a, "80")+"/", p); err != nil {
					t.Errorf("%s: refused: %v", a, err)
				}
			}
		})
	}
}

func TestCheckURLRefusesURLsWithoutHost(t *testing.T) {
	for _, raw := range []string{"http:///path", "http://:80/", "https:relative"} {
		if _, err := fetch.CheckURL(raw, fetch.Policy{}); err == nil || !strings.Contains(err.Error(), "has no host") {
			t.Errorf("CheckURL(%q) error = %v, want no host", raw, err)
		}
	}
	if _, err := fetch.CheckURL("http://127.0.0.1/%zz", fetch.Policy{}); err == nil || !strings.Contains(err.Error(), `"http://127.0.0.1/%zz" is not a URL`) {
		t.Errorf("error = %v, want not a URL", err)
	}
}

func TestPostSendsItsBodyAndTheCallersHeaders(t *testing.T) {
	type seen struct {
		method, contentType, agent, accept, user, password, body string
	}
	got := make(chan seen, 1)
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		user, password, _ := r.BasicAuth()
		got <- seen{r.Method, r.Header.Get("Content-Type"), r.UserAgent(), r.Header.Get("Accept"), user, password, string(body)}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "success: ark:/99999/fk4x\n")
	})
	header := http.Header{"Accept": {"text/plain"}, "User-Agent": {"spoofed"}, "Content-Type": {"image/png"}}
	header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("apitest:s3cret")))
	resp, err := fetch.New(local(fetch.Policy{})).Post(t.Context(), s.URL+"/shoulder/ark:/99999/fk4", "text/plain; charset=UTF-8",
		[]byte("erc.who: Doe\n"), header)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || string(answer) != "success: ark:/99999/fk4x\n" {
		t.Errorf("answer %d %q, %v", resp.StatusCode, answer, err)
	}
	r := <-got
	if r.method != http.MethodPost || r.body != "erc.who: Doe\n" || r.accept != "text/plain" || r.user != "apitest" || r.password != "s3cret" {
		t.Errorf("the server saw %+v", r)
	}
	// The content type given as such and the client's own agent win over
	// what the header says.
	if r.contentType != "text/plain; charset=UTF-8" || !strings.HasPrefix(r.agent, "ingestq/") {
		t.Errorf("Content-Type %q, User-Agent %q; want the argument's and ingestq/<version>", r.contentType, r.agent)
	}
}

func TestAStatusErrorKeepsTheStartOfTheAnswer(t *testing.T) {
	long := strings.Repeat("x", 2*fetch.MaxStatusBody)
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, long)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "error: unauthorized\n")
	})
	c := fetch.New(local(fetch.Policy{}))
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/short", http.StatusUnauthorized, "error: unauthorized\n"},
		{"/long", http.StatusBadGateway, long[:fetch.MaxStatusBody]},
	} {
		_, err := c.Post(t.Context(), s.URL+tc.path, "text/plain", []byte("x"), nil)
		var se *fetch.StatusError
		if !errors.As(err, &se) || se.Code != tc.code || string(se.Body) != tc.body {
			t.Errorf("POST %s: %v (body %d bytes); want HTTP %d with the first %d bytes of the answer", tc.path, err, len(se.Body), tc.code, len(tc.body))
		}
	}
	// A policy that keeps more keeps the whole of a longer refusal.
	_, err := fetch.New(local(fetch.Policy{StatusBody: 4 * fetch.MaxStatusBody})).Post(t.Context(), s.URL+"/long", "text/plain", []byte("x"), nil)
	if se := (*fetch.StatusError)(nil); !errors.As(err, &se) || string(se.Body) != long {
		t.Errorf("POST /long with a StatusBody of %d: %v, want the whole answer", 4*fetch.MaxStatusBody, err)
	}
}

func TestPostRedirectedElsewhereLeavesItsCredentialsBehind(t *testing.T) {
	auths := make(chan string, 2)
	record := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auths <- r.Header.Get("Authorization") + " " + string(body)
	}
	other := serve(t, "127.0.0.2", record)
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
		case "/elsewhere":
			http.Redirect(w, r, other.URL+"/final", http.StatusTemporaryRedirect)
		default:
			record(w, r)
		}
	})
	c := fetch.New(local(fetch.Policy{}))
	header := http.Header{"Authorization": {"Bearer s3cret"}}
	for _, tc := range []struct{ path, want string }{
		{"/same", "Bearer s3cret body"}, // same host: a 307 sends the body and credentials again
		{"/elsewhere", " body"},         // another host: the body only
	} {
		resp, err := c.Post(t.Context(), s.URL+tc.path, "text/plain", []byte("body"), header)
		if err != nil {
			t.Fatalf("POST %s: %v", tc.path, err)
		}
		resp.Body.Close()
		if got := <-auths; got != tc.want {
			t.Errorf("POST %s arrived as %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestManyFetchesFromOneHostReuseTheirConnections(t *testing.T) {
	var dials atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("file"))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dials.Add(1)
		}
	}
	s.Start()
	defer s.Close()
	c := fetch.New(local(fetch.Policy{}))
	const concurrent, rounds = 16, 3
	for range rounds {
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				if _, err := c.Fetch(t.Context(), s.URL, 100); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// A connection goes back to the idle pool a moment after its fetch
	// returns (the transport's own goroutine sees the body end), so a
	// round may dial a few more than the last one left. Without reuse
	// (Go's default of 2 idle connections per host) the rounds dial ~44.
	if n, most := dials.Load(), int64(concurrent+concurrent/2); n > most {
		t.Fatalf("%d rounds of %d fetches at once made %d connections; want at most %d: connections are kept for the next round",
			rounds, concurrent, n, most)
	}
}
