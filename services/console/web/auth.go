package web

import (
	"context"
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

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/config"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Cookie names.
const (
	signInCookie = "ingestq_console_session"
	flashCookie  = "ingestq_console_flash"
)

// auth checks the admin token once at sign-in and then the sign-in cookie
// and CSRF token of every request.
//
// The sign-in cookie is "<expiry>.<id>.<mac>", mac = HMAC-SHA256(key,
// expiry, id and the token's digest), key being the one configured
// (INGESTQ_CONSOLE_KEY_FILE, shared by the replicas) or random per process:
// the cookie proves that its holder signed in to a console holding the key
// and the token, says nothing about the token itself (not even to an
// offline guesser), and ends with its expiry, with a change of token and,
// for a random key, with the process. id names the sign-in the batcher
// recorded (AdminService's console sign-ins, kept in the queue's ZooKeeper),
// which every console of the queue asks about: signing out ends it there,
// so a copy of the cookie grants nothing afterwards, whichever console it is
// shown to.
// The CSRF token of a sign-in is an HMAC of its cookie under the same key.
type auth struct {
	tokenDigest [sha256.Size]byte
	key         []byte
	ttl         time.Duration
}

// MinSignInKeyBytes is the shortest sign-in key accepted: as long as the
// HMAC's own output, so that the key is no easier to guess than a MAC.
const MinSignInKeyBytes = sha256.Size

// ReadSignInKey reads a sign-in key from a file (a Kubernetes secret mounted
// as one, say): its content, less the whitespace around it that editors and
// `echo` add, of at least MinSignInKeyBytes bytes (`openssl rand -base64 48`
// makes one).
func ReadSignInKey(path string) ([]byte, error) {
	secret, err := config.ReadSecretFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the console's session key: %w", err)
	}
	key := []byte(secret)
	if len(key) < MinSignInKeyBytes {
		return nil, fmt.Errorf("%s holds %d bytes: a session key needs at least %d (openssl rand -base64 48 makes one)",
			path, len(key), MinSignInKeyBytes)
	}
	return key, nil
}

func newAuth(token string, key []byte, ttl time.Duration) (*auth, error) {
	switch {
	case key == nil:
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("console: session key: %w", err)
		}
	case len(key) < MinSignInKeyBytes:
		return nil, fmt.Errorf("console: a session key of %d bytes: at least %d needed", len(key), MinSignInKeyBytes)
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

// cookie is the sign-in cookie value of sign-in id, expiring at expires.
func (a *auth) cookie(id string, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + id + "." + a.mac("session", exp, id, string(a.tokenDigest[:]))
}

// signInID returns the id of v if v is a sign-in cookie of ours that has
// not expired at now.
func (a *auth) signInID(v string, now time.Time) (string, bool) {
	exp, rest, _ := strings.Cut(v, ".")
	id, mac, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return "", false
	}
	return id, hmac.Equal([]byte(mac), []byte(a.mac("session", exp, id, string(a.tokenDigest[:]))))
}

// csrf is the CSRF token of a sign-in (its cookie).
func (a *auth) csrf(signIn string) string { return a.mac("csrf", signIn) }

func (a *auth) validCSRF(signIn, presented string) bool {
	return hmac.Equal([]byte(presented), []byte(a.csrf(signIn)))
}

// liveSignIn returns the request's sign-in cookie value if it is a live
// sign-in, "" if it is not (none, forged, expired, signed out), or the
// error of asking the batcher.
func (c *Console) liveSignIn(r *http.Request) (string, error) {
	ck, err := r.Cookie(signInCookie)
	if err != nil {
		return "", nil
	}
	id, ok := c.auth.signInID(ck.Value, time.Now())
	if !ok {
		return "", nil
	}
	got, err := c.admin.GetConsoleSession(r.Context(), &v1.GetConsoleSessionRequest{SessionId: id})
	if err != nil || !got.GetLive() {
		return "", err
	}
	return ck.Value, nil
}

// signedInKey carries a request's checked sign-in to the pages it renders.
type signedInKey struct{}

func withSignIn(r *http.Request, signIn string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), signedInKey{}, signIn))
}

// signInOf is the sign-in the request's wrapper checked, or "".
func signInOf(r *http.Request) string {
	s, _ := r.Context().Value(signedInKey{}).(string)
	return s
}

// secureRequest reports whether the browser reached us over TLS (directly
// or through a proxy that says so): only then may cookies be Secure.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setSignInCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: value, Path: "/", MaxAge: maxAge,
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

