package fetch

import (
	"errors"
	"fmt"
	"testing"
)

func TestRetryableTellsPassingFailuresFromLastingOnes(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"server error", &StatusError{Method: "GET", URL: "http://h/x", Code: 503}, true},
		{"request timeout", &StatusError{Method: "GET", URL: "http://h/x", Code: 408}, true},
		{"too many requests", &StatusError{Method: "GET", URL: "http://h/x", Code: 429}, true},
		{"not found", &StatusError{Method: "GET", URL: "http://h/x", Code: 404}, false},
		{"forbidden, wrapped", fmt.Errorf("fetching: %w", &StatusError{Method: "GET", URL: "http://h/x", Code: 403}), false},
		{"denied address", fmt.Errorf("GET http://169.254.169.254/: %w", ErrDenied), false},
		{"wrong scheme", ErrScheme, false},
		{"too large", ErrTooLarge, false},
		{"too slow", fmt.Errorf("reading the body: %w", ErrTooSlow), false},
		{"connection reset", errors.New("read tcp: connection reset by peer"), true},
		{"timeout", ErrTimeout, true},
		{"no error", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Retryable(tt.err); got != tt.want {
				t.Errorf("Retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
