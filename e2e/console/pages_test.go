package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestQueuePageShowsCountsPauseHoldsAndWorkersFromZooKeeper(t *testing.T) {
	f := newFixture(t, "")
	_, jids := f.batch("jdoe", 4)
	f.fail(jids[0], "download of a.txt failed")
	f.move(jids[1], "", queue.Estimating)
	if err := admin.New(f.q).Queue.Pause(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.New(f.q).Queue.HoldCollection(f.ctx, "held_coll"); err != nil {
		t.Fatal(err)
	}
	reg, err := jobs.New(f.q).RegisterWorker(f.ctx, &v1.WorkerInfo{Id: "estimator-test-1", Host: "host-a", Service: "estimator",
		Stage: "Estimating", Version: "v9.9.9", Concurrency: 4, Heartbeat: timestamppb.Now(),
		InFlight: []*v1.InFlightJob{{JobId: jids[1], BatchId: "bid0000000001", Since: timestamppb.Now()}},
		Outcomes: map[string]int64{"advanced": 7, "failed": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(f.ctx)

	a := f.get("/")
	if a.code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", a.code, a.body)
	}
	// Each state's row links to its jobs and shows its count beside a bar
	// whose width is its share of the largest count of the jobs still in
	// their states (Pending: 2 of 2, Estimating 1 of 2) or of the ended
	// ones (Failed: 1 of 1).
	wantBody(t, a,
		`<a href="/jobs?state=Failed">Failed</a>`, `data-field="counts.Failed">1</td>`,
		`data-field="counts.Pending">2</td>`, `width="100" data-bar="bars.Pending"`, `width="50" data-bar="bars.Estimating"`,
		`width="100" data-bar="bars.Failed"`, `data-field="counts.Completed">0</td>`, `width="0" data-bar="bars.Completed"`,
		`<span class="badge paused" data-if="paused">paused</span>`,
		`<li data-collection="held_coll"><span data-name>held_coll</span>`,
		// The worker is not paused itself, but the queue is: its row says so.
		`<td data-label="Stage">Estimating</td><td data-label="Worker">estimator-test-1<br><small>estimator v9.9.9</small></td><td data-label="Host">host-a</td><td data-label="State">waiting: the queue is paused</td>`,
		`<a href="/jobs/`+jids[1]+`">`+jids[1]+`</a>`, "advanced 7, failed 1",
		`data-live="/api/queue"`)
	// Read-only: no form that changes anything.
	wantNot(t, a, `action="/queue/pause"`, `action="/queue/unpause"`, `action="/collections/`, `name="csrf"`)
}

func TestQueueJSONFollowsTheQueue(t *testing.T) {
	f := newFixture(t, "")
	_, jids := f.batch("jdoe", 2)
	read := func() queueLive {
		t.Helper()
		a := f.get("/api/queue")
		if a.code != http.StatusOK || a.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET /api/queue: %d %s\n%s", a.code, a.header.Get("Content-Type"), a.body)
		}
		var q queueLive
		if err := json.Unmarshal([]byte(a.body), &q); err != nil {
			t.Fatal(err)
		}
		return q
	}
	q := read()
	if q.Counts["Pending"] != 2 || q.Counts["Failed"] != 0 || q.Total != 2 || q.Paused || q.Bars["Pending"] != 100 || len(q.Held) != 0 {
		t.Fatalf("before: %+v", q)
	}
	// No estimator takes the two pending jobs: Pending is stalled.
	if p := q.Stages["Pending"]; p.Status != "stalled" || p.Waiting != 2 || !q.Stalled || q.Running || q.Batches["Processing"] != 1 {
		t.Fatalf("health before: %+v", q)
	}
	f.fail(jids[0], "broken")
	if err := admin.New(f.q).Queue.Pause(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.New(f.q).Queue.HoldCollection(f.ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	q = read()
	if q.Counts["Pending"] != 1 || q.Counts["Failed"] != 1 || !q.Paused || q.Bars["Failed"] != 100 || fmt.Sprint(q.Held) != "[c1]" {
		t.Fatalf("after: %+v", q)
	}
}

func TestBatchesPageListsNewestFirstWithFiltersAndPaging(t *testing.T) {
	f := newFixture(t, "")
	first, _ := f.batch("alice", 1)
	failed, _ := f.failedBatch()
	held := f.heldBatch()
	last, _ := f.batch("alice", 2)

	a := f.get("/batches")
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	order := []string{last, held, failed, first}
	at := -1
	for _, bid := range order {
		i := strings.Index(a.body, `<a href="/batches/`+bid+`">`)
		if i < at {
			t.Fatalf("batches not newest first: %v\n%s", order, a.body)
		}
		at = i
	}
	wantBody(t, a, `<span class="state s-failed">Failed</span>`, `<a href="/jobs?batch=`+last+`">2 job(s)</a>: 0 completed, 0 failed, 2 live`,
		`<rect class="p-processing" x="0" y="0" height="10" width="100"`)

	tests := []struct {
		name     string
		query    string
		want     []string
		excluded []string
	}{
		{"status keeps only failed batches", "?status=Failed", []string{failed}, []string{first, held, last}},
		{"status is read as operators type it", "?status=held", []string{held}, []string{first, failed, last}},
		{"submitter keeps only alice's batches", "?submitter=alice", []string{first, last}, []string{failed, held}},
		{"the first page of two", "?size=2", []string{last, held}, []string{failed, first}},
		{"the page after the second newest", "?size=2&after=" + held, []string{failed, first}, []string{last, held}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.get("/batches" + tt.query)
			if a.code != http.StatusOK {
				t.Fatalf("%d\n%s", a.code, a.body)
			}
			for _, bid := range tt.want {
				wantBody(t, a, `<a href="/batches/`+bid+`">`)
			}
			for _, bid := range tt.excluded {
				wantNot(t, a, `<a href="/batches/`+bid+`">`)
			}
		})
	}
	// The first page links to the next with the same filters.
	wantBody(t, f.get("/batches?size=1&submitter=alice"), `<a href="/batches?after=`+last+`&amp;size=1&amp;submitter=alice" rel="next">`)
	a = f.get("/batches?size=2")
	wantBody(t, a, `<a href="/batches?after=`+held+`&amp;size=2" rel="next">Next page</a>`)
}

func TestBatchPageShowsSubmissionReportProgressAndJobs(t *testing.T) {
	f := newFixture(t, "")
	bid, jids := f.batch("jdoe", 3)
	f.fail(jids[0], "digest mismatch on a.txt")
	f.move(jids[1], "", queue.Estimating, queue.Provisioning, queue.Downloading, queue.Processing, queue.Storing,
		queue.Recording, queue.Notify, queue.Completed)
	a := f.get("/batches/" + bid)
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	wantBody(t, a, "Batch "+bid, `data-field="state" data-state-class>Processing</span>`,
		`data-field="segments.completed.count">1</span> completed`, `data-field="segments.failed.count">1</span> failed`,
		`data-field="segments.processing.count">1</span> live`,
		`<rect class="p-completed" x="0" y="0" height="10" width="33.33"`, `<rect class="p-failed" x="33.33"`,
		"<dt>Submitter</dt><dd>jdoe</dd>", "<dt>Collection</dt><dd>demo_coll</dd>",
		"manifest_of_manifests <span class=\"url\">http://127.0.0.1/batch.checkm</span>",
		"<code>4bf92f3577b34da6a3ce929d0e0e4736</code>", "No report sent yet.",
		`<a href="/jobs/`+jids[0]+`">`, `<a href="/jobs/`+jids[2]+`">`, "digest mismatch on a.txt",
		`data-live="/api/batches/`+bid+`"`)

	var live batchLive
	ja := f.get("/api/batches/" + bid)
	if err := json.Unmarshal([]byte(ja.body), &live); err != nil || ja.code != http.StatusOK {
		t.Fatalf("%d %v\n%s", ja.code, err, ja.body)
	}
	if live.State != "Processing" || live.Total != 3 || live.Segments["failed"].Count != 1 || live.Segments["completed"].Width != 33.33 {
		t.Fatalf("live batch %+v", live)
	}

	failed, _ := f.failedBatch()
	f.moveBatch(failed, queue.BatchUpdateReporting)
	bc, err := batches.New(f.q).ClaimBatch(f.ctx, failed)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(f.ctx, batches.BatchChange{To: queue.BatchFailed, Message: "still 1 failed",
		Report: &v1.StatusReport{LastModified: timestamppb.Now(), FailedJobs: []string{"jid0000000077"}}}); err != nil {
		t.Fatal(err)
	}
	wantBody(t, f.get("/batches/"+failed), "1 failed job(s), 0 successful.", `Failed: <a href="/jobs/jid0000000077">jid0000000077</a>`)

	// A report past what a node holds is stored trimmed: the page counts
	// the totals and says the lists are partial.
	f.moveBatch(failed, queue.BatchUpdateReporting)
	if bc, err = batches.New(f.q).ClaimBatch(f.ctx, failed); err != nil {
		t.Fatal(err)
	}
	many := make([]string, 70000)
	for i := range many {
		many[i] = fmt.Sprintf("jid%010d", 1_000_000+i)
	}
	if err := bc.Commit(f.ctx, batches.BatchChange{To: queue.BatchFailed, Message: "still 1 failed",
		Report: &v1.StatusReport{LastModified: timestamppb.Now(), FailedJobs: []string{"jid0000000077"}, SuccessfulJobs: many}}); err != nil {
		t.Fatal(err)
	}
	b, err := batches.New(f.q).GetBatch(f.ctx, failed)
	if err != nil {
		t.Fatal(err)
	}
	kept := len(b.GetStatusReport().GetSuccessfulJobs())
	if kept == 0 || kept >= len(many) {
		t.Fatalf("the report keeps %d of %d successful jobs", kept, len(many))
	}
	wantBody(t, f.get("/batches/"+failed), "1 failed job(s), 70000 successful.", "The report node lists only the first of these jobs",
		`<a href="/jobs/jid0001000199">jid0001000199</a> and 69800 more`)
}

func TestJobsPageListsByStateOrBatch(t *testing.T) {
	f := newFixture(t, "")
	bid, jids := f.batch("jdoe", 3)
	other, others := f.batch("jdoe", 1)
	f.fail(jids[0], "download of http://127.0.0.1/a.txt: HTTP 404")
	if _, err := admin.New(f.q).Jobs.Requeue(f.ctx, jids[0], 0, ""); err != nil {
		t.Fatal(err)
	}
	f.move(jids[0], "downloaded again and failed again", queue.Failed)
	prio := int32(2)
	cl, err := jobs.New(f.q).ClaimJob(f.ctx, jids[1])
	if err != nil {
		t.Fatal(err)
	}
	size := int64(2_500_000_000)
	if err := cl.Commit(f.ctx, jobs.Change{To: queue.Estimating, Priority: &prio, SpaceNeeded: &size}); err != nil {
		t.Fatal(err)
	}

	a := f.get("/jobs?state=failed")
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	// Retried once, failed after Downloading (its last successful state
	// stays Provisioning), message of the last failure.
	// Its local id and the stage it failed in are in the list.
	wantBody(t, a, "<h1>Failed jobs</h1>", `<option selected>Failed</option>`, `<a href="/jobs/`+jids[0]+`">`,
		`<td class="num" data-label="Priority">5</td><td class="num" data-label="Size">0 B</td><td class="num" data-label="Retries">1</td>`+
			"\n"+`<td data-label="Last successful">Provisioning</td>`,
		"downloaded again and failed again", `<td data-label="Local id">loc-0</td>`,
		`<span class="state s-failed">Failed</span> <small class="failed-in">in Downloading</small>`)
	wantNot(t, a, jids[1], jids[2], others[0])

	a = f.get("/jobs?state=Estimating")
	wantBody(t, a, `<a href="/jobs/`+jids[1]+`">`, `<td class="num" data-label="Priority">2</td><td class="num" data-label="Size">2.5 GB</td><td class="num" data-label="Retries">0</td>`)

	a = f.get("/jobs?batch=" + bid)
	for _, jid := range jids {
		wantBody(t, a, `<a href="/jobs/`+jid+`">`)
	}
	wantNot(t, a, others[0])
	wantBody(t, f.get("/jobs"), others[0], jids[2], `<a href="/batches/`+other+`">`)
	// Paging by state follows the queue order.
	a = f.get("/jobs?batch=" + bid + "&size=2")
	wantBody(t, a, jids[0], jids[1], `<a href="/jobs?after=`+jids[1]+`&amp;batch=`+bid+`&amp;size=2" rel="next">`)
	wantNot(t, a, `<a href="/jobs/`+jids[2]+`">`)
	wantBody(t, f.get("/jobs?after="+jids[1]+"&batch="+bid+"&size=2"), `<a href="/jobs/`+jids[2]+`">`, "First page")
}

func TestJobPageShowsEveryNodeAndItsTraceID(t *testing.T) {
	f := newFixture(t, "")
	bid, jids := f.batch("jdoe", 1)
	jid := jids[0]
	cl, err := jobs.New(f.q).ClaimJob(f.ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Commit(f.ctx, jobs.Change{To: queue.Estimating, By: "estimator-test-1", Message: "taken by the estimator",
		Identifiers: &v1.Identifiers{PrimaryId: "ark:/99999/fk4test", LocalId: []string{"loc-0", "loc-x"}},
		Store:       &v1.Store{ManifestUrl: "file:///store/ark_99999_fk4test/v1/manifest.checkm", Mode: "add", Version: 1},
		Inventory:   &v1.Inventory{ManifestUrl: "file:///store/ark_99999_fk4test/v1/manifest.checkm", Mode: "add"}}); err != nil {
		t.Fatal(err)
	}
	a := f.get("/jobs/" + jid)
	if a.code != http.StatusOK {
		t.Fatalf("%d\n%s", a.code, a.body)
	}
	wantBody(t, a, "Job "+jid, `data-field="state" data-state-class>Estimating</span>`,
		`<a href="/batches/`+bid+`">`+bid+`</a> (Processing)`,
		`<dd data-field="last_successful_status">Pending</dd>`, `<dd data-field="retry_count">0</dd>`,
		`<a href="https://tracing.example/trace/4bf92f3577b34da6a3ce929d0e0e4736" id="trace-link"><code id="trace-id">4bf92f3577b34da6a3ce929d0e0e4736</code></a>`,
		"traceparent 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"<dt>Profile</dt><dd>demo</dd>", "<dt>Collection</dt><dd>demo_coll</dd>",
		"<dt>Working directory</dt><dd><code>"+f.root.Job(bid, jid)+"</code></dd>",
		`<dt>ARK</dt><dd data-field="ark" id="ark">ark:/99999/fk4test</dd>`, `<dt>Local ids</dt><dd data-field="local_ids">loc-0, loc-x</dd>`,
		`<dt>Store</dt><dd id="store"><span data-field="store.summary">add version 1</span> <span class="url" data-field="store.url">file:///store/ark_99999_fk4test/v1/manifest.checkm</span>`,
		`<td data-label="Name">a.txt</td><td class="num" data-label="Size">1.2 MB (1234567 bytes)</td><td data-label="Digest"><code>md5:0cc175b9c0f1b6a831c399e269772661</code></td>`,
		// The full data as JSON (protojson varies its spacing), escaped for HTML.
		`&#34;primaryId&#34;:`, `&#34;ark:/99999/fk4test&#34;`, `&#34;workingDir&#34;:`, `&#34;retryCount&#34;:`,
		`data-live="/api/jobs/`+jid+`"`,
		// The timeline: its creation, then the move to Estimating.
		`<div class="scroll"><table class="list timeline" id="history">`,
		`<td data-label="From">created</td><td data-label="To"><span class="state s-pending">Pending</span></td><td class="num" data-label="Time in the state left">—</td>`,
		`<td data-label="From">Pending</td><td data-label="To"><span class="state s-estimating">Estimating</span></td>`,
		`<td data-label="By">estimator-test-1</td><td class="msg" data-label="Message">taken by the estimator</td>`)

	var live jobLive
	ja := f.get("/api/jobs/" + jid)
	if err := json.Unmarshal([]byte(ja.body), &live); err != nil || ja.code != http.StatusOK {
		t.Fatalf("%d %v\n%s", ja.code, err, ja.body)
	}
	if live.ID != jid || live.State != "Estimating" || live.LastSuccessful != "Pending" || live.Resume != "Estimating" || live.Locked != "no" {
		t.Fatalf("live job %+v", live)
	}
}

func TestBadAddressesAreRefusedWithTheAdminServiceMessage(t *testing.T) {
	f := newFixture(t, "")
	bid, _ := f.batch("jdoe", 1)
	tests := []struct {
		name string
		path string
		code int
		want []string
	}{
		{"an unknown job state", "/jobs?state=Bogus", http.StatusBadRequest, []string{"InvalidArgument", "unknown job state &#34;Bogus&#34;"}},
		{"state and batch at once", "/jobs?state=Failed&batch=" + bid, http.StatusBadRequest, []string{"InvalidArgument", "give one of them"}},
		{"a job id that is not one", "/jobs/jid42", http.StatusBadRequest, []string{"InvalidArgument", "job_id"}},
		{"a job that does not exist", "/jobs/jid0000099999", http.StatusNotFound, []string{"NotFound", "job jid0000099999 not found"}},
		{"a batch that does not exist", "/batches/bid0000099999", http.StatusNotFound, []string{"NotFound", "batch bid0000099999 not found"}},
		{"a page size over the limit", "/batches?size=501", http.StatusBadRequest, []string{"InvalidArgument", "page_size 501 is outside 0..500"}},
		{"a page size that is no number", "/jobs?size=ten", http.StatusBadRequest, []string{"InvalidArgument", "size &#34;ten&#34; is not a number"}},
		{"an unknown batch status", "/batches?status=Lost", http.StatusBadRequest, []string{"unknown batch state"}},
		{"a page token that is not a bid", "/batches?after=x", http.StatusBadRequest, []string{"page_token"}},
		{"a job as JSON that does not exist", "/api/jobs/jid0000099999", http.StatusNotFound, []string{`{"code":"NotFound","error":"job jid0000099999 not found"}`}},
		{"a page that does not exist", "/nowhere", http.StatusNotFound, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := f.get(tt.path)
			if a.code != tt.code {
				t.Fatalf("GET %s: %d, want %d\n%s", tt.path, a.code, tt.code, a.body)
			}
			wantBody(t, a, tt.want...)
		})
	}
}

func TestHostileBatchDataIsEscapedEverywhere(t *testing.T) {
	f := newFixture(t, "")
	const script = `<script>alert("x")</script>`
	bid, jids := f.batchOf(&v1.Submission{ProfileName: `"><img src=x onerror=alert(1)>`, Submitter: script,
		PayloadUrl: "javascript:alert(1)", Type: v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		Metadata: &v1.Metadata{Who: script, What: "</td></tr></table>" + script}, Collection: "c" + script}, 1, "</dd>"+script)
	f.fail(jids[0], "failed: "+script)
	pages := []string{"/batches", "/batches/" + bid, "/jobs?state=Failed", "/jobs/" + jids[0], "/"}
	for _, p := range pages {
		t.Run(p, func(t *testing.T) {
			a := f.get(p)
			if a.code != http.StatusOK {
				t.Fatalf("%d\n%s", a.code, a.body)
			}
			wantNot(t, a, "<script>alert", "<img src=x", `href="javascript`, `src="javascript`)
		})
	}
	wantBody(t, f.get("/batches/"+bid), "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;")
	wantBody(t, f.get("/jobs/"+jids[0]), "failed: &lt;script&gt;", "&lt;/dd&gt;&lt;script&gt;")
	// JSON escapes markup as well: the script sets it as text anyway.
	a := f.get("/api/jobs/" + jids[0])
	wantNot(t, a, "<script>")
	wantBody(t, a, `\u003cscript\u003e`)
}

func TestEveryAnswerCarriesTheSecurityHeaders(t *testing.T) {
	f := newFixture(t, testToken)
	requests := []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/signin"}, {"GET", "/static/console.js"}, {"GET", "/static/console.css"},
		{"GET", "/api/queue"}, {"GET", "/nowhere"}, {"PUT", "/"}, {"POST", "/queue/pause"},
	}
	for _, r := range requests {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			req, err := http.NewRequest(r.method, f.srv.URL+r.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			a := f.do(req)
			csp := a.header.Get("Content-Security-Policy")
			if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
				strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			for h, want := range map[string]string{"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
				"X-Content-Type-Options": "nosniff"} {
				if got := a.header.Get(h); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
		})
	}
	js := f.get("/static/console.js")
	if js.code != http.StatusOK || !strings.HasPrefix(js.header.Get("Content-Type"), "text/javascript") || !strings.Contains(js.body, "data-live") {
		t.Errorf("console.js: %d %s", js.code, js.header.Get("Content-Type"))
	}
}

// The JSON an open page polls, as its script reads it.
type (
	queueLive struct {
		Paused  bool `json:"paused"`
		Stalled bool `json:"stalled"`
		Running bool `json:"running"`
		Stages  map[string]struct {
			Status  string `json:"status"`
			Waiting int32  `json:"waiting"`
		} `json:"stages"`
		Batches map[string]int32   `json:"batches"`
		Total   int32              `json:"total"`
		Counts  map[string]int32   `json:"counts"`
		Bars    map[string]float64 `json:"bars"`
		Held    []string           `json:"held_collections"`
	}
	batchLive struct {
		State    string `json:"state"`
		Total    int32  `json:"total"`
		Segments map[string]struct {
			Count int32   `json:"count"`
			Width float64 `json:"width"`
		} `json:"segments"`
	}
	jobLive struct {
		ID             string `json:"id"`
		State          string `json:"state"`
		LastSuccessful string `json:"last_successful_status"`
		Resume         string `json:"resume"`
		Locked         string `json:"locked"`
	}
)
