package janitor

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/session"
	"github.com/ingestq/ingestq/shared/zktest"
)

// reclaims reads ingestq.janitor.reclaims of kind from reader (-1: no
// such series).
func reclaims(t *testing.T, reader *sdkmetric.ManualReader, kind string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "ingestq.janitor.reclaims" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := p.Attributes.Value(attribute.Key("kind")); ok && v.AsString() == kind {
					return p.Value
				}
			}
		}
	}
	return -1
}

// reclaimer is a janitor with a grace of an hour over a session of its
// own on root, its reclaims counted in reader and logged in log.
func reclaimer(t *testing.T, root string) (j *Janitor, q *session.Session, reader *sdkmetric.ManualReader, log *bytes.Buffer) {
	t.Helper()
	q, err := session.Connect(context.Background(), session.Options{Servers: zktest.Servers(t), Root: root, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	reader = sdkmetric.NewManualReader()
	counter, err := NewReclaimsCounter(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	log = &bytes.Buffer{}
	j = &Janitor{Tools: admin.New(q), ReclaimGrace: time.Hour, Reclaims: counter, Logger: slog.New(slog.NewTextHandler(log, nil))}
	return j, q, reader, log
}

func items(ds []admin.Damage) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Item)
	}
	slices.Sort(out)
	return out
}

