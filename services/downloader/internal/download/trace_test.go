package download

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestEachResumeAndRestartIsAnEventOfTheJobsSpan: a file cut twice, then
// answered whole to a range, leaves two "download resumed" events naming
// where they continued and one "download restarted" saying why.
func TestEachResumeAndRestartIsAnEventOfTheJobsSpan(t *testing.T) {
	content := randomBytes(5<<20, 11)
	d := newDepositor(t, content)
	d.set(func(d *depositor) { d.cutEvery = 3 << 19 }) // 1.5 MiB
	inner := d.Config.Handler
	n := 0
	d.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n++; n == 4 {
			d.set(func(d *depositor) { d.ignoreRange, d.cutEvery = true, 0 })
		}
		inner.ServeHTTP(w, r)
	})
	spans := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test").Start(context.Background(), "downloading jid1")
	root, _ := openRoot(t)
	if _, err := resumingFetcher().Fetch(ctx, root, "producer/f", File{URL: d.URL + "/f", Size: int64(len(content)), HashAlgorithm: "sha256", HashValue: sha256Hex(content)}); err != nil {
		t.Fatal(err)
	}
	span.End()
	var got []string
	for _, e := range spans.Ended()[0].Events() {
		s := e.Name
		for _, a := range e.Attributes {
			s += fmt.Sprintf(" %s=%s", a.Key, a.Value.String())
		}
		got = append(got, s)
	}
	want := []string{
		"download resumed file=producer/f offset=1572864",
		"download resumed file=producer/f offset=3145728",
		"download restarted file=producer/f reason=the server ignored the range from byte 4718592 (HTTP 200)",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events\n %q\nwant\n %q", got, want)
	}
}
