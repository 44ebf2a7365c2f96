// Package multihook lets the queue's own tests stand between a session and
// the server for its multis: a test loses an answer with it, applies a
// multi without telling, or stops a writer dead at a chosen request, as a
// server that goes away does, at a point a real fault cannot be aimed at.
// Being internal to shared/queue, nothing outside the queue's packages and
// their tests can reach it: it is no part of a session's API.
package multihook

import (
	"context"

	"github.com/go-zookeeper/zk"
)

// Send sends a multi's operations as the session would.
type Send func(ops []any) ([]zk.MultiResponse, error)

// Hook sends each multi request of a session in place of the session;
// send is the session's own way.
type Hook func(ops []any, send Send) ([]zk.MultiResponse, error)

type key struct{}

// With returns ctx carrying h: a session connected with it
// (session.Connect) sends its multis through h.
func With(ctx context.Context, h Hook) context.Context { return context.WithValue(ctx, key{}, h) }

// From is the hook ctx carries (nil: none).
func From(ctx context.Context) Hook {
	h, _ := ctx.Value(key{}).(Hook)
	return h
}