// signIn checks the token and sets the sign-in cookie. A form posted here
// needs no CSRF token: it carries the token itself, which a forger lacks.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if c.auth == nil {
		c.refuse(w, r, http.StatusForbidden, "Read-only console",
			"the console runs without an admin token (INGESTQ_ADMIN_TOKEN), so there is nothing to sign in to: it only shows the queue")
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
	created, err := c.admin.CreateConsoleSession(r.Context(), &v1.CreateConsoleSessionRequest{Ttl: durationpb.New(c.auth.ttl)})
	if err != nil {
		rf := refusalOf(err)
		c.log.WarnContext(r.Context(), "console sign-in failed: recording the session", "remote", r.RemoteAddr, "code", rf.Code, "error", rf.Message)
		c.refuse(w, r, http.StatusServiceUnavailable, "Sign-in failed", "the sign-in could not be recorded in the queue: "+rf.Message)
		return
	}
	c.setSignInCookie(w, r, c.auth.cookie(created.GetSessionId(), created.GetExpireTime().AsTime()), int(c.auth.ttl/time.Second))
	c.log.InfoContext(r.Context(), "console sign-in", "remote", r.RemoteAddr)
	http.Redirect(w, r, ret, http.StatusSeeOther)
}

// signOut ends the sign-in: in the queue, so that a copy of the cookie
// grants nothing afterwards on any console, and in this browser.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	if id, ok := c.auth.signInID(signInOf(r), time.Now()); ok {
		if _, err := c.admin.EndConsoleSession(r.Context(), &v1.EndConsoleSessionRequest{SessionId: id}); err != nil {
			c.refuse(w, r, http.StatusServiceUnavailable, "Sign-out failed",
				"the session could not be ended in the queue, so it is still valid: "+refusalOf(err).Message+"; try again")
			return
		}
	}
	c.setSignInCookie(w, r, "", -1)
	c.log.InfoContext(r.Context(), "console sign-out", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// signInUnavailable explains a sign-in that could not be checked.
const signInUnavailable = "the session could not be checked in the queue: "

// page wraps a GET page: with a token configured it needs a sign-in (else
// the sign-in page, coming back here afterwards).
func (c *Console) page(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.auth != nil {
			signIn, err := c.liveSignIn(r)
			switch {
			case err != nil:
				c.refuse(w, r, http.StatusServiceUnavailable, "Session check failed", signInUnavailable+refusalOf(err).Message)
				return
			case signIn == "":
				http.Redirect(w, r, "/signin?return="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			r = withSignIn(r, signIn)
		}
		h(w, r)
	}
}

// api wraps a JSON endpoint: with a token configured it needs a sign-in.
func (c *Console) api(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.auth != nil {
			signIn, err := c.liveSignIn(r)
			switch {
			case err != nil:
				writeJSON(w, http.StatusServiceUnavailable, apiError{Code: "Unavailable", Error: signInUnavailable + err.Error()})
				return
			case signIn == "":
				writeJSON(w, http.StatusUnauthorized, apiError{Code: "Unauthenticated", Error: "sign in to the console first (/signin)"})
				return
			}
			r = withSignIn(r, signIn)
		}
		h(w, r)
	}
}

// action wraps a state-changing POST: refused in read-only mode (403),
// without a sign-in (401) and without the sign-in's CSRF token (403).
func (c *Console) action(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c.auth == nil {
			c.refuse(w, r, http.StatusForbidden, "Read-only console",
				"the console runs without an admin token (INGESTQ_ADMIN_TOKEN): it only shows the queue and refuses every action; set a token and sign in to act")
			return
		}
		signIn, err := c.liveSignIn(r)
		if err != nil {
			c.refuse(w, r, http.StatusServiceUnavailable, "Session check failed", signInUnavailable+refusalOf(err).Message)
			return
		}
		if signIn == "" {
			c.refuse(w, r, http.StatusUnauthorized, "Not signed in",
				"sign in with the admin token first: this request carried no valid session (it may have expired or been signed out)")
			return
		}
		r = withSignIn(r, signIn)
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, http.StatusBadRequest, "Bad form", "the form could not be read: "+err.Error())
			return
		}
		if !c.auth.validCSRF(signIn, r.PostForm.Get("csrf")) {
			c.refuse(w, r, http.StatusForbidden, "Missing or wrong CSRF token",
				"the form did not carry this session's CSRF token: reload the page and try again")
			return
		}
		h(w, r)
	}
}
