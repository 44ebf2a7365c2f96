package janitor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ingestq/ingestq/shared/queue/admin"
)

// DefaultReclaimGrace is how long garbage must stand unchanged before the
// janitor removes it (INGESTQ_RECLAIM_GRACE): a creation under way, even a
// Merritt producer's that a long pause holds up, changes far sooner.
const DefaultReclaimGrace = time.Hour

// ReclaimedKinds are the kinds of damage the janitor reclaims: fsck's
// reclaimable ones (admin.Damage.Reclaimable).
var ReclaimedKinds = []string{admin.DamageJobNoStatus, admin.DamageBatchRemnant, admin.DamageEntryNoJob,
	admin.DamageRefNoJob, admin.DamageUUIDDangling}

// agedByFsck are the kinds fsck itself finds only once unchanged past the
// grace (it reads the nodes' times); the others the janitor holds back
// until it has seen them for the grace.
var agedByFsck = map[string]bool{admin.DamageJobNoStatus: true, admin.DamageBatchRemnant: true}

// NewReclaimsCounter makes the counter of what the janitor reclaims, by
// kind (ingestq.janitor.reclaims), each kind's series at 0 from the start
// so that the first reclaim is an increase an alert sees.
func NewReclaimsCounter(meter metric.Meter) (metric.Int64Counter, error) {
	c, err := meter.Int64Counter("ingestq.janitor.reclaims", metric.WithUnit("{node}"),
		metric.WithDescription("Queue garbage the janitor removed: nodes a writer left half-made or that point at nothing, by fsck's kind of damage."))
	if err != nil {
		return nil, fmt.Errorf("creating ingestq.janitor.reclaims: %w", err)
	}
	for _, k := range ReclaimedKinds {
		c.Add(context.Background(), 0, metric.WithAttributes(attribute.String("kind", k)))
	}
	return c, nil
}

// sightings remembers, for the damage that carries no time of its own, when
// the janitor first saw it: it is reclaimed once seen for the grace, still
// the same.
type sightings struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func damageKey(d admin.Damage) string { return d.Kind + "\x00" + d.Item + "\x00" + d.Detail }

// Reclaim removes what fsck proves is garbage no writer will finish (its
// reclaimable damage): a job or batch node without status that neither it
// nor a child of it has changed for the grace, and that no live session
// holds; an entry or a batch reference whose job is gone, a batch uuid that
// points nowhere, each once seen unchanged for the grace. Damage anyone may
// still finish, or that an operator must decide, is left. Each removal is
// logged with what and why and counted. now is the time ages are measured
// to; it returns what was removed.
func (j *Janitor) Reclaim(ctx context.Context, now time.Time) ([]admin.Damage, error) {
	grace := j.ReclaimGrace
	if grace <= 0 {
		grace = DefaultReclaimGrace
	}
	j.seen.mu.Lock()
	if j.seen.first == nil {
		j.seen.first = map[string]time.Time{}
	}
	j.seen.mu.Unlock()
	seenNow := map[string]bool{}
	rep, err := j.Tools.Queue.Fsck(ctx, admin.FsckOptions{Repair: true, Grace: grace, Now: now, Reclaim: func(d admin.Damage) bool {
		if agedByFsck[d.Kind] {
			return true
		}
		k := damageKey(d)
		j.seen.mu.Lock()
		defer j.seen.mu.Unlock()
		seenNow[k] = true
		first, ok := j.seen.first[k]
		if !ok {
			j.seen.first[k] = now
			return false
		}
		return now.Sub(first) >= grace
	}})
	if err != nil {
		return nil, fmt.Errorf("reclaiming queue garbage: %w", err)
	}
	j.seen.mu.Lock()
	for k := range j.seen.first {
		if !seenNow[k] {
			delete(j.seen.first, k) // mended or gone meanwhile
		}
	}
	j.seen.mu.Unlock()
	var out []admin.Damage
	for _, d := range rep.Damages {
		if !d.Repaired {
			continue
		}
		j.seen.mu.Lock()
		delete(j.seen.first, damageKey(d))
		j.seen.mu.Unlock()
		out = append(out, d)
		j.logger().WarnContext(ctx, "queue garbage reclaimed", "kind", d.Kind, "item", d.Item, "why", d.Detail)
		if j.Reclaims != nil {
			j.Reclaims.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", d.Kind)))
		}
	}
	return out, nil
}

func (j *Janitor) logger() *slog.Logger {
	if j.Logger == nil {
		return slog.Default()
	}
	return j.Logger
}
