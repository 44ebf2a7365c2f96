package batchrun

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/batcher/internal/smtptest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/telemetry"
	"github.com/ingestq/ingestq/shared/waittest"
)

const objectManifest = `#%checkm_0.7
#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-ingest-manifest
#%prefix | mrt: | http://merritt.cdlib.org/terms#
#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#
#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName
{{base}}/files/a.txt | md5 | 0cc175b9c0f1b6a831c399e269772661 | 1 | 2026-01-02T03:04:05Z | a.txt
{{base}}/files/b.txt | | | | | sub/b%7cc.txt
#%eof
`

const batchFields = "#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:primaryIdentifier | mrt:localIdentifier | mrt:creator | mrt:title | mrt:date\n"

const manifestOfManifests = `#%checkm_0.7
#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-batch-manifest
#%prefix | mrt: | http://merritt.cdlib.org/terms#
#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#
` + batchFields + `{{base}}/letters.checkm | | | | | letters.checkm | | loc-letters | Hale, Margaret | Letters | 1921
{{base}}/diary.checkm | | | | | diary.checkm | ark:/99999/fk4diary | loc-diary | Hale, Thomas | Diary | 1944
{{base}}/map.checkm | | | | | map.checkm | | | | |
#%eof
`

const manifestOfContainers = `#%checkm_0.7
#%profile | http://uc3.cdlib.org/registry/ingest/manifest/mrt-container-batch-manifest
#%prefix | mrt: | http://merritt.cdlib.org/terms#
#%prefix | nfo: | http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#
` + batchFields + `{{base}}/one.zip | sha256 | 8283667e256616131f4a064c57cb280ae5c45fdb6015f7f2d5e42f81d663c8a6 | 25 | | one.zip | | loc-one | Creator One | Title One | 2001
{{base}}/two.tar.gz | | | 99 | | two.tar.gz | ark:/99999/fk4two | loc-two | | Title Two |
#%eof
`

// checkCommon checks what every job of a batch shares.
func checkCommon(t *testing.T, h *harness, bid string, j *v1.Job, entry int, payloadURL string, pt v1.PayloadType) {
	t.Helper()
	c := j.GetConfiguration()
	if c.GetPayloadUrl() != payloadURL || c.GetPayloadType() != pt {
		t.Errorf("job %s: payload %s (%s), want %s (%s)", j.GetId(), c.GetPayloadUrl(), c.GetPayloadType(), payloadURL, pt)
	}
	if c.GetProfileName() != "demo" || c.GetCollection() != "demo_coll" || c.GetSubmitter() != "jdoe" {
		t.Errorf("job %s: profile %q collection %q submitter %q", j.GetId(), c.GetProfileName(), c.GetCollection(), c.GetSubmitter())
	}
	if c.GetSubmissionMode() != v1.SubmissionMode_SUBMISSION_MODE_ADD {
		t.Errorf("job %s: submission mode %s", j.GetId(), c.GetSubmissionMode())
	}
	if want := h.root.Job(bid, j.GetId()); c.GetWorkingDir() != want {
		t.Errorf("job %s: working_dir %q, want %q", j.GetId(), c.GetWorkingDir(), want)
	}
	checkJobTrace(t, h, bid, j)
	if j.GetPriority() != 7 || j.GetBid() != bid || j.GetStatus().GetStatus() != queue.Pending {
		t.Errorf("job %s: priority %d bid %s status %s, want 7 %s Pending", j.GetId(), j.GetPriority(), j.GetBid(), j.GetStatus().GetStatus(), bid)
	}
}

