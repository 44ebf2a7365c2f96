package fetch_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
)

func TestGetFromContinuesABodyOrAnswersTheWholeChangedFile(t *testing.T) {
	content := "0123456789abcdefghij"
	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	etag := `"v1"`
	s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/etag" {
			w.Header().Set("ETag", etag)
		}
		// Go's own file serving: Range, If-Range, 206 and 416 as the RFC says.
		http.ServeContent(w, r, "f", modified, strings.NewReader(content))
	})
	c := fetch.New(local(fetch.Policy{}))
	first, err := c.Get(t.Context(), s.URL+"/etag")
	if err != nil {
		t.Fatal(err)
	}
	first.Body.Close()
	if v := fetch.Validator(first); v != etag {
		t.Fatalf("Validator = %q, want the strong ETag %q", v, etag)
	}
	for _, tc := range []struct {
		name, path, validator string
		offset                int64
		status                int
		body                  string
		first, complete       int64
	}{
		{"same ETag: the rest", "/etag", etag, 7, http.StatusPartialContent, content[7:], 7, 20},
		{"same Last-Modified: the rest", "/date", modified.Format(http.TimeFormat), 15, http.StatusPartialContent, content[15:], 15, 20},
		{"no validator: the rest", "/date", "", 3, http.StatusPartialContent, content[3:], 3, 20},
		{"another ETag: the whole file", "/etag", `"v0"`, 7, http.StatusOK, content, 0, 0},
		{"an older date: the whole file", "/date", modified.Add(-time.Hour).Format(http.TimeFormat), 7, http.StatusOK, content, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.GetFrom(t.Context(), s.URL+tc.path, tc.offset, tc.validator)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || string(body) != tc.body {
				t.Fatalf("HTTP %d %q; want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if tc.status != http.StatusPartialContent {
				return
			}
			first, last, complete, err := fetch.ContentRange(resp)
			if err != nil || first != tc.first || last != 19 || complete != tc.complete {
				t.Errorf("ContentRange = %d-%d/%d, %v; want %d-19/%d", first, last, complete, err, tc.first, tc.complete)
			}
		})
	}
	t.Run("past the end: 416", func(t *testing.T) {
		_, err := c.GetFrom(t.Context(), s.URL+"/etag", 20, etag)
		var se *fetch.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusRequestedRangeNotSatisfiable {
			t.Fatalf("GetFrom past the end: %v, want a StatusError 416", err)
		}
	})
}

func TestValidatorPrefersAStrongETagToTheDate(t *testing.T) {
	for _, tc := range []struct {
		etag, modified, want string
	}{
		{`"abc"`, "Mon, 02 Jan 2026 03:04:05 GMT", `"abc"`},
		{`W/"abc"`, "Mon, 02 Jan 2026 03:04:05 GMT", "Mon, 02 Jan 2026 03:04:05 GMT"},
		{"", "Mon, 02 Jan 2026 03:04:05 GMT", "Mon, 02 Jan 2026 03:04:05 GMT"},
		{`W/"abc"`, "", ""},
		{"", "", ""},
	} {
		resp := &http.Response{Header: http.Header{}}
		if tc.etag != "" {
			resp.Header.Set("ETag", tc.etag)
		}
		if tc.modified != "" {
			resp.Header.Set("Last-Modified", tc.modified)
		}
		if got := fetch.Validator(resp); got != tc.want {
			t.Errorf("ETag %q, Last-Modified %q: Validator %q, want %q", tc.etag, tc.modified, got, tc.want)
		}
	}
}

func TestContentRangeReadsOneRangeAndRefusesTheRest(t *testing.T) {
	for _, tc := range []struct {
		header                string
		first, last, complete int64
		ok                    bool
	}{
		{"bytes 0-9/10", 0, 9, 10, true},
		{"bytes 100-199/*", 100, 199, -1, true},
		{"bytes 5-4/10", 0, 0, 0, false},
		{"bytes 0-10/10", 0, 0, 0, false},
		{"bytes */10", 0, 0, 0, false},
		{"items 0-9/10", 0, 0, 0, false},
		{"bytes -1-9/10", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		resp := &http.Response{Header: http.Header{"Content-Range": {tc.header}}}
		first, last, complete, err := fetch.ContentRange(resp)
		if tc.ok != (err == nil) || (tc.ok && (first != tc.first || last != tc.last || complete != tc.complete)) {
			t.Errorf("%q: %d-%d/%d, %v", tc.header, first, last, complete, err)
		}
		if err != nil && !errors.Is(err, fetch.ErrContentRange) {
			t.Errorf("%q: error %v is not ErrContentRange", tc.header, err)
		}
	}
}
