package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
)

// pageNames are the pages; each is templates/<name>.html with the layout
// and the shared parts.
var pageNames = []string{"queue", "batches", "batch", "jobs", "job", "fsck", "signin", "confirm", "error", "bulk", "collections"}

func parsePages() (map[string]*template.Template, error) {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(templateFiles,
			"templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// view is what every page template gets; Data is the page's own.
type view struct {
	Title    string
	Self     string // this page's address, where an action's form returns to
	Nav      string // the navigation entry to mark current
	ReadOnly bool   // no token configured: no action is offered
	CSRF     string // the sign-in's CSRF token for the forms
	CanAct   bool   // signed in with a token configured
	Flash    *flash
	Live     string // the JSON endpoint the script polls; "" for none
	PollMS   int64
	Data     any
}

// flash is the outcome of the last action, shown once on the next page.
type flash struct {
	Kind string `json:"kind"` // "ok" or "warn"
	Text string `json:"text"`
}

// maxFlashBytes keeps the flash cookie well below the 4 KiB browsers take.
const maxFlashBytes = 2000

func (c *Console) newView(r *http.Request, title, nav string) *view {
	v := &view{Title: title, Self: r.URL.RequestURI(), Nav: nav, ReadOnly: c.auth == nil, PollMS: c.poll.Milliseconds()}
	if c.auth != nil {
		if s := signInOf(r); s != "" {
			v.CanAct = true
			v.CSRF = c.auth.csrf(s)
		}
	}
	return v
}

// takeFlash moves the flash cookie, if any, into v and clears it.
func takeFlash(w http.ResponseWriter, r *http.Request, v *view) {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	data, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		return
	}
	var f flash
	if json.Unmarshal(data, &f) == nil && f.Text != "" {
		v.Flash = &f
	}
}

func setFlash(w http.ResponseWriter, r *http.Request, f flash) {
	if len(f.Text) > maxFlashBytes {
		f.Text = strings.ToValidUTF8(f.Text[:maxFlashBytes], "") + " …"
	}
	data, _ := json.Marshal(f)
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: base64.RawURLEncoding.EncodeToString(data), Path: "/",
		MaxAge: 60, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secureRequest(r)})
}

// render executes a page into a buffer first, so that a template error
// becomes a clean 500 instead of half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, page string, v *view) {
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, v); err != nil {
		c.log.ErrorContext(r.Context(), "console page failed", "page", page, "error", err.Error())
		http.Error(w, "internal error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// errorView is the error page's data.
type errorView struct {
	Code    string // gRPC code name, when the refusal came from the admin API
	Message string
	Back    string
}

// refuse answers an HTML error page.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, code int, title, msg string) {
	v := c.newView(r, title, "")
	v.Data = errorView{Message: msg, Back: backLink(r)}
	c.render(w, r, code, "error", v)
}

// fail answers an admin refusal: its HTTP status, its gRPC code and message.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	rf := refusalOf(err)
	if rf.HTTP >= 500 {
		c.log.WarnContext(r.Context(), "console request failed", "method", r.Method, "path", r.URL.Path,
			"code", rf.Code, "error", rf.Message)
	}
	v := c.newView(r, http.StatusText(rf.HTTP), "")
	v.Data = errorView{Code: rf.Code, Message: rf.Message, Back: backLink(r)}
	c.render(w, r, rf.HTTP, "error", v)
}

// backLink is where an error page sends the operator back to: the form's
// return page for an action, the queue otherwise.
func backLink(r *http.Request) string {
	if r.Method == http.MethodPost && r.PostForm != nil {
		return safeReturn(r.PostForm.Get("return"), "/")
	}
	return "/"
}

// safeReturn accepts only a path on this console ("/jobs?state=Failed"):
// never another host, scheme or a protocol-relative "//host".
func safeReturn(s, def string) string {
	if s == "" || !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") || strings.ContainsAny(s, "\\\r\n") {
		return def
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return def
	}
	return s
}

// apiError is a JSON endpoint's refusal.
type apiError struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(data)
}

// failJSON answers an admin refusal as JSON.
func failJSON(w http.ResponseWriter, err error) {
	rf := refusalOf(err)
	writeJSON(w, rf.HTTP, apiError{Code: rf.Code, Error: rf.Message})
}
