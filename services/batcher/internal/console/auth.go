package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Cookie names.
const (
	sessionCookie = "ingestq_console_session"
	flashCookie   = "ingestq_console_flash"
)

// auth checks the admin token once at sign-in and then the session cookie
// and CSRF token of every request.
//
// The session cookie is "<expiry>.<mac>", mac = HMAC-SHA256(key, expiry and
// the token's digest), key being random per process: the cookie proves that
// its holder knew the token, says nothing about the token itself (not even
// to an offline guesser), ends with its expiry and with the process.
// The CSRF token of a session is an HMAC of its cookie under the same key.
type auth struct {
	tokenDigest [sha256.Size]byte
	key         []byte
	ttl         time.Duration
}

func newAuth(token string, ttl time.Duration) (*auth, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: session key: %w", err)
	}
	return &auth{tokenDigest: sha256.Sum256([]byte(token)), key: key, ttl: ttl}, nil
}

// tokenMatches compares digests in constant time: the time taken says
// nothing about how much of the presented token was right, nor its length.
func (a *auth) tokenMatches(presented string) bool {
	d := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(d[:], a.tokenDigest[:]) == 1
}

func (a *auth) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession returns a session cookie value valid until now+ttl.
func (a *auth) newSession(now time.Time) string {
	exp := strconv.FormatInt(now.Add(a.ttl).Unix(), 10)
	return exp + "." + a.mac("session", exp, string(a.tokenDigest[:]))
}

// validSession reports whether v is a session of ours that has not expired.
func (a *auth) validSession(v string, now time.Time) bool {
	exp, mac, ok := strings.Cut(v, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(a.mac("session", exp, string(a.tokenDigest[:]))))
}

// csrf is the CSRF token of a session.
func (a *auth) csrf(session string) string { return a.mac("csrf", session) }

func (a *auth) validCSRF(session, presented string) bool {
	return hmac.Equal([]byte(presented), []byte(a.csrf(session)))
}

// session returns the request's valid session cookie value, or "".
func (a *auth) session(r *http.Request) string {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || !a.validSession(ck.Value, time.Now()) {
		return ""
	}
	return ck.Value
}

// secureRequest reports whether the browser reached us over TLS (directly
// or through a proxy that says so): only then may cookies be Secure.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setSessionCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secureRequest(r)})
}

// signInPage shows the token form, or says why there is none.
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	v := c.newView(r, "Sign in", "")
	v.Data = signInView{Return: safeReturn(r.URL.Query().Get("return"), "/")}
	c.render(w, r, http.StatusOK, "signin", v)
}

type signInView struct {
	Return string
	Failed string
}

// signIn checks the token and sets the session cookie. A form posted here
// needs no CSRF token: it carries the token itself, which a forger lacks.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if c.auth == nil {
		c.refuse(w, r, http.StatusForbidden, "Read-only console",
			"the batcher runs without an admin token (INGESTQ_ADMIN_TOKEN), so there is nothing to sign in to: the console only shows the queue")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.refuse(w, r, http.StatusBadRequest, "Bad form", "the form could not be read: "+err.Error())
		return
	}
	ret := safeReturn(r.PostForm.Get("return"), "/")
	if !c.auth.tokenMatches(r.PostForm.Get("token")) {
		c.log.WarnContext(r.Context(), "console sign-in refused: wrong token", "remote", r.RemoteAddr)
		v := c.newView(r, "Sign in", "")
		v.Data = signInView{Return: ret, Failed: "That is not the admin token."}
		c.render(w, r, http.StatusForbidden, "signin", v)
		return
	}
	c.setSessionCookie(w, r, c.auth.newSession(time.Now()), int(c.auth.ttl/time.Second))
	c.log.InfoContext(r.Context(), "console sign-in", "remote", r.RemoteAddr)
	http.Redirect(w, r, ret, http.StatusSeeOther)
}

// signOut ends the session in this browser.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	c.setSessionCookie(w, r, "", -1)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// page wraps a GET page: with a token configured it needs a session (else
// the sign-in page, coming back here afterwards).
func (c *Console) page(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.auth != nil && c.auth.session(r) == "" {
			http.Redirect(w, r, "/signin?return="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		h(w, r)
	}
}

// api wraps a JSON endpoint: with a token configured it needs a session.
func (c *Console) api(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.auth != nil && c.auth.session(r) == "" {
			writeJSON(w, http.StatusUnauthorized, apiError{Code: "Unauthenticated", Error: "sign in to the console first (/signin)"})
			return
		}
		h(w, r)
	}
}

// action wraps a state-changing POST: refused in read-only mode (403),
// without a session (401) and without the session's CSRF token (403).
func (c *Console) action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.auth == nil {
			c.refuse(w, r, http.StatusForbidden, "Read-only console",
				"the batcher runs without an admin token (INGESTQ_ADMIN_TOKEN): the console only shows the queue and refuses every action; set a token and sign in to act")
			return
		}
		session := c.auth.session(r)
		if session == "" {
			c.refuse(w, r, http.StatusUnauthorized, "Not signed in",
				"sign in with the admin token first: this request carried no valid session (it may have expired)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, http.StatusBadRequest, "Bad form", "the form could not be read: "+err.Error())
			return
		}
		if !c.auth.validCSRF(session, r.PostForm.Get("csrf")) {
			c.refuse(w, r, http.StatusForbidden, "Missing or wrong CSRF token",
				"the form did not carry this session's CSRF token: reload the page and try again")
			return
		}
		h(w, r)
	}
}
