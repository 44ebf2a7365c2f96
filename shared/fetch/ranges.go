package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// GetFrom returns the response to a GET of url asking for its bytes from
// offset on (Range: bytes=offset-), the rest of a body an earlier answer
// began. With validator set (Validator of that answer) it is sent as
// If-Range, so a server whose file changed meanwhile answers the whole new
// file rather than a range of it. The caller judges the answer: 206 with a
// Content-Range (ContentRange) that continues where it stopped, or 200, the
// whole body (a server that ignores Range, or a file that changed). A
// status other than 2xx is a *StatusError (416: the range is past the
// file's end). The bounds of Get apply.
func (c *Client) GetFrom(ctx context.Context, url string, offset int64, validator string) (*http.Response, error) {
	if offset < 0 {
		return nil, fmt.Errorf("fetch: GET %s: offset %d is negative", redact(url), offset)
	}
	h := http.Header{"Range": {"bytes=" + strconv.FormatInt(offset, 10) + "-"}}
	if validator != "" {
		h.Set("If-Range", validator)
	}
	return c.do(ctx, http.MethodGet, url, nil, "", h)
}

// Validator is what names the representation resp carries, for a later
// If-Range: its ETag when strong (a weak one may not be used there), else
// its Last-Modified; "" when it has neither.
func Validator(resp *http.Response) string {
	if etag := resp.Header.Get("ETag"); etag != "" && !strings.HasPrefix(etag, "W/") {
		return etag
	}
	return resp.Header.Get("Last-Modified")
}

// ErrContentRange: a 206 answer without a Content-Range of one range of
// bytes that can be read.
var ErrContentRange = errors.New("unreadable Content-Range")

// ContentRange reads the Content-Range of a 206 answer, "bytes
// first-last/complete": the first and last byte the body holds and the
// size of the whole file (-1 when the server wrote "*", not knowing it).
func ContentRange(resp *http.Response) (first, last, complete int64, err error) {
	v := resp.Header.Get("Content-Range")
	bad := func() (int64, int64, int64, error) {
		return 0, 0, 0, fmt.Errorf("%w: %q", ErrContentRange, v)
	}
	spec, ok := strings.CutPrefix(v, "bytes ")
	if !ok {
		return bad()
	}
	span, size, ok := strings.Cut(spec, "/")
	if !ok {
		return bad()
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return bad()
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	complete = -1
	var err3 error
	if size != "*" {
		complete, err3 = strconv.ParseInt(size, 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || first < 0 || last < first || (complete >= 0 && last >= complete) {
		return bad()
	}
	return first, last, complete, nil
}
