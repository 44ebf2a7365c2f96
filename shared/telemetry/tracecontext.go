package telemetry

import (
	"context"
	"fmt"
	"strings"

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
// job's stored traceparent, so every stage's span joins the job's trace. The returned ctx also carries jid and bid for log lines (WithJob).
// Without a usable traceparent the span is a child of ctx's span, if any.
// The caller ends the span.
func StartJobSpan(ctx context.Context, tracer trace.Tracer, stage, jid, bid, traceparent string) (context.Context, trace.Span) {
	ctx = WithJob(Extract(ctx, traceparent), jid, bid)
	return tracer.Start(ctx, stage+" "+jid,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrJobID.String(jid), AttrBatchID.String(bid), AttrStage.String(stage)),
	)
}

// StartJobTrace starts the root span of a new job's own trace, named
// "job <bid>/<entry>", linked to ctx's span (the batch's): one trace per job
// keeps a large batch's tens of thousands of stage spans out of one trace no
// backend can show, while the link leads from each job to its batch. Store
// Inject of the returned ctx with the job; name the span with the job's id
// once it has one (NameJobTrace). The caller ends the span.
func StartJobTrace(ctx context.Context, tracer trace.Tracer, bid string, entry int) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(AttrBatchID.String(bid), AttrStage.String("created"), attrBatchEntry.Int(entry)),
	}
	if batch := trace.SpanContextFromContext(ctx); batch.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: batch, Attributes: []attribute.KeyValue{AttrBatchID.String(bid)}}))
	}
	return tracer.Start(ctx, fmt.Sprintf("job %s/%d", bid, entry), opts...)
}

// NameJobTrace names a job's root span (StartJobTrace) after the job id the
// queue allocated, "created <jid>", and tags it with that id.
func NameJobTrace(span trace.Span, jid string) {
	span.SetName("created " + jid)
	span.SetAttributes(AttrJobID.String(jid))
}

// attrBatchEntry is the job's row in its batch's payload.
const attrBatchEntry attribute.Key = "ingestq.batch.entry"

// TraceID is the trace id of a W3C traceparent, lower-case hex, or "" when
// the traceparent is malformed or its trace id is all zeros.
func TraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0") == "" {
		return ""
	}
	for _, r := range parts[1] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return ""
		}
	}
	return parts[1]
}

// TraceURL is the link to the trace of traceparent in a tracing backend:
// template with "{trace_id}" replaced by its trace id (INGESTQ_TRACE_URL,
// e.g. https://tracing.example/trace/{trace_id}). "" when either is empty.
func TraceURL(template, traceparent string) string {
	id := TraceID(traceparent)
	if template == "" || id == "" {
		return ""
	}
	return strings.ReplaceAll(template, "{trace_id}", id)
}
