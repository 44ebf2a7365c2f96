package stage

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/telemetry"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultProgressInterval is how often a replica measures the progress of
// its jobs in flight, and at most how often it rewrites its registry entry
// for them.
const DefaultProgressInterval = 5 * time.Second

// Meter counts the bytes a job's step moves, so that the people watching
// the job see how far it got, how fast it goes and how long it has left. A
// handler that moves bytes (a download, a version stored) gets its step's
// meter with MeterOf and tells it; the replica measures it every progress
// interval and its registry entry carries the figures (InFlightJob's
// progress), for a step that has lasted one interval: a quick step costs
// no write. A nil Meter is a meter nobody reads: its methods do nothing.
// Its methods are safe for concurrent use (one job's files are fetched
// several at once).
type Meter struct {
	done, expected atomic.Int64
	// moved counts every byte ever added or advanced, never taken back:
	// whether the step moves.
	moved             atomic.Int64
	resumes, restarts atomic.Int32

	stage   string // the stage in metrics ("downloading")
	metrics *telemetry.Metrics

	mu    sync.Mutex
	phase string
}

type meterKey struct{}

// MeterOf is the meter of the job step ctx belongs to, nil outside one.
func MeterOf(ctx context.Context) *Meter {
	m, _ := ctx.Value(meterKey{}).(*Meter)
	return m
}

// WithMeter returns ctx carrying m: the runner gives each job step its
// own, and tests of a handler theirs.
func WithMeter(ctx context.Context, m *Meter) context.Context {
	return context.WithValue(ctx, meterKey{}, m)
}

// NewMeter is a meter of a step of stage (its name in metrics), counting
// bytes moved and resumes in metrics (nil: none).
func NewMeter(stage string, metrics *telemetry.Metrics) *Meter {
	return &Meter{stage: stage, metrics: metrics, phase: stage}
}

// Phase starts a new phase of the step ("unpacking"): its own bytes done
// of expected, counted from 0.
func (m *Meter) Phase(name string, expected int64) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.phase = name
	m.mu.Unlock()
	m.done.Store(0)
	m.expected.Store(expected)
}

// Expect adds n to the bytes the step expects to move.
func (m *Meter) Expect(n int64) {
	if m != nil && n > 0 {
		m.expected.Add(n)
	}
}

// Add counts n bytes moved: fetched, or written to the store. They count
// in ingestq_download_bytes_total too.
func (m *Meter) Add(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.Advance(n)
	if m.metrics != nil {
		m.metrics.BytesMoved(context.Background(), m.stage, n)
	}
}

// Reader returns r counting the bytes read through it as moved (Add): a
// step's meter over the file it stores. A nil Meter returns r.
func (m *Meter) Reader(r io.Reader) io.Reader {
	if m == nil {
		return r
	}
	return meterReader{r: r, m: m}
}

type meterReader struct {
	r io.Reader
	m *Meter
}

func (mr meterReader) Read(p []byte) (int, error) {
	n, err := mr.r.Read(p)
	mr.m.Add(int64(n))
	return n, err
}

// Advance counts n bytes done without moving them over the network: a
// file found complete, the partial file of an earlier attempt kept, an
// archive's bytes unpacked.
func (m *Meter) Advance(n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.done.Add(n)
	m.moved.Add(n)
}

// Undo takes n bytes done back: a file started again from its first byte.
func (m *Meter) Undo(n int64) {
	if m != nil && n > 0 {
		m.done.Add(-n)
	}
}

// Resumed counts a transfer continued where an attempt stopped.
func (m *Meter) Resumed(ctx context.Context) {
	if m == nil {
		return
	}
	m.resumes.Add(1)
	if m.metrics != nil {
		m.metrics.Resume(ctx, m.stage, "resumed")
	}
}

// Restarted counts a transfer started again from its first byte.
func (m *Meter) Restarted(ctx context.Context) {
	if m == nil {
		return
	}
	m.restarts.Add(1)
	if m.metrics != nil {
		m.metrics.Resume(ctx, m.stage, "restarted")
	}
}

// Done is the bytes done so far (of the present phase).
func (m *Meter) Done() int64 {
	if m == nil {
		return 0
	}
	return m.done.Load()
}

// touched reports whether anything was ever told to the meter: a step
// that moves no bytes reports no progress.
func (m *Meter) touched() bool {
	return m.moved.Load() != 0 || m.expected.Load() != 0 || m.resumes.Load() != 0 || m.restarts.Load() != 0
}

// gauge is a meter's measure: the figures between two readings give the
// rate.
type gauge struct {
	at          time.Time
	done, moved int64
	movedAt     time.Time // when moved last grew
	progress    *v1.Progress
}

// measure reads m at now against the last reading (nil: none) and returns
// the new one, and whether its figures differ from the last's (a write of
// the registry entry is worth it).
func (m *Meter) measure(now time.Time, last *gauge) (*gauge, bool) {
	m.mu.Lock()
	phase := m.phase
	m.mu.Unlock()
	g := &gauge{at: now, done: m.done.Load(), moved: m.moved.Load(), movedAt: now}
	p := &v1.Progress{Phase: phase, BytesDone: g.done, BytesExpected: m.expected.Load(),
		Updated: timestamppb.New(now), Resumes: m.resumes.Load(), Restarts: m.restarts.Load()}
	if last != nil {
		if g.moved == last.moved {
			g.movedAt = last.movedAt
		}
		if d := now.Sub(last.at).Seconds(); d > 0 {
			p.BytesPerSecond = max(float64(g.moved-last.moved), 0) / d
		}
	}
	p.Moved = timestamppb.New(g.movedAt)
	if left := p.BytesExpected - p.BytesDone; left > 0 && p.BytesPerSecond > 0 {
		p.Remaining = durationpb.New(time.Duration(float64(left) / p.BytesPerSecond * float64(time.Second)).Round(time.Second))
	}
	g.progress = p
	changed := last == nil || g.moved != last.moved || g.done != last.done ||
		p.GetBytesExpected() != last.progress.GetBytesExpected() || p.GetPhase() != last.progress.GetPhase() ||
		p.GetResumes() != last.progress.GetResumes() || p.GetRestarts() != last.progress.GetRestarts() ||
		(p.BytesPerSecond == 0) != (last.progress.GetBytesPerSecond() == 0)
	return g, changed
}
