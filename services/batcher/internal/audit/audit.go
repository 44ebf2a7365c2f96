// Package audit checks the fixity of a sample of stored versions now and
// then: each round picks versions at random from the whole store, reads
// them back, and counts the ones whose files no longer match their
// manifests (metric ingestq.fixity.failures).
package audit

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/ingestq/ingestq/shared/fixity"
)

// Auditor audits one store.
type Auditor struct {
	Store    fixity.Location
	Versions fixity.Reader
	// Sample is how many versions a round checks.
	Sample int
	Logger *slog.Logger
	// checked and failed count versions audited and those that failed.
	checked, failed metric.Int64Counter
}

// New makes an auditor whose counters come from meter.
func New(meter metric.Meter, store fixity.Location, versions fixity.Reader, sample int, log *slog.Logger) (*Auditor, error) {
	a := &Auditor{Store: store, Versions: versions, Sample: sample, Logger: log}
	var err error
	if a.checked, err = meter.Int64Counter("ingestq.fixity.checked", metric.WithUnit("{version}"),
		metric.WithDescription("stored versions the fixity audit read back")); err != nil {
		return nil, err
	}
	if a.failed, err = meter.Int64Counter("ingestq.fixity.failures", metric.WithUnit("{version}"),
		metric.WithDescription("stored versions the fixity audit found damaged or unreadable")); err != nil {
		return nil, err
	}
	// Both series exist from the start at 0, so that the first failure is
	// an increase an alert sees (a counter first scraped at 1 has not
	// increased) and an audit that checks nothing shows as 0, not as no
	// series.
	a.checked.Add(context.Background(), 0)
	a.failed.Add(context.Background(), 0)
	return a, nil
}

// Round audits one sample and returns how many versions it checked and
// how many failed.
func (a *Auditor) Round(ctx context.Context) (checked, failed int, err error) {
	urls, err := a.Store.Sample(ctx, a.Versions, a.Sample, rand.IntN)
	if err != nil {
		return 0, 0, fmt.Errorf("fixity audit: %w", err)
	}
	for _, u := range urls {
		rep, err := a.Versions.Verify(ctx, u)
		if ctx.Err() != nil {
			return checked, failed, ctx.Err()
		}
		checked++
		a.checked.Add(ctx, 1)
		switch {
		case err != nil:
			failed++
			a.failed.Add(ctx, 1)
			a.Logger.ErrorContext(ctx, "fixity audit: version unreadable", "manifest_url", u, "error", err)
		case len(rep.Mismatches) > 0:
			failed++
			a.failed.Add(ctx, 1)
			for _, m := range rep.Mismatches {
				a.Logger.ErrorContext(ctx, "fixity audit: file does not match its manifest", "manifest_url", u, "file", m.File, "problem", m.Problem)
			}
		}
	}
	return checked, failed, nil
}

// Run audits a round every interval until ctx ends.
func (a *Auditor) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		checked, failed, err := a.Round(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.Logger.WarnContext(ctx, "fixity audit round", "error", err)
			}
			continue
		}
		a.Logger.InfoContext(ctx, "fixity audit round", "checked", checked, "failed", failed)
	}
}
