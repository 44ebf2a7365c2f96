// Package callback tells a collection's callback URL that a job ended: an
// HTTP POST of a JSON result, retried with backoff when the receiver fails
// or cannot be reached.
package callback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Result is the JSON body of a callback.
type Result struct {
	JobID       string   `json:"jid"`
	BatchID     string   `json:"bid"`
	ARK         string   `json:"ark"`
	LocalIDs    []string `json:"local_ids"`
	Status      string   `json:"status"`
	Version     int      `json:"version,omitempty"` // 0 (left out) when the job does not say
	ManifestURL string   `json:"manifest_url"`
}

// tracerName is the instrumentation scope of the callback's spans.
const tracerName = "github.com/ingestq/ingestq/services/notifier/internal/callback"

// Poster posts results under a retry policy.
type Poster struct {
	Client *fetch.Client
	// Retry says how many times a POST is tried in all when its failures
	// may pass, and how long the attempts wait between them.
	Retry retry.Policy
	// Timeout bounds one attempt, answer included.
	Timeout time.Duration
}

// ErrRefused is a call that would be refused again as it is: the
// receiver's answer refused it (4xx other than 408 and 429), or the
// callbacks' address policy does not allow its URL (INGESTQ_CALLBACK_ALLOW,
// _DENY).
var ErrRefused = errors.New("refused, not retried")

// Post delivers r to url. It returns nil once the receiver answered 2xx;
// otherwise an error saying what the last attempt met and how many were
// made, wrapping ErrRefused for an answer not worth retrying.
func (p Poster) Post(ctx context.Context, url string, r Result) error {
	if r.LocalIDs == nil {
		r.LocalIDs = []string{} // a JSON array, not null
	}
	attempts, err := p.Retry.Do(ctx, mayPass, func(int) error { return p.attempt(ctx, url, r) })
	var se *fetch.StatusError
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("callback %s: %w", url, context.Cause(ctx))
	case errors.As(err, &se) && !fetch.RetryableStatus(se.Code):
		return fmt.Errorf("callback %s: HTTP %d %s (%w)", url, se.Code, http.StatusText(se.Code), ErrRefused)
	case notAllowed(err):
		return fmt.Errorf("callback %s: %s (%w)", url, reason(err), ErrRefused)
	}
	return fmt.Errorf("callback %s: %s after %d attempts", url, reason(err), attempts)
}

// mayPass reports whether a failed POST is worth another attempt: any
// failure but an answer refusing the call as it is, or a URL the policy
// does not allow.
func mayPass(err error) bool {
	var se *fetch.StatusError
	return (!errors.As(err, &se) || fetch.RetryableStatus(se.Code)) && !notAllowed(err)
}

// notAllowed reports whether the callbacks' policy refused the URL.
func notAllowed(err error) bool {
	return errors.Is(err, fetch.ErrDenied) || errors.Is(err, fetch.ErrScheme)
}

func (p Poster) attempt(ctx context.Context, url string, r Result) error {
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	// Each attempt is a span of the job's trace (the notifier's step span
	// in ctx), and the receiver gets its traceparent to continue it.
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "callback POST",
		trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("callback: encoding the result: %w", err)
	}
	// The receiver may be called again with the same result (a notifier
	// that stopped after the delivery and before its commit, a requeue):
	// the key is the same each time, the job's id, for it to deduplicate.
	header := http.Header{"Idempotency-Key": {r.JobID}}
	if tp := telemetry.Inject(ctx); tp != "" {
		header.Set("traceparent", tp)
	}
	resp, err := p.Client.Post(ctx, url, "application/json", body, header)
	if err != nil {
		span.SetStatus(codes.Error, reason(err))
		return err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	// The answer's body says nothing we use; a little is read so the
	// connection can be reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return resp.Body.Close()
}

// reason is what a failed attempt met, without fetch's repetition of the
// method and URL that the caller's message names already.
func reason(err error) string {
	var se *fetch.StatusError
	if errors.As(err, &se) {
		return fmt.Sprintf("HTTP %d %s", se.Code, http.StatusText(se.Code))
	}
	return err.Error()
}
