package spawn

import (
	"errors"
	"testing"

	"github.com/ingestq/ingestq/shared/fetch"
)

func TestFileNameOfASingleFilePayloadIsTheBaseNameOfItsPath(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"https://example.org/deposits/object.zip", "object.zip"},
		{"https://example.org/deposits/report%20final.pdf?download=1#top", "report final.pdf"},
		{"http://127.0.0.1:8080/a/b/c.tar.gz/", "c.tar.gz"},
		{"https://example.org/", ""},
		{"https://example.org", ""},
		{"https://example.org/..", ""},
		{"https://example.org/a/%2e%2e", ""},
		{"https://example.org/nul%00name", ""},
	} {
		got, err := fileNameOf(tc.url)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("fileNameOf(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

func TestOnlyFailuresThatMayPassAreRetried(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&fetch.StatusError{Method: "GET", URL: "http://127.0.0.1/a", Code: 503}, true},
		{&fetch.StatusError{Method: "GET", URL: "http://127.0.0.1/a", Code: 429}, true},
		{&fetch.StatusError{Method: "GET", URL: "http://127.0.0.1/a", Code: 404}, false},
		{&fetch.StatusError{Method: "GET", URL: "http://127.0.0.1/a", Code: 403}, false},
		{errors.Join(errors.New("GET http://169.254.169.254/"), fetch.ErrDenied), false},
		{errors.Join(errors.New("GET ftp://x"), fetch.ErrScheme), false},
		{errors.Join(errors.New("GET http://127.0.0.1/big"), fetch.ErrTooLarge), false},
		{errors.Join(errors.New("GET http://127.0.0.1/slow"), fetch.ErrTimeout), true},
		{errors.New("connection refused"), true},
	} {
		if got := mayPass(tc.err); got != tc.want {
			t.Errorf("mayPass(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
