package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Telemetry is one process's tracing and metrics. Its providers are not
// installed as the otel globals unless SetGlobal is called.
type Telemetry struct {
	TracerProvider *sdktrace.TracerProvider
	MeterProvider  *sdkmetric.MeterProvider
	// Propagator is W3C TraceContext plus Baggage, for gRPC metadata and
	// other carriers; job data stores only the traceparent (see Inject).
	Propagator propagation.TextMapPropagator
	// Metrics holds the stage runner's instruments, made from MeterProvider.
	Metrics *Metrics

	metricsHandler http.Handler
	// spanExporter is nil when the environment asks for no export.
	spanExporter sdktrace.SpanExporter
}

// Option changes what Setup builds.
type Option func(*setupConfig)

type setupConfig struct {
	spanExporter sdktrace.SpanExporter
}

// WithSpanExporter sends spans to exporter instead of the exporter the
// environment chooses; tests use it with an in-memory exporter.
func WithSpanExporter(exporter sdktrace.SpanExporter) Option {
	return func(c *setupConfig) { c.spanExporter = exporter }
}

// Setup builds the tracing and metrics of the process named service at
// version. The OTEL_* environment decides the span exporter and may override
// the resource (see the package documentation). Call Shutdown when done.
func Setup(ctx context.Context, service, version string, opts ...Option) (*Telemetry, error) {
	var cfg setupConfig
	for _, opt := range opts {
		opt(&cfg)
	}

	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		// Last, so OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: building the resource of %s: %w", service, err)
	}

	spanExporter := cfg.spanExporter
	if spanExporter == nil {
		spanExporter, err = spanExporterFromEnv(ctx, os.Getenv)
		if err != nil {
			return nil, err
		}
	}
	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if spanExporter != nil {
		traceOpts = append(traceOpts, sdktrace.WithBatcher(spanExporter))
	}
	tracerProvider := sdktrace.NewTracerProvider(traceOpts...)

	registry := prometheus.NewRegistry()
	meterProvider, err := newMeterProvider(registry, res)
	if err != nil {
		return nil, errors.Join(err, tracerProvider.Shutdown(ctx))
	}
	metrics, err := NewMetrics(meterProvider)
	if err != nil {
		return nil, errors.Join(err, tracerProvider.Shutdown(ctx), meterProvider.Shutdown(ctx))
	}

	return &Telemetry{
		TracerProvider: tracerProvider,
		MeterProvider:  meterProvider,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Metrics:        metrics,
		metricsHandler: promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}),
		spanExporter:   spanExporter,
	}, nil
}

// newMeterProvider returns a MeterProvider whose only reader is a Prometheus
// exporter registered on registry, next to the Go runtime and process
// collectors.
func newMeterProvider(registry *prometheus.Registry, res *resource.Resource) (*sdkmetric.MeterProvider, error) {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := registry.Register(c); err != nil {
			return nil, fmt.Errorf("telemetry: registering the runtime collectors: %w", err)
		}
	}
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(registry),
		// Pinned rather than left to the exporter's default, so the
		// documented metric names survive exporter upgrades.
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// The scope (the instrumenting package) says nothing to whoever
		// runs the queue, and multiplies the labels of every series.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: creating the Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exporter)), nil
}

// traceExport is the span exporter the environment asks for.
type traceExport int

const (
	exportNone traceExport = iota
	exportOTLPGRPC
	exportOTLPHTTP
)

// chooseTraceExport reads the OTEL_* variables through getenv and says which
// span exporter to build. Without an OTLP endpoint nothing is exported:
// unlike the OTel default of a local collector, a process here must not
// spend its life retrying an exporter that nobody configured.
func chooseTraceExport(getenv func(string) string) (traceExport, error) {
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "", "otlp":
	case "none":
		return exportNone, nil
	default:
		return exportNone, fmt.Errorf("telemetry: OTEL_TRACES_EXPORTER=%q is not supported (want otlp or none)", exporter)
	}
	if getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return exportNone, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "grpc":
		return exportOTLPGRPC, nil
	case "http/protobuf":
		return exportOTLPHTTP, nil
	default:
		return exportNone, fmt.Errorf("telemetry: OTLP protocol %q is not supported (want grpc or http/protobuf)", protocol)
	}
}

// spanExporterFromEnv builds the exporter chooseTraceExport picks, or returns
// nil for none. The OTLP exporters read endpoint, headers, TLS and timeout
// from the same environment themselves.
func spanExporterFromEnv(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	export, err := chooseTraceExport(getenv)
	if err != nil {
		return nil, err
	}
	var exporter sdktrace.SpanExporter
	switch export {
	case exportNone:
		return nil, nil
	case exportOTLPGRPC:
		exporter, err = otlptracegrpc.New(ctx)
	case exportOTLPHTTP:
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: creating the OTLP span exporter: %w", err)
	}
	return exporter, nil
}

// SetGlobal installs the providers and the propagator as the otel globals,
// for instrumentation such as otelgrpc that is not handed them explicitly.
// Call it once, from main.
func (t *Telemetry) SetGlobal() {
	otel.SetTracerProvider(t.TracerProvider)
	otel.SetMeterProvider(t.MeterProvider)
	otel.SetTextMapPropagator(t.Propagator)
}

// Shutdown flushes the spans still batched and stops both providers. Spans
// and metrics recorded after it are dropped.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if err := t.TracerProvider.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("telemetry: flushing spans: %w", err))
	}
	if err := t.MeterProvider.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("telemetry: stopping metrics: %w", err))
	}
	return errors.Join(errs...)
}
