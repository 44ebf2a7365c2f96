package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Span attribute keys of a job span.
const (
	AttrJobID   attribute.Key = "ingestq.job.id"
	AttrBatchID attribute.Key = "ingestq.batch.id"
	AttrStage   attribute.Key = "ingestq.stage"
)

// traceparentHeader is the W3C header whose value job data stores.
const traceparentHeader = "traceparent"

// Inject returns the W3C traceparent of ctx's span, to store in a
// submission's or job's traceparent field, or "" when ctx has no valid span.
func Inject(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get(traceparentHeader)
}

// Extract returns ctx with the span context of traceparent as its remote
// parent. An empty or malformed traceparent returns ctx unchanged: a lost
// trace must never stop a job.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{traceparentHeader: traceparent}
	extracted := propagation.TraceContext{}.Extract(ctx, carrier)
	if !trace.SpanContextFromContext(extracted).IsRemote() {
		return ctx
	}
	return extracted
}

// StartJobSpan starts the span of one stage's work on job jid of batch bid,
// named "<stage> <jid>" (e.g. "estimating jid0000000001"), as a child of the
// job's stored traceparent, so every stage's span joins the submission's
// trace. The returned ctx also carries jid and bid for log lines (WithJob).
// Without a usable traceparent the span is a child of ctx's span, if any.
// The caller ends the span.
func StartJobSpan(ctx context.Context, tracer trace.Tracer, stage, jid, bid, traceparent string) (context.Context, trace.Span) {
	ctx = WithJob(Extract(ctx, traceparent), jid, bid)
	return tracer.Start(ctx, stage+" "+jid,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrJobID.String(jid), AttrBatchID.String(bid), AttrStage.String(stage)),
	)
}
