package console

import (
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
)

// TestCollectionsPageCountsByCollectionAndStateDrillingDownToBatches: the
// collections page has a row per collection with its jobs per state (each
// count linking to those jobs) and the space they need; a collection's
// page has a row per batch; the ended jobs are counted for today.
func TestCollectionsPageCountsByCollectionAndStateDrillingDownToBatches(t *testing.T) {
	f := newFixture(t, "")
	bid, jids := f.batch("jdoe", 3)
	f.fail(jids[0], "digest mismatch")
	space := int64(2 << 20)
	cl, err := jobs.New(f.q).ClaimJob(f.ctx, jids[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Commit(f.ctx, jobs.Change{To: queue.Estimating, SpaceNeeded: &space}); err != nil {
		t.Fatal(err)
	}
	a := f.get("/collections")
	wantBody(t, a, `<a href="/collections?collection=demo_coll">demo_coll</a>`,
		`<th class="num">Pending</th><th class="num">Estimating</th><th class="num">Failed</th>`,
		`<a href="/jobs?collection=demo_coll&amp;state=Failed">1</a>`,
		`<a href="/jobs?collection=demo_coll&amp;state=Estimating">1</a><br><small>2.1 MB</small>`,
		`<td class="num" data-label="All"><strong>3</strong>`, `id="per-day"`)
	// The day it failed: none completed, one failed.
	wantBody(t, a, `<td class="num" data-label="Completed">0</td><td class="num" data-label="Failed">1</td></tr>`)
	b := f.get("/collections?collection=demo_coll")
	wantBody(t, b, `<a href="/batches/`+bid+`">`+bid+`</a>`,
		`<a href="/jobs?batch=`+bid+`&amp;collection=demo_coll&amp;state=Pending">1</a>`)
	wantBody(t, f.get("/jobs?collection=demo_coll&state=Failed"), `<a href="/jobs/`+jids[0]+`">`)
}
