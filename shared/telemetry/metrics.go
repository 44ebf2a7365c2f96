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
	attrKind    attribute.Key = "kind"
)

// StepEnd is how one job step of a stage ended (the steps' metrics'
// label "outcome").
type StepEnd string

const (
	// EndAdvanced: the job moved on to the next state.
	EndAdvanced StepEnd = "advanced"
	// EndFailed: the job was marked Failed.
	EndFailed StepEnd = "failed"
	// EndReleased: the stage gave the job back untouched, for instance
	// because its batch is held or the stage is shutting down.
	EndReleased StepEnd = "released"
	// EndRetried: a transient error; the job stays in its state to be
	// tried again.
	EndRetried StepEnd = "retried"
	// EndFenced: the stage lost its claim on the job (session expired,
	// lock taken over) and wrote nothing.
	EndFenced StepEnd = "fenced"
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

	queueOldest   metric.Float64ObservableGauge
	queueBatches  metric.Int64ObservableGauge
	workers       metric.Int64ObservableGauge
	stateDuration metric.Float64Histogram
	jobLatency    metric.Float64Histogram
	jobFailures   metric.Int64Counter
	callbacks     metric.Int64Counter
	mails         metric.Int64Counter
	leases        metric.Int64Counter
	bytesMoved    metric.Int64Counter
	resumes       metric.Int64Counter
}

// jobBuckets go from a quick step (a tenth of a second) to a job waiting
// days for an operator.
var jobBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800}

// NewMetrics creates the stage runner's instruments on provider. The
// observable gauges report nothing until ObserveQueue and
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
	if m.queueOldest, err = meter.Float64ObservableGauge("ingestq.queue.oldest_job_age",
		metric.WithUnit("s"),
		metric.WithDescription("How long the job waiting longest in each state has been in it (states without jobs are left out).")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.queue.oldest_job_age: %w", err)
	}
	if m.queueBatches, err = meter.Int64ObservableGauge("ingestq.queue.batches",
		metric.WithUnit("{batch}"),
		metric.WithDescription("Batches in each state of the queue.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.queue.batches: %w", err)
	}
	if m.workers, err = meter.Int64ObservableGauge("ingestq.workers",
		metric.WithUnit("{worker}"),
		metric.WithDescription("Live stage replicas taking jobs from each state (their /workers entries).")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.workers: %w", err)
	}
	if m.stateDuration, err = meter.Float64Histogram("ingestq.job.state.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time a job spent in a state, observed when it left it, by the state left."),
		metric.WithExplicitBucketBoundaries(jobBuckets...)); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.job.state.duration: %w", err)
	}
	if m.jobLatency, err = meter.Float64Histogram("ingestq.job.latency",
		metric.WithUnit("s"),
		metric.WithDescription("Time from a job's creation (its batch's spawning) to its end, by the state it ended in."),
		metric.WithExplicitBucketBoundaries(jobBuckets...)); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.job.latency: %w", err)
	}
	if m.jobFailures, err = meter.Int64Counter("ingestq.job.failures",
		metric.WithUnit("{job}"),
		metric.WithDescription("Jobs moved to Failed, by the stage (state) they failed in.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.job.failures: %w", err)
	}
	if m.callbacks, err = meter.Int64Counter("ingestq.callbacks",
		metric.WithUnit("{callback}"),
		metric.WithDescription("Callbacks to a collection's URL, by outcome of each round of attempts: delivered, pending (not delivered: tried again later, the job waiting in Notify), refused (4xx, or a URL the policy denies; not retried), failed (given up: the job completed without it).")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.callbacks: %w", err)
	}
	if m.mails, err = meter.Int64Counter("ingestq.mails",
		metric.WithUnit("{mail}"),
		metric.WithDescription("Depositor mails, by kind (report, queued) and outcome (sent, failed: each failed attempt counts).")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.mails: %w", err)
	}
	if m.leases, err = meter.Int64Counter("ingestq.leases",
		metric.WithUnit("{lease}"),
		metric.WithDescription("Recording leases ended, by outcome: completed, failed, expired, lost, released.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.leases: %w", err)
	}
	if m.bytesMoved, err = meter.Int64Counter("ingestq.download",
		metric.WithUnit("By"),
		metric.WithDescription("Bytes a step moved for its jobs, by stage: fetched from depositors' servers (downloading), written to the object store (storing). Bytes fetched twice count twice.")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.download: %w", err)
	}
	if m.resumes, err = meter.Int64Counter("ingestq.download.resumes",
		metric.WithUnit("{resume}"),
		metric.WithDescription("Transfers that went on after an attempt stopped, by stage and outcome: resumed (from where it stopped), restarted (from the first byte: the server ignored the range or the file changed).")); err != nil {
		return nil, fmt.Errorf("telemetry: creating ingestq.download.resumes: %w", err)
	}
	return m, nil
}

