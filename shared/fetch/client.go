package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ingestq/ingestq/shared/ctxio"
)

// Client makes HTTP requests under a Policy. It is safe for concurrent use.
type Client struct {
	policy    Policy
	http      *http.Client
	userAgent string
}

// StatusError is a response whose status is not 2xx.
type StatusError struct {
	Method string // "GET", "HEAD", "POST"
	URL    string // the requested URL, credentials redacted
	Code   int
	// Body is the start of the answer (at most the policy's StatusBody
	// bytes): some services say there why they refused.
	Body []byte
}

// MaxStatusBody bounds what a StatusError keeps of the answer's body
// unless the policy says otherwise (Policy.StatusBody).
const MaxStatusBody = 4 << 10

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d %s", e.Method, e.URL, e.Code, http.StatusText(e.Code))
}

// New returns a Client that follows p.
func New(p Policy) *Client {
	p = p.withDefaults()
	c := &Client{policy: p, userAgent: "ingestq/" + moduleVersion()}
	dialer := &net.Dialer{Timeout: p.ConnectTimeout, KeepAlive: 30 * time.Second, Control: c.checkDial}
	transport := &http.Transport{
		// No proxy: the deny list must judge the address really dialled.
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   p.ConnectTimeout,
		ResponseHeaderTimeout: p.HeaderTimeout,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          100,
		// A deposit's files mostly come from one host, fetched many at a
		// time: with Go's default of 2 idle connections per host, all
		// but two were closed after each file and dialled again.
		MaxIdleConnsPerHost: 64,
		ForceAttemptHTTP2:   true,
	}
	c.http = &http.Client{Transport: transport, CheckRedirect: c.checkRedirect}
	return c
}

// checkDial runs after DNS and before connect(2), on the address about to
// be dialled: the one place a resolved name can be judged.
func (c *Client) checkDial(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read the address %q: %v", ErrDenied, address, err)
	}
	return c.policy.denial(ap.Addr())
}

func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > c.policy.MaxRedirects {
		return &RedirectError{Target: req.URL.Redacted(), Err: fmt.Errorf("stopped after %d redirects", c.policy.MaxRedirects)}
	}
	if err := checkTarget(req.URL, c.policy); err != nil {
		return &RedirectError{Target: req.URL.Redacted(), Err: err}
	}
	if check, ok := req.Context().Value(redirectCheckKey{}).(RedirectCheck); ok {
		target := *req.URL
		if err := check(req.Context(), &target); err != nil {
			return &RedirectError{Target: req.URL.Redacted(), Err: err}
		}
	}
	return nil
}

// RedirectError is a redirect a request did not follow: past MaxRedirects,
// to a URL the policy refuses, or refused by the caller's RedirectCheck.
// The server that sent it answered; Target was not asked. A request's
// error holds it (errors.As) when it ended so.
type RedirectError struct {
	// Target is the resolved URL redirected to, credentials redacted: the
	// client's own error only has the Location header, which may be
	// relative.
	Target string
	Err    error
}

func (e *RedirectError) Error() string { return "redirect to " + e.Target + ": " + e.Err.Error() }
func (e *RedirectError) Unwrap() error { return e.Err }

// RedirectCheck is called before a request follows a redirect that the
// policy allows, with ctx the request's context and target the URL
// redirected to; an error stops the request there, and its error holds a
// *RedirectError wrapping this one. It runs in the request's goroutine and
// may wait (until ctx ends), say for a turn to ask target's host; the
// redirect's connection is held meanwhile.
type RedirectCheck func(ctx context.Context, target *url.URL) error

type redirectCheckKey struct{}

// WithRedirectCheck returns a context whose requests call check before each
// redirect they follow, so a caller that counts hosts learns every host a
// request reaches, not only the one its URL names.
func WithRedirectCheck(ctx context.Context, check RedirectCheck) context.Context {
	return context.WithValue(ctx, redirectCheckKey{}, check)
}

