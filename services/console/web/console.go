// Package web serves the operator console: the queue, its batches and jobs
// as server-rendered HTML pages, with the admin actions one click away.
// Every read and every action is a call of the batcher's AdminService over
// gRPC, with the admin token, so that the console can do exactly what
// grpcurl can and refuses what the admin RPCs refuse, for the same reasons.
// The workers table's controls call each stage replica's StageService.
//
// Without an admin token the console is read-only. With one, an operator
// signs in by entering it once; every state-changing request is then a POST
// carrying a CSRF token. Pages work without JavaScript; a small script
// (static/console.js) asks before the deletions that need a warning and keeps
// the figures of an open page current by polling a JSON endpoint.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// DefaultListen is where the console listens unless told otherwise
// (INGESTQ_CONSOLE_LISTEN): the address its docs, make up and make demo
// give.
const DefaultListen = "127.0.0.1:8401"

// Defaults of Options.
const (
	DefaultSignInTTL      = 12 * time.Hour
	DefaultRequestTimeout = 2 * time.Minute
	DefaultPoll           = 2 * time.Second
	// DefaultStageTimeout bounds a pause or resume call to a stage
	// replica: a healthy one answers at once, so an operator waiting
	// longer learns sooner that it does not answer.
	DefaultStageTimeout = 10 * time.Second
)

// maxFormBytes bounds a POSTed form: the largest field is an admin message
// (1 KiB); anything much larger is not a form of ours.
const maxFormBytes = 64 << 10

// Options configure a Console.
type Options struct {
	// Batcher is the batcher's gRPC address: every read and action is a
	// call of its AdminService.
	Batcher string
	// BatcherCredentials dial the batcher (nil: plaintext).
	BatcherCredentials credentials.TransportCredentials
	// Token is the admin token (INGESTQ_ADMIN_TOKEN), sent with every call;
	// empty makes the console read-only.
	Token string
	// SignInKey signs the sign-in cookies (ReadSignInKey reads it from
	// INGESTQ_CONSOLE_KEY_FILE): every console given the same key accepts
	// the sign-ins the others made, so a sign-in holds whichever replica
	// a request reaches and across restarts. Nil: a random key of this
	// process, whose sign-ins end with it and hold on it alone.
	SignInKey []byte
	// StageCredentials dial the stage replicas' StageService for the
	// workers table's controls (plaintext: insecure.NewCredentials()); nil
	// turns the controls off.
	StageCredentials credentials.TransportCredentials
	// Logger receives one line per action and per failed request.
	Logger *slog.Logger
	// SignInTTL is how long a sign-in lasts (default 12h).
	SignInTTL time.Duration
	// RequestTimeout bounds the admin calls of one request (default 2m).
	RequestTimeout time.Duration
	// Poll is how often an open page refreshes its figures (default 2s).
	Poll time.Duration
	// StageTimeout bounds a pause or resume call to a stage replica
	// (default 10s); a drain waits drainWait for the jobs in flight.
	StageTimeout time.Duration
}

// Console is the console's HTTP handler.
type Console struct {
	batcher *grpc.ClientConn
	admin   v1.AdminServiceClient
	auth    *auth // nil: read-only
	log     *slog.Logger
	timeout time.Duration
	poll    time.Duration
	pages   map[string]*template.Template
	// stageCreds and token reach the stage replicas (nil: controls off).
	stageCreds   credentials.TransportCredentials
	token        string
	stageTimeout time.Duration
	handler      http.Handler
}

// New builds a Console. It dials nothing yet: the batcher is reached at
// the first request, and again after it was away.
func New(opts Options) (*Console, error) {
	if opts.Batcher == "" {
		return nil, errors.New("console: no batcher address")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	creds := opts.BatcherCredentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	c := &Console{
		log:          opts.Logger,
		timeout:      orDefault(opts.RequestTimeout, DefaultRequestTimeout),
		poll:         orDefault(opts.Poll, DefaultPoll),
		stageCreds:   opts.StageCredentials,
		token:        opts.Token,
		stageTimeout: orDefault(opts.StageTimeout, DefaultStageTimeout),
	}
	conn, err := grpc.NewClient(opts.Batcher, grpc.WithTransportCredentials(creds), grpc.WithUnaryInterceptor(c.bearer))
	if err != nil {
		return nil, fmt.Errorf("console: the batcher at %s: %w", opts.Batcher, err)
	}
	c.batcher, c.admin = conn, v1.NewAdminServiceClient(conn)
	if opts.Token != "" {
		a, err := newAuth(opts.Token, opts.SignInKey, orDefault(opts.SignInTTL, DefaultSignInTTL))
		if err != nil {
			conn.Close()
			return nil, err
		}
		c.auth = a
	}
	pages, err := parsePages()
	if err != nil {
		conn.Close()
		return nil, err
	}
	c.pages = pages
	c.handler = c.routes()
	return c, nil
}

// bearer sends the admin token with every call, as grpcurl's -H does.
func (c *Console) bearer(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// Close closes the connection to the batcher.
func (c *Console) Close() error { return c.batcher.Close() }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// ReadOnly reports whether the console refuses every action (no token).
func (c *Console) ReadOnly() bool { return c.auth == nil }

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))

	mux.HandleFunc("GET /signin", c.signInPage)
	mux.HandleFunc("POST /signin", c.signIn)
	mux.HandleFunc("POST /signout", c.action(c.signOut))

	mux.HandleFunc("GET /{$}", c.page(c.queuePage))
	mux.HandleFunc("GET /batches", c.page(c.batchesPage))
	mux.HandleFunc("GET /batches/{bid}", c.page(c.batchPage))
	mux.HandleFunc("GET /jobs", c.page(c.jobsPage))
	mux.HandleFunc("GET /jobs/{jid}", c.page(c.jobPage))
	mux.HandleFunc("GET /fsck", c.page(c.fsckPage))
	mux.HandleFunc("GET /collections", c.page(c.collectionsPage))

	mux.HandleFunc("GET /api/queue", c.api(c.liveQueue))
	mux.HandleFunc("GET /api/batches/{bid}", c.api(c.liveBatch))
	mux.HandleFunc("GET /api/jobs/{jid}", c.api(c.liveJob))

	mux.HandleFunc("POST /queue/{action}", c.action(c.queueAction))
	mux.HandleFunc("POST /collections/{action}", c.action(c.collectionAction))
	mux.HandleFunc("POST /batches/{bid}/{action}", c.action(c.batchAction))
	mux.HandleFunc("POST /jobs/{jid}/{action}", c.action(c.jobAction))
	mux.HandleFunc("POST /fsck", c.action(c.fsck))
	mux.HandleFunc("POST /bulk", c.action(c.bulk))
	mux.HandleFunc("POST /workers/{id}/{action}", c.action(c.workerAction))
	mux.HandleFunc("POST /verify", c.action(c.verify))
	return c.secure(mux)
}

// contentSecurityPolicy allows only the console's own script, style and
// requests: no inline script, no framing, forms post only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the security headers on every answer (errors of the mux
// included), turns a panic into a 500 and bounds each request's work.
func (c *Console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				c.log.ErrorContext(r.Context(), "panic in console request", "method", r.Method, "path", r.URL.Path,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
