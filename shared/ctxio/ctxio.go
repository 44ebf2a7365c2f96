// Package ctxio ends reads when their context ends, so that a long copy
// (a large file, an archive) stops for a job that was lost rather than
// running to its end.
package ctxio

import (
	"context"
	"io"
	"time"
)

// Reader reads from r until ctx ends; its reads then fail with
// context.Cause(ctx). A read already under way is not interrupted.
func Reader(ctx context.Context, r io.Reader) io.Reader { return reader{ctx, r} }

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// IdleBound cuts a wait for data that takes longer than After: Read runs
// one read under the bound and, if the read is still waiting when After
// has passed, calls Cut, which must end it (cancel its request, close its
// body). Only the time a read waits counts, so a caller slow to read is
// not cut off. Not for concurrent use.
type IdleBound struct {
	After time.Duration
	Cut   func()
	timer *time.Timer // made by the first Read
}

// Read runs read under the bound.
func (b *IdleBound) Read(read func() (int, error)) (int, error) {
	if b.timer == nil {
		b.timer = time.AfterFunc(b.After, b.Cut)
	} else {
		b.timer.Reset(b.After)
	}
	n, err := read()
	b.timer.Stop()
	return n, err
}

// Stop ends the bound: Cut is not called after it returns.
func (b *IdleBound) Stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
}