// Head asks for url's headers and returns its Content-Length, -1 when the
// response has none. (A Content-Length that is not a number makes Go's HTTP
// transport refuse the response: that is an error.)
func (c *Client) Head(ctx context.Context, url string) (size int64, err error) {
	resp, err := c.do(ctx, http.MethodHead, url, nil, "", nil)
	if err != nil {
		return -1, err
	}
	resp.Body.Close()
	return resp.ContentLength, nil
}

// Get returns the response to a GET of url; the caller closes its body. A
// body read that gets no data within the IdleTimeout fails with ErrTimeout;
// a body that keeps trickling, slower than the MinRate, fails with
// ErrTooSlow (downloads have no whole time limit: the rate bounds them). A
// status other than 2xx is a *StatusError.
func (c *Client) Get(ctx context.Context, url string) (*http.Response, error) {
	return c.do(ctx, http.MethodGet, url, nil, "", nil)
}

// Fetch returns the body of url, a small document such as a manifest: more
// than maxBytes is ErrTooLarge, a fetch longer than the FetchTimeout is
// ErrTimeout.
func (c *Client) Fetch(ctx context.Context, url string, maxBytes int64) ([]byte, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("fetch: GET %s: maxBytes must be positive, got %d", redact(url), maxBytes)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, c.policy.FetchTimeout,
		fmt.Errorf("%w: the whole fetch took longer than %s", ErrTimeout, c.policy.FetchTimeout))
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, url, nil, "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	name := resp.Request.URL.Redacted()
	if resp.ContentLength > maxBytes {
		return nil, fmt.Errorf("fetch: GET %s: %w: Content-Length %d is over the limit of %d bytes", name, ErrTooLarge, resp.ContentLength, maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("fetch: GET %s: %w: more than %d bytes", name, ErrTooLarge, maxBytes)
	}
	return data, nil
}

// PostJSON posts body encoded as JSON to url and returns the response; the
// caller closes its body. A status other than 2xx is a *StatusError.
func (c *Client) PostJSON(ctx context.Context, url string, body any) (*http.Response, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("fetch: POST %s: encoding the body as JSON: %w", redact(url), err)
	}
	return c.do(ctx, http.MethodPost, url, data, "application/json", nil)
}

// Post posts body, of contentType, to url with header's fields added to the
// request (credentials such as Authorization, Accept...; Content-Type and
// User-Agent are the client's) and returns the response; the caller closes
// its body. The policy applies as to every request; on a redirect to
// another host Go's client drops Authorization. A status other than 2xx is
// a *StatusError, which keeps the start of the answer.
func (c *Client) Post(ctx context.Context, url, contentType string, body []byte, header http.Header) (*http.Response, error) {
	return c.do(ctx, http.MethodPost, url, body, contentType, header)
}

// do sends one request (and its redirects) and returns a 2xx response whose
// body fails after IdleTimeout without data, or slower than MinRate.
func (c *Client) do(ctx context.Context, method, rawURL string, body []byte, contentType string, header http.Header) (*http.Response, error) {
	u, err := checkURL(rawURL, c.policy)
	if err != nil {
		return nil, err
	}
	name := u.Redacted()
	reqCtx, cancel := context.WithCancelCause(ctx)
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(reqCtx, method, u.String(), reader)
	if err != nil {
		cancel(nil)
		return nil, fmt.Errorf("fetch: %s %s: %w", method, name, err)
	}
	for name, values := range header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	req.Header.Set("User-Agent", c.userAgent)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = requestError(reqCtx, method, name, err)
		cancel(nil)
		return nil, err
	}
	bounded := &boundedBody{body: resp.Body, ctx: reqCtx, cancel: cancel,
		minRate: c.policy.MinRate, window: c.policy.RateWindow, method: method, url: name}
	idle := c.policy.IdleTimeout
	bounded.idle = ctxio.IdleBound{After: idle, Cut: func() {
		cancel(fmt.Errorf("%w: no body data for %s (IdleTimeout)", ErrTimeout, idle))
	}}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Keep a little (it also lets the connection be reused), not more,
		// read under the bounds of any body: a refusal that stalls must
		// not hold a caller that has no deadline.
		start, _ := io.ReadAll(io.LimitReader(bounded, c.policy.StatusBody))
		bounded.Close()
		return nil, &StatusError{Method: method, URL: name, Code: resp.StatusCode, Body: start}
	}
	resp.Body = bounded
	return resp, nil
}

