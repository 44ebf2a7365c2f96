package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Keys of the attributes the log handler adds from a record's context.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
	LogKeyJobID   = "job_id"
	LogKeyBatchID = "batch_id"
)

type jobContextKey struct{}

type jobIDs struct {
	jid, bid string
}

// WithJob returns ctx carrying job id jid and batch id bid, which log lines
// written with it show as job_id and batch_id.
func WithJob(ctx context.Context, jid, bid string) context.Context {
	return context.WithValue(ctx, jobContextKey{}, jobIDs{jid: jid, bid: bid})
}

// NewLogger returns a JSON-lines logger writing to w at level and above,
// whose lines carry the trace and job of the context they are logged with.
func NewLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(NewContextHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
}

// ParseLevel parses "debug", "info", "warn" or "error" (any case, with an
// optional offset such as "info+2"); "" means info, so an unset setting is
// not an error.
func ParseLevel(s string) (slog.Level, error) {
	if s == "" {
		return slog.LevelInfo, nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("telemetry: log level %q (want debug, info, warn or error): %w", s, err)
	}
	return level, nil
}

// contextHandler adds trace_id, span_id, job_id and batch_id from a record's
// context. It keeps the inner handler as it was before any WithAttrs or
// WithGroup, so that under a group the context attributes can still be put
// at the top level of the line, where log queries look for them.
type contextHandler struct {
	root    slog.Handler
	steps   []func(slog.Handler) slog.Handler
	grouped bool         // some step is a WithGroup
	current slog.Handler // root with steps applied
}

// NewContextHandler wraps inner so that records logged with a context carry
// its trace and job ids (see WithJob).
func NewContextHandler(inner slog.Handler) slog.Handler {
	return &contextHandler{root: inner, current: inner}
}

func (h *contextHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.current.Enabled(ctx, level)
}

func (h *contextHandler) Handle(ctx context.Context, r slog.Record) error {
	attrs := contextAttrs(ctx)
	if len(attrs) == 0 {
		return h.current.Handle(ctx, r)
	}
	if !h.grouped {
		r = r.Clone()
		r.AddAttrs(attrs...)
		return h.current.Handle(ctx, r)
	}
	inner := h.root.WithAttrs(attrs)
	for _, step := range h.steps {
		inner = step(inner)
	}
	return inner.Handle(ctx, r)
}

func (h *contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(func(inner slog.Handler) slog.Handler { return inner.WithAttrs(attrs) }, false)
}

func (h *contextHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(inner slog.Handler) slog.Handler { return inner.WithGroup(name) }, true)
}

func (h *contextHandler) with(step func(slog.Handler) slog.Handler, isGroup bool) *contextHandler {
	steps := make([]func(slog.Handler) slog.Handler, len(h.steps), len(h.steps)+1)
	copy(steps, h.steps)
	return &contextHandler{
		root:    h.root,
		steps:   append(steps, step),
		grouped: h.grouped || isGroup,
		current: step(h.current),
	}
}

// contextAttrs returns the trace and job attributes ctx carries.
func contextAttrs(ctx context.Context) []slog.Attr {
	var attrs []slog.Attr
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		attrs = append(attrs,
			slog.String(LogKeyTraceID, sc.TraceID().String()),
			slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	if ids, ok := ctx.Value(jobContextKey{}).(jobIDs); ok {
		if ids.jid != "" {
			attrs = append(attrs, slog.String(LogKeyJobID, ids.jid))
		}
		if ids.bid != "" {
			attrs = append(attrs, slog.String(LogKeyBatchID, ids.bid))
		}
	}
	return attrs
}