// submissionTrace is the trace id of the traceparent harness.submit stores.
const submissionTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// checkJobTrace checks that job j has a trace of its own, whose root span
// ("created <jid>") links to the batch's span in the submission's trace,
// and that the job's status carries the same traceparent.
func checkJobTrace(t *testing.T, h *harness, bid string, j *v1.Job) {
	t.Helper()
	tp := j.GetConfiguration().GetTraceparent()
	id := telemetry.TraceID(tp)
	if id == "" || id == submissionTrace {
		t.Errorf("job %s: traceparent %q is not a trace of its own", j.GetId(), tp)
		return
	}
	if j.GetStatus().GetTraceparent() != tp {
		t.Errorf("job %s: status traceparent %q, configuration %q", j.GetId(), j.GetStatus().GetTraceparent(), tp)
	}
	for _, s := range h.spans.GetSpans() {
		if s.SpanContext.TraceID().String() != id {
			continue
		}
		if s.Name != "created "+j.GetId() || s.Parent.IsValid() {
			t.Errorf("job %s: span %q (parent %v) in its trace, want the root span created %s", j.GetId(), s.Name, s.Parent.SpanID(), j.GetId())
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != submissionTrace {
			t.Errorf("job %s: root span links %v, want one to the batch's trace %s", j.GetId(), s.Links, submissionTrace)
		}
		return
	}
	t.Errorf("job %s: no span of its trace %s was ended", j.GetId(), id)
}

func TestEachPayloadTypeBecomesItsJobs(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.dep.put("/object.checkm", objectManifest)
	h.dep.put("/batch.checkm", manifestOfManifests)
	h.dep.put("/containers.checkm", manifestOfContainers)
	base := h.dep.url("")

	t.Run("a file is one job whose manifest is that file", func(t *testing.T) {
		u := base + "/deposits/report%20final.pdf?x=1"
		bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_FILE)
		h.waitBatch(bid, queue.BatchProcessing)
		jobs := h.jobs(bid)
		if len(jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs))
		}
		checkCommon(t, h, bid, jobs[0], 0, u, v1.PayloadType_PAYLOAD_TYPE_FILE)
		files := jobs[0].GetManifest().GetFiles()
		if len(files) != 1 || files[0].GetUrl() != u || files[0].GetName() != "report final.pdf" || files[0].GetSize() != -1 {
			t.Errorf("manifest %v, want one file %s named \"report final.pdf\" of unknown size", files, u)
		}
		if m := jobs[0].GetMetadata(); m.GetWho() != "Hale, Margaret" || m.GetWhat() != "Letters" || m.GetWhen() != "1921" {
			t.Errorf("metadata %v, want the submission's", m)
		}
	})
	t.Run("a container is one job whose manifest is the archive", func(t *testing.T) {
		u := base + "/deposits/object.zip"
		bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
		h.waitBatch(bid, queue.BatchProcessing)
		jobs := h.jobs(bid)
		if len(jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs))
		}
		checkCommon(t, h, bid, jobs[0], 0, u, v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
		if files := jobs[0].GetManifest().GetFiles(); len(files) != 1 || files[0].GetName() != "object.zip" {
			t.Errorf("manifest %v, want object.zip", files)
		}
	})
	t.Run("an object manifest is one job keeping every file, size and digest; %7c in a name is a '|'", func(t *testing.T) {
		u := base + "/object.checkm"
		bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
		h.waitBatch(bid, queue.BatchProcessing)
		jobs := h.jobs(bid)
		if len(jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(jobs))
		}
		checkCommon(t, h, bid, jobs[0], 0, u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
		files := jobs[0].GetManifest().GetFiles()
		want := []*v1.ManifestFile{
			{Url: base + "/files/a.txt", HashAlgorithm: "md5", HashValue: "0cc175b9c0f1b6a831c399e269772661", Size: 1, LastModified: "2026-01-02T03:04:05Z", Name: "a.txt"},
			{Url: base + "/files/b.txt", Size: -1, Name: "sub/b|c.txt"},
		}
		if fmt.Sprint(files) != fmt.Sprint(want) {
			t.Errorf("manifest\n%v\nwant\n%v", files, want)
		}
	})
	t.Run("a manifest of manifests is one object-manifest job per row, with its identifiers and no file list yet", func(t *testing.T) {
		bid := h.submit("demo", base+"/batch.checkm", v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
		h.waitBatch(bid, queue.BatchProcessing)
		jobs := h.jobs(bid)
		if len(jobs) != 3 {
			t.Fatalf("%d jobs, want 3", len(jobs))
		}
		want := []struct {
			url, ark, local, who, what, when string
		}{
			{base + "/letters.checkm", "", "loc-letters", "Hale, Margaret", "Letters", "1921"},
			{base + "/diary.checkm", "ark:/99999/fk4diary", "loc-diary", "Hale, Thomas", "Diary", "1944"},
			{base + "/map.checkm", "", "", "", "", ""},
		}
		for i, w := range want {
			j := jobs[i]
			checkCommon(t, h, bid, j, i, w.url, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
			if j.GetManifest() != nil {
				t.Errorf("job %d has a manifest already: the Pending stage fetches it", i)
			}
			ids := j.GetIdentifiers()
			if ids.GetPrimaryId() != w.ark || strings.Join(ids.GetLocalId(), ",") != w.local {
				t.Errorf("job %d identifiers %v, want ark %q local %q", i, ids, w.ark, w.local)
			}
			m := j.GetMetadata()
			if m.GetWho() != w.who || m.GetWhat() != w.what || m.GetWhen() != w.when {
				t.Errorf("job %d metadata %v, want the row's %q %q %q", i, m, w.who, w.what, w.when)
			}
		}
	})
	t.Run("a manifest of containers is one container job per row, its archive with digest and size", func(t *testing.T) {
		bid := h.submit("demo", base+"/containers.checkm", v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS)
		h.waitBatch(bid, queue.BatchProcessing)
		jobs := h.jobs(bid)
		if len(jobs) != 2 {
			t.Fatalf("%d jobs, want 2", len(jobs))
		}
		checkCommon(t, h, bid, jobs[0], 0, base+"/one.zip", v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
		checkCommon(t, h, bid, jobs[1], 1, base+"/two.tar.gz", v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
		f := jobs[0].GetManifest().GetFiles()
		if len(f) != 1 || f[0].GetHashAlgorithm() != "sha256" || f[0].GetSize() != 25 || f[0].GetName() != "one.zip" {
			t.Errorf("job 0 manifest %v", f)
		}
		if ids := jobs[1].GetIdentifiers(); ids.GetPrimaryId() != "ark:/99999/fk4two" || ids.GetLocalId()[0] != "loc-two" {
			t.Errorf("job 1 identifiers %v", ids)
		}
		if m := jobs[1].GetMetadata(); m.GetWhat() != "Title Two" || m.GetWho() != "" {
			t.Errorf("job 1 metadata %v", m)
		}
	})
	// The demo profile asks for a "batch queued" mail: one per batch.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, err := h.smtp.WaitFor(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if !strings.Contains(m.Header.Get("Subject"), "queued") || !strings.HasSuffix(m.Header.Get("Message-ID"), "-queued@localhost>") {
			t.Errorf("unexpected mail %q %q", m.Header.Get("Subject"), m.Header.Get("Message-ID"))
		}
	}
}

func TestAnUnusablePayloadFailsTheBatchWithAMessageNamingWhatIsWrong(t *testing.T) {
	h := newHarness(t)
	h.start()
	corrupt := strings.Replace(objectManifest, "| 1 |", "| one |", 1)
	for _, tc := range []struct {
		name, path, doc string
		pt              v1.PayloadType
		want            []string
	}{
		{"a corrupt object manifest names the line", "/corrupt.checkm", corrupt, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			[]string{"object manifest", "/corrupt.checkm", "line 6"}},
		{"an empty manifest", "/empty.checkm", "#%checkm_0.7\n" + batchFields + "#%eof\n", v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
			[]string{"manifest of manifests", "/empty.checkm", "line"}},
		{"a row of a batch manifest with a scheme that is not allowed", "/ftp.checkm",
			"#%checkm_0.7\n" + batchFields + "{{base}}/ok.checkm | | | | | ok.checkm | | | | |\nftp://127.0.0.1/x.checkm | | | | | x.checkm | | | | |\n#%eof\n",
			v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, []string{"line 4", "ftp"}},
		{"a row of a batch manifest on an internal address not allowed", "/internal.checkm",
			"#%checkm_0.7\n" + batchFields + "{{base}}/ok.checkm | | | | | ok.checkm | | | | |\nhttp://10.1.2.3/x.checkm | | | | | x.checkm | | | | |\n#%eof\n",
			v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, []string{"line 4", "http://10.1.2.3/x.checkm: address denied by policy: 10.1.2.3 is in 10.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=10.0.0.0/8 allows it)"}},
		{"a row of an object manifest on a loopback address not allowed", "/loopback.checkm",
			"#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:fileName\n{{base}}/files/a.txt | a.txt\nhttp://127.0.0.2/b.txt | b.txt\n#%eof\n",
			v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, []string{"line 4", "127.0.0.2 is in 127.0.0.0/8, an internal range denied unless allowed (INGESTQ_FETCH_ALLOW=127.0.0.0/8 allows it)"}},
		{"a manifest of containers submitted as a manifest of manifests", "/wrong-profile.checkm", manifestOfContainers,
			v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, []string{"mrt-container-batch-manifest", "manifest_of_containers"}},
		{"a manifest the server does not have", "/missing.checkm", "", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			[]string{"/missing.checkm", "404"}},
		{"two rows writing the same file", "/twice.checkm", strings.Replace(objectManifest, "| sub/b%7cc.txt", "| a.txt", 1),
			v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, []string{"line 7", "a.txt", "line 6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := h.dep.url(tc.path)
			if tc.doc != "" {
				h.dep.put(tc.path, tc.doc)
			}
			bid := h.submit("demo", u, tc.pt)
			b := h.waitBatch(bid, queue.BatchFailed)
			for _, w := range tc.want {
				if !strings.Contains(b.GetStatus().GetMessage(), w) {
					t.Errorf("message %q does not contain %q", b.GetStatus().GetMessage(), w)
				}
			}
			if n := b.GetCounts(); n.GetProcessing()+n.GetCompleted()+n.GetFailed() != 0 {
				t.Errorf("a failed payload left jobs: %v", n)
			}
		})
	}
}

// TestAnObjectTooLongForAJobsNodeIsOneJobWithoutAFileList: an object
// manifest whose file list would take more than a job's manifest node may
// hold (queue.MaxInlineFileListBytes) is checked as any other, then becomes
// one job with no file list in ZooKeeper: the estimator fetches it and keeps
// it in the job's working folder. A bad row still fails the batch here.
func TestAnObjectTooLongForAJobsNodeIsOneJobWithoutAFileList(t *testing.T) {
	h := newHarness(t)
	h.start()
	bid := h.submit("demo", h.dep.put("/huge.checkm", hugeObjectManifest(5000)), v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	h.waitBatch(bid, queue.BatchProcessing)
	js := h.jobs(bid)
	if len(js) != 1 {
		t.Fatalf("batch %s has %d jobs; want 1", bid, len(js))
	}
	if m := js[0].GetManifest(); m != nil {
		t.Errorf("the job's manifest node holds %d files (kept: %v); want none, the list left to the estimator", len(m.GetFiles()), m.GetKept())
	}
	if got := js[0].GetConfiguration().GetPayloadType(); got != v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST {
		t.Errorf("payload type %v; want an object manifest", got)
	}

	bad := strings.Replace(hugeObjectManifest(5000), "/004000.tif | page-004000.tif", "/004000.tif | ../page-004000.tif", 1)
	bid = h.submit("demo", h.dep.put("/huge-bad.checkm", bad), v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	if msg := h.waitBatch(bid, queue.BatchFailed).GetStatus().GetMessage(); !strings.Contains(msg, "line 4003") {
		t.Errorf("message %q does not name line 4003", msg)
	}
}

// hugeObjectManifest lists n files with long URLs.
func hugeObjectManifest(n int) string {
	var b strings.Builder
	b.WriteString("#%checkm_0.7\n#%fields | nfo:fileUrl | nfo:fileName\n")
	for i := range n {
		fmt.Fprintf(&b, "{{base}}/files/%s/%06d.tif | page-%06d.tif\n", strings.Repeat("d", 160), i, i)
	}
	return b.String() + "#%eof\n"
}

func TestAServerErrorIsRetriedBeforeTheBatchFails(t *testing.T) {
	h := newHarness(t)
	h.start()
	u := h.dep.put("/flaky.checkm", objectManifest)
	h.dep.mu.Lock()
	h.dep.fails["/flaky.checkm"] = 503
	h.dep.mu.Unlock()
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	b := h.waitBatch(bid, queue.BatchFailed)
	if !strings.Contains(b.GetStatus().GetMessage(), "503") {
		t.Errorf("message %q does not name the 503", b.GetStatus().GetMessage())
	}
	if n := h.dep.fetches("/flaky.checkm"); n != 2 {
		t.Errorf("fetched %d times, want 2 (Attempts)", n)
	}
}

func TestABatchOfAHeldCollectionWaitsHeldUntilReleased(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	if err := admin.New(h.q).Queue.HoldCollection(ctx, "demo_coll"); err != nil {
		t.Fatal(err)
	}
	u := h.dep.put("/object.checkm", objectManifest)
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	b := h.waitBatch(bid, queue.BatchHeld)
	if msg := b.GetStatus().GetMessage(); !strings.Contains(msg, "collection demo_coll is held") {
		t.Errorf("held message %q does not name the collection", msg)
	}
	if h.dep.fetches("/object.checkm") != 0 {
		t.Error("the payload of a held batch was fetched")
	}
	// Another collection's batch goes on meanwhile.
	other := h.submit("quiet", u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	h.waitBatch(other, queue.BatchProcessing)

	if err := admin.New(h.q).Queue.ReleaseCollection(ctx, "demo_coll"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.New(h.q).Batches.Release(ctx, bid); err != nil {
		t.Fatal(err)
	}
	h.waitBatch(bid, queue.BatchProcessing)
	if jobs := h.jobs(bid); len(jobs) != 1 || len(jobs[0].GetManifest().GetFiles()) != 2 {
		t.Errorf("released batch has %d jobs, want 1 with 2 files", len(jobs))
	}
}

func TestAPausedQueueTakesNoBatchUntilUnpaused(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if err := admin.New(h.q).Queue.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	h.start()
	bid := h.submit("demo", h.dep.url("/a.pdf"), v1.PayloadType_PAYLOAD_TYPE_FILE)
	// The batcher sees the batch through its feed: in the time it has to
	// act, it leaves the batch alone.
	waittest.Stays(t, time.Second, func() error {
		if b, _ := batches.New(h.q).GetBatch(ctx, bid); b.GetStatus().GetStatus() != queue.BatchPending {
			return fmt.Errorf("batch is %s while the queue is paused, want Pending", b.GetStatus().GetStatus())
		}
		return nil
	})
	if err := admin.New(h.q).Queue.Unpause(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitBatch(bid, queue.BatchProcessing)
}

// body decodes a delivered message's quoted-printable body.
func body(t *testing.T, m smtptest.Message) string {
	t.Helper()
	b, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(m.Body)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), "\r\n", "\n")
}

// reportMail waits for the mail with Message-ID <key@localhost>.
func reportMail(t *testing.T, h *harness, key string) smtptest.Message {
	t.Helper()
	var found smtptest.Message
	waittest.True(t, 30*time.Second, "mail "+key+" arrived", func() bool {
		for _, m := range h.smtp.Messages() {
			if m.Header.Get("Message-ID") == "<"+key+"@localhost>" {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func TestABatchWhoseJobsAllCompleteIsReportedCompletedAndMailed(t *testing.T) {
	h := newHarness(t)
	h.start()
	u := h.dep.put("/batch.checkm", manifestOfManifests)
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	h.waitBatch(bid, queue.BatchProcessing)
	jobs := h.jobs(bid)
	for i, j := range jobs {
		h.finish(j.GetId(), fmt.Sprintf("ark:/99999/fk4obj%d", i), "")
	}
	b := h.waitBatch(bid, queue.BatchCompleted)
	rep := b.GetStatusReport()
	if len(rep.GetSuccessfulJobs()) != 3 || len(rep.GetFailedJobs()) != 0 {
		t.Errorf("status-report %v, want 3 successful, 0 failed", rep)
	}
	if !strings.Contains(b.GetStatus().GetMessage(), "all 3 object(s) completed") {
		t.Errorf("status message %q", b.GetStatus().GetMessage())
	}
	m := reportMail(t, h, bid+"-report")
	text := body(t, m)
	for _, want := range []string{"Report on ingestq batch " + bid, "Completed (3):", jobs[0].GetId() + "  ark:/99999/fk4obj0  local id loc-letters",
		"ark:/99999/fk4obj1", "Profile:     demo (collection demo_coll)"} {
		if !strings.Contains(text, want) {
			t.Errorf("report mail lacks %q:\n%s", want, text)
		}
	}
	if m.To[0] != "depositor@example.org" {
		t.Errorf("report mailed to %v", m.To)
	}
}

func TestAFailedJobRequeuedAndCompletedIsListedInTheUpdateReport(t *testing.T) {
	h := newHarness(t)
	h.start()
	ctx := context.Background()
	u := h.dep.put("/batch.checkm", manifestOfManifests)
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	h.waitBatch(bid, queue.BatchProcessing)
	jobs := h.jobs(bid)
	h.finish(jobs[0].GetId(), "ark:/99999/fk4a", "")
	h.finish(jobs[1].GetId(), "", "GET http://127.0.0.1/diary.txt: HTTP 404 Not Found")
	h.finish(jobs[2].GetId(), "ark:/99999/fk4c", "")

	b := h.waitBatch(bid, queue.BatchFailed)
	if rep := b.GetStatusReport(); strings.Join(rep.GetFailedJobs(), ",") != jobs[1].GetId() || len(rep.GetSuccessfulJobs()) != 2 {
		t.Errorf("first status-report %v", rep)
	}
	first := body(t, reportMail(t, h, bid+"-report"))
	rec := httptest.NewRecorder()
	h.tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if want := `ingestq_mails_total{kind="report",outcome="sent"} 1`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("the report mailed is not counted: no %s", want)
	}
	for _, want := range []string{"failed: 1 of 3 object(s) failed", "Failed (1):", jobs[1].GetId() + "  ark:/99999/fk4diary  local id loc-diary",
		"      failed in Downloading: GET http://127.0.0.1/diary.txt: HTTP 404 Not Found"} {
		if !strings.Contains(first, want) {
			t.Errorf("first report lacks %q:\n%s", want, first)
		}
	}

	// The operator requeues the failed job; it completes; update-reporting.
	if _, err := admin.New(h.q).Jobs.Requeue(ctx, jobs[1].GetId(), 0, ""); err != nil {
		t.Fatal(err)
	}
	h.resume(jobs[1].GetId(), "ark:/99999/fk4diary")
	// A requeued job that ends does not report the Failed batch again.
	waittest.Stays(t, 300*time.Millisecond, func() error {
		if b, _ := batches.New(h.q).GetBatch(ctx, bid); b.GetStatus().GetStatus() != queue.BatchFailed {
			return fmt.Errorf("batch is %s before update-reporting, want Failed", b.GetStatus().GetStatus())
		}
		return nil
	})
	if _, err := admin.New(h.q).Batches.UpdateReport(ctx, bid); err != nil {
		t.Fatal(err)
	}
	b = h.waitBatch(bid, queue.BatchCompleted)
	if rep := b.GetStatusReport(); len(rep.GetFailedJobs()) != 0 || len(rep.GetSuccessfulJobs()) != 3 {
		t.Errorf("second status-report %v, want 3 successful, 0 failed", rep)
	}
	key := bid + "-report-after-"
	var second smtptest.Message
	waittest.True(t, 30*time.Second, "an update report mailed", func() bool {
		for _, m := range h.smtp.Messages() {
			if strings.HasPrefix(m.Header.Get("Message-ID"), "<"+key) {
				second = m
			}
		}
		return second.Data != nil
	})
	text := body(t, second)
	for _, want := range []string{"Update report on ingestq batch " + bid, "Completed since the last report (1):", jobs[1].GetId() + "  ark:/99999/fk4diary"} {
		if !strings.Contains(text, want) {
			t.Errorf("update report lacks %q:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{jobs[0].GetId(), "Failed ("} {
		if strings.Contains(text, unwanted) {
			t.Errorf("update report mentions %q, which did not change:\n%s", unwanted, text)
		}
	}
}

func TestAReportIsMailedOnceTheMailServerAcceptsAgain(t *testing.T) {
	h := newHarness(t)
	h.smtp.Refuse(true)
	h.start()
	bid := h.submit("quiet", h.dep.url("/a.pdf"), v1.PayloadType_PAYLOAD_TYPE_FILE)
	h.waitBatch(bid, queue.BatchProcessing)
	jobs := h.jobs(bid)
	h.finish(jobs[0].GetId(), "ark:/99999/fk4a", "")
	// The batch waits in Reporting while the server refuses.
	reporting := func(why string) func() error {
		return func() error {
			b, err := batches.New(h.q).GetBatch(context.Background(), bid)
			if err != nil {
				t.Fatal(err)
			}
			if s := b.GetStatus().GetStatus(); s != queue.BatchReporting {
				return fmt.Errorf("batch is %s, want Reporting %s", queue.BatchStateName(s), why)
			}
			return nil
		}
	}
	waittest.Until(t, 30*time.Second, reporting("while mail is refused"))
	waittest.Stays(t, 200*time.Millisecond, reporting("until its report is mailed"))
	h.smtp.Refuse(false)
	h.waitBatch(bid, queue.BatchCompleted)
	reportMail(t, h, bid+"-report")
}

func TestAHalfSpawnedBatchIsFinishedByAnotherBatcherWithoutDuplicates(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	var rows strings.Builder
	rows.WriteString("#%checkm_0.7\n" + batchFields)
	const n = 25
	for i := range n {
		fmt.Fprintf(&rows, "{{base}}/obj%02d.checkm | | | | | obj%02d.checkm | | loc%02d | | |\n", i, i, i)
	}
	u := h.dep.put("/many.checkm", rows.String())
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)

	// The first batcher: takes the batch, creates 10 of its 25 jobs, dies.
	first := h.connect()
	bc, err := batches.New(first).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.Commit(ctx, batches.BatchChange{To: queue.BatchProcessing}); err != nil {
		t.Fatal(err)
	}
	prof, _ := h.profiles.Get("demo")
	planned, _, err := h.cfg.Planner.Plan(ctx, bid, bc.Batch.GetSubmission(), bc.Merritt, prof)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range [][]batches.NewJob{planned[0:4], planned[4:10]} {
		if _, err := bc.CreateJobs(ctx, chunk); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()

	// A second batcher finishes it.
	h.cfg.Chunk = 7
	h.start()
	waittest.Until(t, 30*time.Second, func() error {
		if b := h.waitBatch(bid, queue.BatchProcessing); b.GetCounts().GetProcessing() != n {
			return fmt.Errorf("batch has %d jobs, want %d", b.GetCounts().GetProcessing(), n)
		}
		return nil
	})
	bc, err = batches.New(h.q).ClaimBatch(ctx, bid)
	if err != nil {
		t.Fatal(err)
	}
	if bc.Spawning {
		t.Error("the batch is still marked spawning")
	}
	bc.Release(ctx)
	jobs := h.jobs(bid) // fails on a duplicate or missing batch entry
	if len(jobs) != n {
		t.Fatalf("%d jobs, want %d", len(jobs), n)
	}
	for i, j := range jobs {
		if want := fmt.Sprintf("loc%02d", i); j.GetIdentifiers().GetLocalId()[0] != want {
			t.Errorf("entry %d has local id %v, want %s", i, j.GetIdentifiers().GetLocalId(), want)
		}
	}
	// The queued notice was sent once, by the batcher that finished.
	msgs, _ := h.smtp.WaitFor(context.Background(), 1)
	if len(msgs) != 1 || !strings.Contains(body(t, msgs[0]), fmt.Sprintf("%d object(s)", n)) {
		t.Errorf("queued notices: %d", len(msgs))
	}
}

func TestBatchesThatWouldOverfillTheQueueWaitInPendingOldestFirstUntilRoomIsMade(t *testing.T) {
	h := newHarness(t)
	h.cfg.MaxQueuedJobs = 4 // a manifest of manifests here is 3 jobs
	h.cfg.RoomRetry = 50 * time.Millisecond
	h.start()
	ctx := context.Background()
	first := h.submit("quiet", h.dep.put("/first.checkm", manifestOfManifests), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	h.waitBatch(first, queue.BatchProcessing)

	second := h.submit("quiet", h.dep.put("/second.checkm", manifestOfManifests), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	b := h.waitForRoom(second)
	want := "waiting for room in the queue: it holds 3 jobs, this batch has 3, at most 4 at once (INGESTQ_MAX_QUEUED_JOBS)"
	if msg := b.GetStatus().GetMessage(); !strings.HasPrefix(msg, want) {
		t.Errorf("message %q, want it to start %q", msg, want)
	}
	// Looked at again and again meanwhile, it gets no job.
	waittest.Stays(t, 20*h.cfg.RoomRetry, func() error {
		if b := h.waitBatch(second, queue.BatchPending); len(h.jobs(second)) != 0 {
			return fmt.Errorf("the waiting batch has %d jobs (%v)", len(h.jobs(second)), b.GetStatus())
		}
		return nil
	})
	if n := h.dep.fetches("/second.checkm"); n != 1 {
		t.Errorf("the waiting batch's payload was fetched %d times, want once", n)
	}
	// A batch of one job would fit, but the older batch has the room first.
	third := h.submit("quiet", h.dep.url("/deposits/one.pdf"), v1.PayloadType_PAYLOAD_TYPE_FILE)
	b = h.waitForRoom(third)
	if want := "waiting for room in the queue behind the older batch " + second; b.GetStatus().GetMessage() != want {
		t.Errorf("third batch says %q, want %q", b.GetStatus().GetMessage(), want)
	}

	// The first batch ends and is cleaned up: its room goes to the second.
	for i, j := range h.jobs(first) {
		h.finish(j.GetId(), fmt.Sprintf("ark:/99999/fk4obj%d", i), "")
	}
	h.waitBatch(first, queue.BatchCompleted)
	res, err := admin.New(h.q).Batches.Cleanup(ctx, -1, 0)
	if err != nil || !slices.Contains(res.Batches, first) {
		t.Fatalf("cleanup removed %v (%v), want %s", res.Batches, err, first)
	}
	h.waitBatch(second, queue.BatchProcessing)
	if jobs := h.jobs(second); len(jobs) != 3 {
		t.Errorf("the admitted batch has %d jobs, want 3", len(jobs))
	}
	h.waitBatch(third, queue.BatchProcessing) // 3 + 1 fit the bound of 4
}

func TestABatchLargerThanTheQueueMayHoldFailsBeforeAnyJobExists(t *testing.T) {
	h := newHarness(t)
	h.cfg.MaxQueuedJobs = 2
	h.start()
	bid := h.submit("quiet", h.dep.put("/batch.checkm", manifestOfManifests), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	b := h.waitBatch(bid, queue.BatchFailed)
	want := "the batch has 3 jobs, more than the queue holds at once (at most 2, INGESTQ_MAX_QUEUED_JOBS): split it into batches of at most 2 jobs"
	if msg := b.GetStatus().GetMessage(); !strings.HasPrefix(msg, want) {
		t.Errorf("message %q, want it to start %q", msg, want)
	}
	if n, err := jobs.NewReader(h.q).JobTotal(context.Background()); err != nil || n != 0 {
		t.Errorf("the queue holds %d jobs (%v), want none", n, err)
	}
}

func TestBatchesSubmittedTogetherAreNotAllAdmittedIntoTheSameRoom(t *testing.T) {
	h := newHarness(t)
	h.cfg.MaxQueuedJobs = 4 // room for one batch of 3
	h.cfg.Concurrency = 4
	h.start()
	var bids []string
	for i := range 3 {
		bids = append(bids, h.submit("quiet", h.dep.put(fmt.Sprintf("/b%d.checkm", i), manifestOfManifests), v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS))
	}
	waittest.Until(t, 30*time.Second, func() error {
		processing, waiting := 0, 0
		for _, bid := range bids {
			b, err := batches.New(h.q).GetBatch(context.Background(), bid)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case b.GetStatus().GetStatus() == queue.BatchProcessing && !b.GetLocked(): // spawned
				processing++
			case strings.HasPrefix(b.GetStatus().GetMessage(), "waiting for room"):
				waiting++
			}
		}
		if processing+waiting != len(bids) {
			return fmt.Errorf("%d batches processing, %d waiting, of %d", processing, waiting, len(bids))
		}
		if processing != 1 {
			t.Fatalf("%d batches of 3 jobs admitted under a bound of 4, want 1", processing)
		}
		return nil
	})
	if n, err := jobs.NewReader(h.q).JobTotal(context.Background()); err != nil || n != 3 {
		t.Errorf("the queue holds %d jobs (%v), want 3", n, err)
	}
}

// TestAPayloadThatCannotBeUsedIsReportedToItsDepositor: a batch whose
// payload is unusable (a manifest the server does not have) has no job; it
// goes through Reporting to Failed, its report stored and mailed once,
// naming the reason and what to do, and its status keeps the reason.
func TestAPayloadThatCannotBeUsedIsReportedToItsDepositor(t *testing.T) {
	h := newHarness(t)
	h.start()
	u := h.dep.url("/missing.checkm")
	bid := h.submit("demo", u, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	b := h.waitBatch(bid, queue.BatchFailed)
	for _, want := range []string{"/missing.checkm", "404"} {
		if !strings.Contains(b.GetStatus().GetMessage(), want) {
			t.Errorf("status message %q lacks %q", b.GetStatus().GetMessage(), want)
		}
	}
	if b.GetStatusReport() == nil {
		t.Error("the failed batch has no status-report: it was not reported")
	}
	m := reportMail(t, h, bid+"-report")
	text := body(t, m)
	for _, want := range []string{"Report on ingestq batch " + bid, "Result:      failed: fetching payload " + u, "404",
		"What to do:  correct the payload (" + u + ")", "submit it again as a new batch"} {
		if !strings.Contains(text, want) {
			t.Errorf("report mail lacks %q:\n%s", want, text)
		}
	}
	if subject := m.Header.Get("Subject"); !strings.Contains(subject, "failed: fetching payload") {
		t.Errorf("subject %q does not say the payload failed", subject)
	}
	n := 0
	for _, m := range h.smtp.Messages() {
		if m.Header.Get("Message-ID") == "<"+bid+"-report@localhost>" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d report mails, want 1", n)
	}
}
