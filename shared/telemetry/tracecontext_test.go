package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	testJID = "jid0000000001"
	testBID = "bid0000000001"
)

// newTestTracer returns a tracer whose spans land in the returned exporter
// as soon as they end.
func newTestTracer(t *testing.T) (trace.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	return provider.Tracer("test"), exporter
}

func TestJobSpansOfTwoStageProcessesJoinTheSubmissionTrace(t *testing.T) {
	// The submitting process: its span's traceparent is what ZooKeeper keeps.
	submitTracer, submitExporter := newTestTracer(t)
	_, submission := submitTracer.Start(t.Context(), "submit batch")
	storedTraceparent := Inject(trace.ContextWithSpan(t.Context(), submission))
	submission.End()
	if storedTraceparent == "" {
		t.Fatal("Inject returned no traceparent for the submission span")
	}

	stages := []struct {
		stage   string
		service string
	}{
		{stage: "estimating", service: "estimator"},
		{stage: "provisioning", service: "provisioner"},
	}
	spansByID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range submitExporter.GetSpans() {
		spansByID[s.SpanContext.SpanID()] = s
	}
	var stageSpans []tracetest.SpanStub
	for _, st := range stages {
		// Each stage is its own process: its own Telemetry and exporter,
		// and nothing shared with the submitter but the stored string.
		exporter := tracetest.NewInMemoryExporter()
		tel, err := Setup(t.Context(), st.service, "v0.0.0", WithSpanExporter(exporter))
		if err != nil {
			t.Fatalf("Setup %s: %v", st.service, err)
		}
		_, span := StartJobSpan(context.Background(), tel.TracerProvider.Tracer(st.service), st.stage, testJID, testBID, storedTraceparent)
		span.End()
		// Flush, not Shutdown: the in-memory exporter forgets its spans on
		// Shutdown.
		if err := tel.TracerProvider.ForceFlush(t.Context()); err != nil {
			t.Fatalf("ForceFlush %s: %v", st.service, err)
		}
		got := exporter.GetSpans()
		shutdown(t, tel)
		if len(got) != 1 {
			t.Fatalf("%s exported %d spans, want 1", st.service, len(got))
		}
		stageSpans = append(stageSpans, got[0])
		spansByID[got[0].SpanContext.SpanID()] = got[0]
	}

	for i, st := range stages {
		span := stageSpans[i]
		t.Run(st.stage, func(t *testing.T) {
			if want := st.stage + " " + testJID; span.Name != want {
				t.Errorf("span name = %q, want %q", span.Name, want)
			}
			if span.SpanContext.TraceID() != submission.SpanContext().TraceID() {
				t.Errorf("trace id = %s, want the submission's %s", span.SpanContext.TraceID(), submission.SpanContext().TraceID())
			}
			if !span.Parent.IsRemote() {
				t.Error("parent is not marked remote, but it came from another process")
			}
			wantAttrs := map[attribute.Key]string{AttrJobID: testJID, AttrBatchID: testBID, AttrStage: st.stage}
			for _, kv := range span.Attributes {
				if want, ok := wantAttrs[kv.Key]; ok {
					if kv.Value.AsString() != want {
						t.Errorf("attribute %s = %q, want %q", kv.Key, kv.Value.AsString(), want)
					}
					delete(wantAttrs, kv.Key)
				}
			}
			if len(wantAttrs) != 0 {
				t.Errorf("missing attributes %v", wantAttrs)
			}
			if !parentChainReaches(spansByID, span, submission.SpanContext().SpanID()) {
				t.Errorf("parent chain of %q does not reach the submission span", span.Name)
			}
		})
	}
}

// parentChainReaches says whether following span's parents through spans
// arrives at the span with id target.
func parentChainReaches(spans map[trace.SpanID]tracetest.SpanStub, span tracetest.SpanStub, target trace.SpanID) bool {
	for range len(spans) {
		if !span.Parent.IsValid() {
			return false
		}
		if span.Parent.SpanID() == target {
			return true
		}
		parent, ok := spans[span.Parent.SpanID()]
		if !ok {
			return false
		}
		span = parent
	}
	return false
}

func TestInjectExtractRoundTripKeepsTheSpanContext(t *testing.T) {
	tracer, _ := newTestTracer(t)
	tests := []struct {
		name    string
		sampled bool
	}{
		{name: "sampled", sampled: true},
		{name: "not sampled", sampled: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, span := tracer.Start(t.Context(), "submit")
			defer span.End()
			sc := span.SpanContext().WithTraceFlags(trace.TraceFlags(0).WithSampled(tt.sampled))
			ctx = trace.ContextWithSpanContext(ctx, sc)

			traceparent := Inject(ctx)
			got := trace.SpanContextFromContext(Extract(context.Background(), traceparent))

			if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || got.IsSampled() != tt.sampled {
				t.Errorf("Extract(Inject) = %s/%s sampled %v, want %s/%s sampled %v",
					got.TraceID(), got.SpanID(), got.IsSampled(), sc.TraceID(), sc.SpanID(), tt.sampled)
			}
			if !got.IsRemote() {
				t.Error("extracted span context is not remote")
			}
		})
	}
}

func TestInjectWithoutSpanReturnsEmpty(t *testing.T) {
	if got := Inject(context.Background()); got != "" {
		t.Errorf("Inject(no span) = %q, want empty", got)
	}
}

func TestExtractIgnoresUnusableTraceparent(t *testing.T) {
	tracer, _ := newTestTracer(t)
	tests := []struct {
		name        string
		traceparent string
	}{
		{name: "empty", traceparent: ""},
		{name: "garbage", traceparent: "not a traceparent"},
		{name: "truncated", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba9"},
		{name: "all-zero trace id", traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{name: "all-zero span id", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		{name: "forbidden version ff", traceparent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "upper-case hex", traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, span := tracer.Start(t.Context(), "current work")
			defer span.End()

			if got := Extract(ctx, tt.traceparent); got != ctx {
				t.Errorf("Extract(%q) changed the context to span %s", tt.traceparent, trace.SpanContextFromContext(got).SpanID())
			}
		})
	}
}

func TestStartJobSpanWithUnusableTraceparentStartsANewTrace(t *testing.T) {
	tracer, exporter := newTestTracer(t)
	ctx, span := StartJobSpan(context.Background(), tracer, "downloading", testJID, testBID, "garbage")
	span.End()

	spans := exporter.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("got %d spans, want 1", len(spans))
	}
	if !spans[0].SpanContext.IsValid() || spans[0].Parent.IsValid() {
		t.Errorf("span %s has parent %s, want a valid root span", spans[0].SpanContext.SpanID(), spans[0].Parent.SpanID())
	}
	if attrs := contextAttrs(ctx); len(attrs) != 4 {
		t.Errorf("context carries log attributes %v, want trace, span, job and batch ids", attrs)
	}
}