// TestJobsMerrittProducersLeftHalfMadeAreReclaimedAfterTheGraceAndLiveCreationsNever:
// producers create jobs the way Merritt's queue library does (the job node,
// then one child at a time; the Java library under the job's lock, the
// Ruby one without) and die midway. The janitor leaves their nodes until
// they have stood unchanged for the grace, then removes each, logging what
// and why and counting it. A creation under way is never touched: one
// whose producer holds the job's lock, however long it takes, and one
// still writing, within the grace; both end as whole jobs.
func TestJobsMerrittProducersLeftHalfMadeAreReclaimedAfterTheGraceAndLiveCreationsNever(t *testing.T) {
	root := zktest.Root(t)
	j, q, reader, log := reclaimer(t, root)
	ctx := context.Background()
	setup := merrittzk.Connect(t, zktest.Servers(t), root)
	if err := setup.InitNodes(); err != nil {
		t.Fatal(err)
	}
	b, err := setup.CreateBatch(map[string]any{"batchID": "merritt-batch-1", "profile_name": "demo", "submitter": "jdoe"})
	if err != nil {
		t.Fatal(err)
	}
	conf := merrittzk.JobConfiguration("demo", "jdoe", "http://127.0.0.1:1/a.checkm", "manifest", "xml")
	begin := func(p *merrittzk.Peer, locked bool, steps int) *merrittzk.JobCreation {
		t.Helper()
		c, err := p.BeginJob(b.ID, 5, conf, merrittzk.JobIdentifiers("", "loc-1"), nil, locked)
		if err != nil {
			t.Fatal(err)
		}
		for range steps {
			if done, err := c.Step(); err != nil || done {
				t.Fatalf("step: done %v, %v", done, err)
			}
		}
		return c
	}
	finish := func(c *merrittzk.JobCreation) {
		t.Helper()
		for {
			done, err := c.Step()
			if err != nil {
				t.Fatalf("finishing %s: %v", c.Job.ID, err)
			}
			if done {
				return
			}
		}
	}

	first := time.Now()
	// Producers that die: the Java library's after bid, priority and
	// space_needed (its lock goes with its session), the Ruby library's
	// after the configuration, one right after the job node itself.
	var dead []string
	for _, tc := range []struct {
		locked bool
		steps  int
	}{{true, 3}, {false, 4}, {false, 0}} {
		p := merrittzk.Connect(t, zktest.Servers(t), root)
		dead = append(dead, begin(p, tc.locked, tc.steps).Job.ID)
		p.Close()
	}
	slices.Sort(dead)
	last := time.Now()
	// A producer at work: the Java library's, holding the job's lock.
	javaAtWork := merrittzk.Connect(t, zktest.Servers(t), root)
	locked := begin(javaAtWork, true, 2)

	// Within the grace nothing is touched.
	if got, err := j.Reclaim(ctx, first.Add(j.ReclaimGrace-time.Second)); err != nil || len(got) != 0 {
		t.Fatalf("within the grace: reclaimed %v (%v)", items(got), err)
	}
	// A Ruby producer still writing (no lock): within the grace of its last
	// write, it is left alone and ends whole.
	rubyAtWork := merrittzk.Connect(t, zktest.Servers(t), root)
	writing := begin(rubyAtWork, false, 1)
	if got, err := j.Reclaim(ctx, time.Now()); err != nil || len(got) != 0 {
		t.Fatalf("a creation still writing: reclaimed %v (%v)", items(got), err)
	}
	finish(writing)

	// Past the grace the dead producers' nodes go, and nothing else.
	got, err := j.Reclaim(ctx, last.Add(j.ReclaimGrace+time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(items(got), dead) {
		t.Fatalf("past the grace: reclaimed %v, want the dead producers' %v", items(got), dead)
	}
	for _, d := range got {
		if d.Kind != admin.DamageJobNoStatus || !strings.Contains(d.Detail, "createJob") || !strings.Contains(d.Detail, "Fsck with repair") {
			t.Errorf("reclaimed %+v, want job-without-status saying what it was and what to do", d)
		}
		if ok, err := setup.Exists("/jobs/" + d.Item); err != nil || ok {
			t.Errorf("%s still exists (%v)", d.Item, err)
		}
		if !strings.Contains(log.String(), "item="+d.Item) {
			t.Errorf("no log line names %s:\n%s", d.Item, log.String())
		}
	}
	if n := reclaims(t, reader, admin.DamageJobNoStatus); n != int64(len(dead)) {
		t.Errorf("ingestq.janitor.reclaims{kind=job-without-status} = %d, want %d", n, len(dead))
	}
	if n := reclaims(t, reader, admin.DamageEntryNoJob); n != 0 {
		t.Errorf("ingestq.janitor.reclaims{kind=entry-without-job} = %d, want a series at 0", n)
	}

	// However long the locked creation takes, it is never touched.
	if got, err := j.Reclaim(ctx, time.Now().Add(100*j.ReclaimGrace)); err != nil || len(got) != 0 {
		t.Fatalf("a creation under its producer's lock: reclaimed %v (%v)", items(got), err)
	}
	finish(locked)
	for _, id := range []string{locked.Job.ID, writing.Job.ID} {
		if _, err := setup.LoadJob(id); err != nil {
			t.Errorf("the creation left alone is not a whole job: %v", err)
		}
	}
	rep, err := admin.New(q).Queue.Fsck(ctx, admin.FsckOptions{Grace: time.Nanosecond})
	if err != nil || !rep.Clean() {
		t.Errorf("fsck afterwards: %+v (%v)", rep, err)
	}
}

// TestGarbageWithoutATimeOfItsOwnIsReclaimedOnceSeenForTheGrace: a state
// entry whose job is gone carries no time that says it was left: the
// janitor removes it only once it has seen it, unchanged, for the grace.
func TestGarbageWithoutATimeOfItsOwnIsReclaimedOnceSeenForTheGrace(t *testing.T) {
	root := zktest.Root(t)
	j, q, reader, _ := reclaimer(t, root)
	ctx := context.Background()
	setup := merrittzk.Connect(t, zktest.Servers(t), root)
	if err := setup.InitNodes(); err != nil {
		t.Fatal(err)
	}
	entry := q.Paths().Entry(queue.Pending, 5, "jid9999999999")
	if _, err := q.Nodes().Create(ctx, entry, nil, 0); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(10 * time.Hour) // its node's age says nothing
	for _, at := range []time.Time{t0, t0.Add(j.ReclaimGrace - time.Second)} {
		if got, err := j.Reclaim(ctx, at); err != nil || len(got) != 0 {
			t.Fatalf("at %s: reclaimed %v (%v)", at.Sub(t0), items(got), err)
		}
	}
	got, err := j.Reclaim(ctx, t0.Add(j.ReclaimGrace))
	if err != nil || len(got) != 1 || got[0].Kind != admin.DamageEntryNoJob {
		t.Fatalf("seen for the grace: reclaimed %+v (%v), want the entry", got, err)
	}
	if ok, _, err := q.Nodes().Exists(ctx, entry); err != nil || ok {
		t.Errorf("%s still exists (%v)", entry, err)
	}
	if n := reclaims(t, reader, admin.DamageEntryNoJob); n != 1 {
		t.Errorf("ingestq.janitor.reclaims{kind=entry-without-job} = %d, want 1", n)
	}
}
