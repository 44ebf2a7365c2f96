// Package telemetry gives every ingestq process its traces, metrics and logs,
// and carries one job's trace across the seven stage processes through the
// W3C traceparent stored in the job's ZooKeeper data.
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
//	ingestq_queue_jobs{state}                      gauge: jobs in each state (queue depth)
//	ingestq_zookeeper_session_connected            gauge: 1 connected, 0 not
//	ingestq_zookeeper_requests_total{op,node}      counter: requests sent to ZooKeeper
//
// outcome is one of advanced, failed, released, retried, fenced (see
// [Outcome]); stage is a lower-case state name such as "estimating", state
// a status name as the queue writes it ("Pending"). op is get, exists,
// children, create, set, delete, multi or multiread, and multi.<op> or
// multiread.get for each operation inside one; node is the kind of node with ids written as
// "*" ("jobs/*/status"). Every series also carries otel_scope_* labels, and the
// registry holds the Go runtime and process collectors.
//
// # Logs
//
// [NewLogger] writes JSON lines; a line logged with a context carries
// trace_id and span_id of the context's span and job_id and batch_id
// attached by [WithJob] or [StartJobSpan].
package telemetry