// requestError names the method and URL and says why the request failed:
// the redirect target when a redirect failed, ErrTimeout for timeouts.
func requestError(ctx context.Context, method, name string, err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return fmt.Errorf("fetch: %s %s: %w", method, name, err)
	}
	where, reason := "", ue.Err
	var re *RedirectError
	if errors.As(reason, &re) {
		where, reason = " (redirected to "+re.Target+")", re.Err
	} else if target, perr := url.Parse(ue.URL); perr == nil && target.Redacted() != name {
		where = " (redirected to " + target.Redacted() + ")"
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
		reason = cause
	}
	if ue.Timeout() && !errors.Is(reason, ErrTimeout) {
		return fmt.Errorf("fetch: %s %s%s: %w: %w", method, name, where, ErrTimeout, reason)
	}
	err = fmt.Errorf("fetch: %s %s%s: %w", method, name, where, reason)
	if re != nil {
		return &redirectNotFollowed{error: err, redirect: re}
	}
	return err
}

// redirectNotFollowed keeps the *RedirectError in a request's error chain
// beside the reason its message gives, which names the target once.
type redirectNotFollowed struct {
	error
	redirect *RedirectError
}

func (e *redirectNotFollowed) Unwrap() []error { return []error{e.error, e.redirect} }

// boundedBody fails a read that waits longer than idle for data, and a body
// that arrives slower than minRate, by cancelling the request. Both count
// only the time a Read waits, so a caller that is slow to read is not cut
// off.
type boundedBody struct {
	body   io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   ctxio.IdleBound
	// The rate is measured over each window of waiting: got bytes in
	// waited time.
	minRate int64
	window  time.Duration
	waited  time.Duration
	got     int64
	method  string
	url     string
}

func (b *boundedBody) Read(p []byte) (int, error) {
	start := time.Now()
	n, err := b.idle.Read(func() (int, error) { return b.body.Read(p) })
	if err == nil {
		err = b.checkRate(n, time.Since(start))
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	if cause := context.Cause(b.ctx); cause != nil {
		err = cause // why the request was cut: idle, rate, whole-fetch timeout or the caller
	}
	return n, fmt.Errorf("fetch: %s %s: reading the body: %w", b.method, b.url, err)
}

// checkRate counts a read of n bytes that waited d, and at the end of each
// window cuts a body that came slower than minRate.
func (b *boundedBody) checkRate(n int, d time.Duration) error {
	if b.minRate <= 0 {
		return nil
	}
	b.waited += d
	b.got += int64(n)
	if b.waited < b.window {
		return nil
	}
	rate := float64(b.got) / b.waited.Seconds()
	waited := b.waited.Round(time.Millisecond)
	b.waited, b.got = 0, 0
	if rate >= float64(b.minRate) {
		return nil
	}
	err := fmt.Errorf("%w: %.1f bytes/s over the last %s, below the least allowed %d bytes/s (MinRate)", ErrTooSlow, rate, waited, b.minRate)
	b.cancel(err)
	return err
}

func (b *boundedBody) Close() error {
	b.idle.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}

// redact hides the password of a URL that is named in an error before it
// is checked.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

// moduleVersion is the version of the module that built this binary, or
// "dev" for a build from a work tree.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || !strings.HasPrefix(info.Main.Version, "v") {
		return "dev"
	}
	return info.Main.Version
}
