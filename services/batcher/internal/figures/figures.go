// Package figures exports the queue's figures (jobs, the oldest job's age
// and live workers per state, batches per state) from the batcher: one
// process of the queue exports them, so that a sum over processes counts
// each job once.
package figures

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/telemetry"
)

// Every is how often the figures are read: what a scrape shows is at most
// this old.
const Every = 15 * time.Second

// Exporter reads the figures in a loop and hands the last read to scrapes.
type Exporter struct {
	reader *admin.FigureReader
	log    *slog.Logger
	last   atomic.Pointer[telemetry.QueueFigures]
}

// New returns an Exporter of q's figures.
func New(q *admin.Queue, log *slog.Logger) *Exporter {
	return &Exporter{reader: q.NewFigureReader(), log: log}
}

// Register makes the exporter the source of m's queue gauges.
func (e *Exporter) Register(m *telemetry.Metrics) error {
	_, err := m.ObserveQueue(e.last.Load)
	return err
}

// Run reads the figures every Every until ctx ends. A failed read keeps
// the last figures: a gauge that vanished would look like an empty queue.
func (e *Exporter) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := e.Read(ctx); err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "reading the queue's figures", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Read reads the figures once.
func (e *Exporter) Read(ctx context.Context) error {
	f, err := e.reader.Read(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	out := &telemetry.QueueFigures{Jobs: map[string]int64{}, OldestAge: map[string]time.Duration{},
		Batches: map[string]int64{}, Workers: map[string]int64{}}
	for _, s := range queue.JobStates() {
		out.Jobs[lower(queue.JobStateName(s))] = int64(f.Jobs[s])
	}
	for s, t := range f.Oldest {
		out.OldestAge[lower(queue.JobStateName(s))] = max(now.Sub(t), 0)
	}
	for _, s := range queue.BatchStates() {
		out.Batches[lower(queue.BatchStateName(s))] = int64(f.Batches[s])
	}
	for s, n := range f.Workers {
		out.Workers[lower(queue.JobStateName(s))] = int64(n)
	}
	e.last.Store(out)
	return nil
}

func lower(s string) string { return strings.ToLower(s) }
