// Package telemetry gives every ingestq process its traces, metrics and logs,
// and carries one job's trace across the seven stage processes through the
// W3C traceparent stored in the job's ZooKeeper data.
//
// # Traces
//
// A batch is one trace: its submission (BatchService/Submit) and the
// batcher's work on it (spawning, reporting). Each job is a trace of its
// own, begun when the batcher creates it ([StartJobTrace], a root span
// linked to the batch's) and continued by every stage's span
// ([StartJobSpan]), the recorder's lease and the calls on it, and the
// notifier's callback request. Health and reflection calls make no span.
//
// # Setup and globals
//
// [Setup] builds a TracerProvider, a MeterProvider and a propagator and
// returns them without touching the otel globals, so tests and libraries can
// run several independent setups in one process. A service's main calls
// [Telemetry.SetGlobal] once, because otelgrpc and other instrumentation
// read the globals unless they are handed providers explicitly.
//
// Traces are exported only when the standard environment asks for it:
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set:
//     OTLP over OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
//     OTEL_EXPORTER_OTLP_PROTOCOL, "grpc" (default) or "http/protobuf";
//     the exporter itself reads the other OTEL_EXPORTER_OTLP_* variables.
//   - OTEL_TRACES_EXPORTER=none: no exporter even with an endpoint.
//   - otherwise no exporter; spans are still created so logs carry trace ids.
//
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the service name
// and version passed to Setup; OTEL_TRACES_SAMPLER and OTEL_BSP_* are read
// by the SDK.
//
// # Metrics
//
// Metrics go to a Prometheus registry of the process's own, served in text
// format by [Telemetry.MetricsHandler] and [Telemetry.ServeMetrics] at
// /metrics. The names are stable; dashboards and alerts depend on them:
//
//	ingestq_jobs_handled_total{stage,outcome}      counter: job steps finished
//	ingestq_step_duration_seconds{stage,outcome}   histogram: one job step's duration
//	ingestq_jobs_in_flight{stage}                  gauge: job steps running now
//	ingestq_zookeeper_session_connected            gauge: 1 connected, 0 not
//	ingestq_zookeeper_requests_total{op,node}      counter: requests sent to ZooKeeper
//	ingestq_job_state_duration_seconds{state}      histogram: time a job spent in a state, when it left it
//	ingestq_job_latency_seconds{state}             histogram: a job's creation to its end (completed, failed, deleted)
//	ingestq_job_failures_total{stage}              counter: jobs failed, by the state they failed in
//	ingestq_callbacks_total{outcome}               counter: callback rounds delivered, pending, refused, failed
//	ingestq_mails_total{kind,outcome}              counter: depositor mails (report, queued) sent or failed
//	ingestq_leases_total{outcome}                  counter: recording leases completed, failed, expired, lost, released
//
// The queue's own figures are exported by the batcher alone ([Metrics.ObserveQueue]),
// so that a sum over processes counts each job once:
//
//	ingestq_queue_jobs{state}                      gauge: jobs in each state (queue depth)
//	ingestq_queue_oldest_job_age_seconds{state}    gauge: how long the oldest job of a state has been in it
//	ingestq_queue_batches{state}                   gauge: batches in each state
//	ingestq_workers{stage}                         gauge: live stage replicas taking jobs from each state
//
// A state change is counted by the process that made it.
//
// outcome is one of advanced, failed, released, retried, fenced (see
// [StepEnd]); stage and state are lower-case state names such as
// "estimating" and "pending". The batcher's fixity audit adds
// ingestq_fixity_checked_total and ingestq_fixity_failures_total;
// docs/tracing.md lists every metric. op is get, exists,
// children, create, set, delete, multi or multiread, and multi.<op> or
// multiread.get for each operation inside one; node is the kind of node with ids written as
// "*" ("jobs/*/status"; "*" alone for a multi or multiRead as a whole). No
// series carries otel_scope_* labels or an empty label value; the registry
// also holds the Go runtime and process collectors.
//
// # Logs
//
// [NewLogger] writes JSON lines; a line logged with a context carries
// trace_id and span_id of the context's span and job_id and batch_id
// attached by [WithJob] or [StartJobSpan].
package telemetry
