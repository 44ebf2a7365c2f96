// Package ctxio ends reads when their context ends, so that a long copy
// (a large file, an archive) stops for a job that was lost rather than
// running to its end.
package ctxio

import (
	"context"
	"io"
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
