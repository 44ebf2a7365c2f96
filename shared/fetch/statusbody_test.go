package fetch_test

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
)

// A refusal's body is read under the same bounds as any body: a server
// that sends an error status and then nothing, or an endless trickle,
// cannot hold the request, whose caller may have no deadline (a download).
func TestAStatusErrorsBodyIsCutAtTheBodyBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy fetch.Policy
		rest   func(t *testing.T, w http.ResponseWriter, r *http.Request)
	}{
		{"headers then nothing", fetch.Policy{IdleTimeout: 200 * time.Millisecond},
			func(t *testing.T, w http.ResponseWriter, r *http.Request) { stall(t, r) }},
		{"a trickle slower than the MinRate", fetch.Policy{IdleTimeout: time.Minute, MinRate: 1000, RateWindow: 200 * time.Millisecond},
			func(t *testing.T, w http.ResponseWriter, r *http.Request) { trickle(50*time.Millisecond)(w, r) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000000")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "busy")
				w.(http.Flusher).Flush()
				tc.rest(t, w, r)
			})
			got := make(chan error, 1)
			go func() {
				// The caller's context has no deadline, as a download's.
				_, err := fetch.New(local(tc.policy)).Get(t.Context(), s.URL+"/refused")
				got <- err
			}()
			select {
			case err := <-got:
				var se *fetch.StatusError
				if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable || string(se.Body[:min(len(se.Body), 4)]) != "busy" {
					t.Fatalf("Get error = %v; want HTTP 503 keeping the start of the answer", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Get still reading the refusal's body after a minute: it is not bounded")
			}
		})
	}
}