// StateChanged records a job's state change: the time it spent in the state
// it left (inState < 0: not known, a job's creation), its failure counted by
// stage when to is "failed", and its latency when it ended (to "completed",
// "failed" or "deleted"; latency < 0: not known). States are lower-case.
func (m *Metrics) StateChanged(ctx context.Context, from, to string, inState, latency time.Duration) {
	if from != "" && inState >= 0 {
		m.stateDuration.Record(ctx, inState.Seconds(), metric.WithAttributes(attrState.String(from)))
	}
	if to == "failed" && from != "" {
		m.jobFailures.Add(ctx, 1, metric.WithAttributes(attrStage.String(from)))
	}
	if latency >= 0 && (to == "completed" || to == "failed" || to == "deleted") {
		m.jobLatency.Record(ctx, latency.Seconds(), metric.WithAttributes(attrState.String(to)))
	}
}

// Callback counts the outcome of a round of a callback's attempts:
// delivered, pending, refused or failed.
func (m *Metrics) Callback(ctx context.Context, outcome string) {
	m.callbacks.Add(ctx, 1, metric.WithAttributes(attrOutcome.String(outcome)))
}

// Mail counts a depositor mail of kind (report, queued) sent or failed.
func (m *Metrics) Mail(ctx context.Context, kind, outcome string) {
	m.mails.Add(ctx, 1, metric.WithAttributes(attrKind.String(kind), attrOutcome.String(outcome)))
}

// Lease counts a recording lease ended with outcome (completed, failed,
// expired, lost, released).
func (m *Metrics) Lease(ctx context.Context, outcome string) {
	m.leases.Add(ctx, 1, metric.WithAttributes(attrOutcome.String(outcome)))
}

// BytesMoved counts n bytes a step of stage moved (downloading, storing).
func (m *Metrics) BytesMoved(ctx context.Context, stage string, n int64) {
	m.bytesMoved.Add(ctx, n, metric.WithAttributes(attrStage.String(stage)))
}

// Resume counts a transfer of stage that went on after an attempt stopped:
// outcome resumed or restarted.
func (m *Metrics) Resume(ctx context.Context, stage, outcome string) {
	m.resumes.Add(ctx, 1, metric.WithAttributes(attrStage.String(stage), attrOutcome.String(outcome)))
}

// QueueFigures are the queue's figures one process exports (see
// ObserveQueue); states are lower-case.
type QueueFigures struct {
	Jobs      map[string]int64
	OldestAge map[string]time.Duration
	Batches   map[string]int64
	Workers   map[string]int64
}

// ObserveQueue makes figures the source of ingestq_queue_jobs,
// ingestq_queue_oldest_job_age_seconds, ingestq_queue_batches and
// ingestq_workers, called at every scrape: it should return what a loop
// read last (nil: nothing yet). One process of a queue calls it, so that a
// sum over processes counts each job once.
func (m *Metrics) ObserveQueue(figures func() *QueueFigures) (metric.Registration, error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		f := figures()
		if f == nil {
			return nil
		}
		for state, n := range f.Jobs {
			o.ObserveInt64(m.queueJobs, n, metric.WithAttributes(attrState.String(state)))
		}
		for state, d := range f.OldestAge {
			o.ObserveFloat64(m.queueOldest, d.Seconds(), metric.WithAttributes(attrState.String(state)))
		}
		for state, n := range f.Batches {
			o.ObserveInt64(m.queueBatches, n, metric.WithAttributes(attrState.String(state)))
		}
		for stage, n := range f.Workers {
			o.ObserveInt64(m.workers, n, metric.WithAttributes(attrStage.String(stage)))
		}
		return nil
	}, m.queueJobs, m.queueOldest, m.queueBatches, m.workers)
	if err != nil {
		return nil, fmt.Errorf("telemetry: registering the queue figures callback: %w", err)
	}
	return reg, nil
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
func (s Step) End(ctx context.Context, outcome StepEnd) {
	s.metrics.inFlight.Add(ctx, -1, metric.WithAttributes(attrStage.String(s.stage)))
	attrs := metric.WithAttributes(attrStage.String(s.stage), attrOutcome.String(string(outcome)))
	s.metrics.jobsHandled.Add(ctx, 1, attrs)
	s.metrics.stepDuration.Record(ctx, time.Since(s.started).Seconds(), attrs)
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
