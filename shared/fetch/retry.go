package fetch

import (
	"errors"
	"net/http"
)

// RetryableStatus says whether an HTTP status may go away when the request
// is repeated: the server is in trouble (5xx), timed out (408) or asks the
// caller to slow down (429).
func RetryableStatus(code int) bool {
	return code >= 500 || code == http.StatusRequestTimeout || code == http.StatusTooManyRequests
}

// Retryable tells failures worth another attempt (the network, a timeout, a
// server in trouble) from those that will not change: a refused address or
// scheme, a document over its size limit, any other HTTP status, and a body
// slower than the MinRate (measured over a whole window already, it is the
// server's pace, and retried it would hold a worker as long again).
func Retryable(err error) bool {
	if err == nil || errors.Is(err, ErrDenied) || errors.Is(err, ErrScheme) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrTooSlow) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return RetryableStatus(se.Code)
	}
	return true
}
