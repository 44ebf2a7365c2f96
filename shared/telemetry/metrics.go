package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// meterName is the instrumentation scope of the stage runner's instruments;
// Prometheus shows it as the otel_scope_name label.
const meterName = "github.com/ingestq/ingestq/shared/telemetry"

// Metric attribute keys, Prometheus label names as they are.
const (
	attrStage   attribute.Key = "stage"
	attrOutcome attribute.Key = "outcome"
	attrState   attribute.Key = "state"
	attrOp      attribute.Key = "op"
	attrNode    attribute.Key = "node"
)

// Outcome is how one job step of a stage ended.
type Outcome string

const (
	// OutcomeAdvanced: the job moved on to the next state.
	OutcomeAdvanced Outcome = "advanced"
	// OutcomeFailed: the job was marked Failed.
	OutcomeFailed Outcome = "failed"
	// OutcomeReleased: the stage gave the job back untouched, for instance
	// because its batch is held or the stage is shutting down.
	OutcomeReleased Outcome = "released"
	// OutcomeRetried: a transient error; the job stays in its state to be
	// tried again.
	OutcomeRetried Outcome = "retried"
	// OutcomeFenced: the stage lost its claim on the job (session expired,
	// lock taken over) and wrote nothing.
	OutcomeFenced Outcome = "fenced"
)

// Metrics are the instruments a stage runner records. Make it with
// NewMetrics, or use Telemetry.Metrics.
type Metrics struct {
	meter        metric.Meter
	jobsHandled  metric.Int64Counter
	stepDuration metric.Float64Histogram
	inFlight     metric.Int64UpDownCounter
	queueJobs    metric.Int64ObservableGauge
	zkConnected  metric.Int64ObservableGauge
	zkRequests   metric.Int64ObservableCounter
}

// NewMetrics creates the stage runner's instruments on provider. The
// observable gauges report nothing until ObserveJobsByState and
// ObserveZooKeeperSession give them callbacks.
func NewMetrics(provider metric.MeterProvider) (*Metrics, error) {
	meter := provider.Meter(meterName)
	m := &Metrics{meter: meter}
	var err error
	if m.jobsHandled, err = meter.Int64Counter("ingestq.jobs.handled",
		metric.WithUnit("{job}"),
		metric.WithDescription("Job steps a stage finished, by stage and outcome.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.jobs.handled: %w", err)
	}
	if m.stepDuration, err = meter.Float64Histogram("ingestq.step.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of one job step of a stage, by stage and outcome."),
		// From a quick estimate (milliseconds) to a large download or
		// processing run (hours); the SDK default buckets suit milliseconds.
		metric.WithExplicitBucketBoundaries(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400)); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.step.duration: %w", err)
	}
	if m.inFlight, err = meter.Int64UpDownCounter("ingestq.jobs.in_flight",
		metric.WithUnit("{job}"),
		metric.WithDescription("Job steps a stage is running now.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.jobs.in_flight: %w", err)
	}
	if m.queueJobs, err = meter.Int64ObservableGauge("ingestq.queue.jobs",
		metric.WithUnit("{job}"),
		metric.WithDescription("Jobs in each state of the queue.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.queue.jobs: %w", err)
	}
	// No unit: "1" would make the Prometheus name end in _ratio.
	if m.zkConnected, err = meter.Int64ObservableGauge("ingestq.zookeeper.session.connected",
		metric.WithDescription("1 while the ZooKeeper session is connected, 0 otherwise.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.zookeeper.session.connected: %w", err)
	}
	if m.zkRequests, err = meter.Int64ObservableCounter("ingestq.zookeeper.requests",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests sent to ZooKeeper, by request (op; multi.<op> and multiread.get for the operations inside a multi or multiRead) and kind of node.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.zookeeper.requests: %w", err)
	}
	return m, nil
}

// Step is one job step of a stage in progress, from StartStep to End.
type Step struct {
	metrics *Metrics
	stage   string
	started time.Time
}

// StartStep counts a job step of stage as in flight until End is called.
func (m *Metrics) StartStep(ctx context.Context, stage string) Step {
	m.inFlight.Add(ctx, 1, metric.WithAttributes(attrStage.String(stage)))
	return Step{metrics: m, stage: stage, started: time.Now()}
}

// End records that the step finished with outcome: it is no longer in
// flight, it counts as handled and its duration is observed. Call it once.
func (s Step) End(ctx context.Context, outcome Outcome) {
	s.metrics.inFlight.Add(ctx, -1, metric.WithAttributes(attrStage.String(s.stage)))
	attrs := metric.WithAttributes(attrStage.String(s.stage), attrOutcome.String(string(outcome)))
	s.metrics.jobsHandled.Add(ctx, 1, attrs)
	s.metrics.stepDuration.Record(ctx, time.Since(s.started).Seconds(), attrs)
}

// JobsByState reports how many jobs are in each state, keyed by the
// lower-case state name ("pending", "estimating", ...).
type JobsByState func(ctx context.Context) (map[string]int64, error)

// ObserveJobsByState makes count the source of ingestq_queue_jobs; it is
// called at every scrape, so it should read a cache or cheap counts.
// Unregister the returned registration when count stops being valid.
func (m *Metrics) ObserveJobsByState(count JobsByState) (metric.Registration, error) {
	reg, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		counts, err := count(ctx)
		if err != nil {
			return fmt.Errorf("telemetry: counting jobs by state: %w", err)
		}
		for state, n := range counts {
			o.ObserveInt64(m.queueJobs, n, metric.WithAttributes(attrState.String(state)))
		}
		return nil
	}, m.queueJobs)
	if err != nil {
		return nil, fmt.Errorf("telemetry: registering the jobs-by-state callback: %w", err)
	}
	return reg, nil
}

// ZooKeeperRequests reports the requests sent to ZooKeeper since the
// process connected, one call of observe per kind.
type ZooKeeperRequests func(observe func(op, node string, count int64))

// ObserveZooKeeperRequests makes requests the source of
// ingestq_zookeeper_requests_total, called at every scrape.
func (m *Metrics) ObserveZooKeeperRequests(requests ZooKeeperRequests) (metric.Registration, error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		requests(func(op, node string, count int64) {
			o.ObserveInt64(m.zkRequests, count, metric.WithAttributes(attrOp.String(op), attrNode.String(node)))
		})
		return nil
	}, m.zkRequests)
	if err != nil {
		return nil, fmt.Errorf("telemetry: registering the ZooKeeper requests callback: %w", err)
	}
	return reg, nil
}

// ObserveZooKeeperSession makes connected the source of
// ingestq_zookeeper_session_connected, called at every scrape.
func (m *Metrics) ObserveZooKeeperSession(connected func() bool) (metric.Registration, error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var v int64
		if connected() {
			v = 1
		}
		o.ObserveInt64(m.zkConnected, v)
		return nil
	}, m.zkConnected)
	if err != nil {
		return nil, fmt.Errorf("telemetry: registering the ZooKeeper session callback: %w", err)
	}
	return reg, nil
}

// MetricsHandler serves the process's metrics in Prometheus text format.
func (t *Telemetry) MetricsHandler() http.Handler {
	return t.metricsHandler
}

// ServeOption changes what ServeMetrics serves.
type ServeOption func(*http.ServeMux)

// WithPprof serves Go's profiles at /debug/pprof/ as well: what the process
// spends its CPU and memory on, for `go tool pprof`. They show the code and
// its data, so the address must stay private (it is loopback by default).
func WithPprof() ServeOption {
	return func(mux *http.ServeMux) {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
}

// ServeMetrics serves MetricsHandler at /metrics on addr until ctx ends,
// then returns nil. An empty addr disables it: it returns nil at once.
func (t *Telemetry) ServeMetrics(ctx context.Context, addr string, opts ...ServeOption) error {
	if addr == "" {
		return nil
	}
	var lc net.ListenConfig
	listener, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("telemetry: listening for /metrics on %s: %w", addr, err)
	}
	return t.serveMetrics(ctx, listener, opts...)
}

// metricsShutdownGrace bounds how long a scrape in progress may delay the
// end of ServeMetrics.
const metricsShutdownGrace = 5 * time.Second

// serveMetrics serves /metrics on listener until ctx ends, and closes it.
func (t *Telemetry) serveMetrics(ctx context.Context, listener net.Listener, opts ...ServeOption) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", t.metricsHandler)
	for _, o := range opts {
		o(mux)
	}
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()

	select {
	case err := <-served:
		return fmt.Errorf("telemetry: serving /metrics on %s: %w", listener.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), metricsShutdownGrace)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("telemetry: stopping /metrics on %s: %w", listener.Addr(), err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("telemetry: serving /metrics on %s: %w", listener.Addr(), err)
	}
	return nil
}
