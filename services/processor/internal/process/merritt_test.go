package process

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/serving"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/merritttest"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
)

const merrittNode = 7

// startMerritt runs a processor whose versions go to node 7 of a stand-in
// for Merritt's storage service, served to it over HTTP on loopback; with
// storing off, Storing is handed over. timeout bounds one call; retry says
// how failures that may pass are tried again (none: the job fails).
func startMerritt(t *testing.T, storing bool, timeout time.Duration, retry ...StoreRetry) (*env, *merritttest.Service) {
	t.Helper()
	svc := merritttest.Start(t, merrittNode)
	e := newEnv(t, "", storing)
	if len(retry) > 0 {
		e.retry = retry[0]
	}
	u, node := svc.URL, merrittNode
	client, err := merrittstore.Settings{URL: &u, Node: &node, Timeout: &timeout}.Client()
	if err != nil {
		t.Fatal(err)
	}
	e.merritt = &Merritt{Storage: client, Serving: serve(t, e.workRoot, !storing)}
	e.runners = e.run(t, e.q, storing)
	return e, svc
}

// serve serves the versions prepared under workRoot on loopback.
func serve(t *testing.T, workRoot string, everyPrepared bool) *serving.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serving.New(workRoot, "http://"+ln.Addr().String(), everyPrepared)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return srv
}

// get fetches a URL as the storage service does: status and body.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func names(files map[string][]byte) []string {
	var out []string
	for n := range files {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestAJobStoredThroughMerrittsStorageServiceReachesRecordingNamingTheObjectsManifest(t *testing.T) {
	e, svc := startMerritt(t, true, time.Minute)
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha", "sub/b.txt": "beta"},
		ids: &v1.Identifiers{LocalId: []string{"loc-a", "loc-b"}}})
	job := e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Recording {
		t.Fatalf("job %s: %q", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if n := svc.Versions(merrittNode, ark); n != 1 {
		t.Fatalf("the service holds %d versions of %s, want 1", n, ark)
	}
	files := svc.Files(merrittNode, ark, 1)
	want := []string{"producer/a.txt", "producer/sub/b.txt", "system/mrt-dc.xml", "system/mrt-erc.txt", "system/mrt-ingest.txt"}
	if !slices.Equal(names(files), want) {
		t.Errorf("version 1 holds %v, want %v", names(files), want)
	}
	if string(files["producer/a.txt"]) != "alpha" || merrittstore.JobOfIngestRecord(files["system/mrt-ingest.txt"]) != jid {
		t.Errorf("a.txt %q; ingest record %q", files["producer/a.txt"], files["system/mrt-ingest.txt"])
	}
	// The store node as Merritt's storage consumer reads it.
	st := job.GetStore()
	if want := "add/7/" + merrittstore.Encode(ark); st.GetMode() != want || len(st.GetDeletions()) != 0 {
		t.Errorf("store mode %q deletions %v, want %q and none", st.GetMode(), st.GetDeletions(), want)
	}
	if !strings.HasSuffix(st.GetManifestUrl(), "/"+serving.AddManifest) || !strings.HasPrefix(st.GetManifestUrl(), "http://127.0.0.1:") {
		t.Errorf("store manifest_url %q, want the add manifest served over HTTP", st.GetManifestUrl())
	}
	// The inventory node as Merritt's inventory service reads it.
	inv := job.GetInventory()
	if got, err := merrittstore.ObjectFromManifestURL(inv.GetManifestUrl()); err != nil || got != ark ||
		inv.GetManifestUrl() != svc.URL+"/manifest/7/"+merrittstore.Encode(ark) || inv.GetVersion() != 1 || inv.GetMode() != "add" {
		t.Errorf("inventory %v: the inventory service reads object %q (%v), want %s", inv, got, err, ark)
	}
	// The call names the storing attempt's own add manifest: the job's,
	// under a path of the attempt's.
	calls := svc.Calls()
	base := strings.TrimSuffix(e.merritt.Serving.BaseURL(), "/")
	attempt := strings.TrimPrefix(strings.TrimPrefix(st.GetManifestUrl(), base), "/")
	if len(calls) != 1 || !strings.HasPrefix(calls[0].Form.Get("url"), base+"/") || !strings.HasSuffix(calls[0].Form.Get("url"), "/"+attempt) ||
		calls[0].Form.Get("url") == st.GetManifestUrl() || calls[0].Form.Get("digestValue") == "" || calls[0].Form.Get("size") == "" ||
		calls[0].Form.Get("localIdentifier") != "loc-a;loc-b" {
		t.Errorf("calls %+v, want one add naming an attempt's add manifest with its size and digest, and the local ids", calls)
	}
	// The version is served only while its call is in flight.
	for _, u := range []string{st.GetManifestUrl(), calls[0].Form.Get("url")} {
		if code, _ := get(t, u); code != http.StatusNotFound {
			t.Errorf("the add manifest is served after the call at %s: %d", u, code)
		}
	}
}

func TestAnUpdateSendsItsDeletionsAndTheServiceMergesTheVersion(t *testing.T) {
	e, svc := startMerritt(t, true, time.Minute)
	first, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha", "b.txt": "beta"}})
	ark := e.ended(t, first).GetIdentifiers().GetPrimaryId()
	jid, _ := e.spawn(t, object{files: map[string]string{"c.txt": "gamma", "mrt-delete.txt": "b.txt\n\nproducer/a.txt\n"},
		ids: &v1.Identifiers{PrimaryId: ark}, mode: v1.SubmissionMode_SUBMISSION_MODE_UPDATE})
	job := e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Recording || job.GetInventory().GetVersion() != 2 {
		t.Fatalf("update job %s (%q) at version %d", queue.JobStateName(st.GetStatus()), st.GetMessage(), job.GetInventory().GetVersion())
	}
	if !slices.Equal(job.GetStore().GetDeletions(), []string{"producer/b.txt", "producer/a.txt"}) || !strings.HasPrefix(job.GetStore().GetMode(), "update/7/") {
		t.Errorf("store node %v", job.GetStore())
	}
	files := svc.Files(merrittNode, ark, 2)
	want := []string{"producer/c.txt", "system/mrt-dc.xml", "system/mrt-delete.txt", "system/mrt-erc.txt", "system/mrt-ingest.txt"}
	if !slices.Equal(names(files), want) {
		t.Errorf("version 2 holds %v, want %v", names(files), want)
	}
	if got := string(files["system/mrt-delete.txt"]); got != "producer/b.txt\nproducer/a.txt\n" {
		t.Errorf("system/mrt-delete.txt: %q", got)
	}
	if calls := svc.Calls(); len(calls) != 2 || calls[1].Action != "update" || calls[1].Form.Get("delete") != "producer/b.txt\nproducer/a.txt\n" {
		t.Errorf("calls %+v", calls)
	}
}

// requeue resumes a failed job in Storing, as an operator does.
func requeue(t *testing.T, e *env, jid string) {
	t.Helper()
	if _, err := admin.New(e.q).Jobs.Requeue(context.Background(), jid, queue.Storing, "retry"); err != nil {
		t.Fatal(err)
	}
}

// TestAStoreWhoseAnswerWasLostMakesNoSecondVersion: the service stores the
// version and the answer never comes (as when the processor dies between
// the answer and its commit). The job fails saying so; requeued, it finds
// its version among the object's and stores nothing again.
func TestAStoreWhoseAnswerWasLostMakesNoSecondVersion(t *testing.T) {
	e, svc := startMerritt(t, true, time.Minute)
	svc.Next(merritttest.Fault{LoseAnswer: true})
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	ark := job.GetIdentifiers().GetPrimaryId()
	if st := job.GetStatus(); st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Processing ||
		!strings.Contains(st.GetMessage(), "add/7/"+merrittstore.Encode(ark)) {
		t.Fatalf("job %s (%q), want Failed in Storing naming the call", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if n := svc.Versions(merrittNode, ark); n != 1 {
		t.Fatalf("the lost answer's call made %d versions", n)
	}
	requeue(t, e, jid)
	job = e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Recording || job.GetInventory().GetVersion() != 1 {
		t.Fatalf("requeued job %s (%q) at version %d, want Recording at 1", queue.JobStateName(st.GetStatus()), st.GetMessage(), job.GetInventory().GetVersion())
	}
	if n, calls := svc.Versions(merrittNode, ark), len(svc.Calls()); n != 1 || calls != 1 {
		t.Errorf("after the retry the service holds %d versions from %d calls, want 1 from 1", n, calls)
	}
}

func TestRefusedFailingAndSlowAnswersFailTheJobSayingSoAndARequeueStoresIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault merritttest.Fault
		want  []string
	}{
		{"refused", merritttest.Fault{Refuse: 400, Detail: "Manifest URL is invalid"}, []string{"HTTP 400 REQUEST_INVALID: Manifest URL is invalid"}},
		{"failing", merritttest.Fault{Refuse: 500, Status: "GENERAL_EXCEPTION", Detail: "cloud write failed"}, []string{"HTTP 500 GENERAL_EXCEPTION: cloud write failed"}},
		// It stores the version, and answers too late: the requeue finds
		// the version and makes no second.
		{"slow", merritttest.Fault{Delay: time.Minute}, []string{"did not answer", "in time"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, svc := startMerritt(t, true, 2*time.Second)
			svc.Next(c.fault)
			jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
			job := e.ended(t, jid)
			st := job.GetStatus()
			if st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Processing {
				t.Fatalf("job %s (%q), want Failed in Storing", queue.JobStateName(st.GetStatus()), st.GetMessage())
			}
			for _, w := range append(c.want, "Merritt's storage service") {
				if !strings.Contains(st.GetMessage(), w) {
					t.Errorf("message %q lacks %q", st.GetMessage(), w)
				}
			}
			if locks, err := jobs.NewReader(e.q).GetJob(context.Background(), jid); err != nil || locks.GetLocked() {
				t.Errorf("the failed job is locked: %v", err)
			}
			requeue(t, e, jid)
			job = e.ended(t, jid)
			ark := job.GetIdentifiers().GetPrimaryId()
			if job.GetStatus().GetStatus() != queue.Recording || svc.Versions(merrittNode, ark) != 1 {
				t.Errorf("requeued: %s (%q), %d versions", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage(), svc.Versions(merrittNode, ark))
			}
		})
	}
}

// TestWithStoringHandedOverTheStoreNodeIsMerrittsAndTheVersionIsServed:
// the job waits in Storing with what Merritt's storage consumer reads, and
// the version it names can be fetched while it waits.
func TestWithStoringHandedOverTheStoreNodeIsMerrittsAndTheVersionIsServed(t *testing.T) {
	e, svc := startMerritt(t, false, time.Minute)
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Storing {
		t.Fatalf("job %s (%q), want Storing", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	action, node, object, err := merrittstore.ParseMode(job.GetStore().GetMode())
	if err != nil || action != "add" || node != merrittNode || object != ark {
		t.Errorf("mode %q reads %s %d %q %v", job.GetStore().GetMode(), action, node, object, err)
	}
	code, manifest := get(t, job.GetStore().GetManifestUrl())
	if code != http.StatusOK || !strings.Contains(manifest, merrittstore.AddManifestProfile) {
		t.Fatalf("the add manifest: %d %q", code, manifest)
	}
	for _, line := range strings.Split(manifest, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if code, _ := get(t, strings.TrimSpace(strings.Split(line, "|")[0])); code != http.StatusOK {
			t.Errorf("file of line %q: %d", line, code)
		}
	}
	if job.GetInventory().GetManifestUrl() != svc.URL+"/manifest/7/"+merrittstore.Encode(ark) {
		t.Errorf("inventory %v", job.GetInventory())
	}
	// The storage service itself stores it from what the node says.
	u, err := merrittstore.Decode(strings.TrimPrefix(job.GetStore().GetMode(), "add/7/"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := e.merritt.Storage.Add(context.Background(), u, merrittstore.Request{ManifestURL: job.GetStore().GetManifestUrl()})
	if err != nil || vs.Number != 1 || vs.NumFiles != 4 {
		t.Errorf("the service stores the served version: %+v, %v", vs, err)
	}
}

// stays are the job's stays in Storing, each a failed attempt, by message.
func stays(job *v1.Job) []string {
	var out []string
	for _, h := range job.GetStatus().GetHistory() {
		if h.GetFrom() == queue.Storing && h.GetTo() == queue.Storing {
			out = append(out, h.GetMessage())
		}
	}
	return out
}

// TestAStaleCallOfAnAttemptThatTimedOutStoresNothing: the service holds
// the first call past its timeout and goes on with it once the job's next
// attempt's call has fetched its files, which waits for it before it
// commits. When the first call wakes, its attempt is over: its fetch is
// refused and it stores nothing, so the object has one version, made by
// one call.
func TestAStaleCallOfAnAttemptThatTimedOutStoresNothing(t *testing.T) {
	e, svc := startMerritt(t, true, time.Second, StoreRetry{For: time.Minute, Backoff: 100 * time.Millisecond})
	svc.Next(merritttest.Fault{HoldForNext: true})
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	ark := job.GetIdentifiers().GetPrimaryId()
	if st := job.GetStatus(); st.GetStatus() != queue.Recording || job.GetInventory().GetVersion() != 1 {
		t.Fatalf("job %s (%q) at version %d, want Recording at 1", queue.JobStateName(st.GetStatus()), st.GetMessage(), job.GetInventory().GetVersion())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	calls, err := svc.WaitCalls(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n := svc.Commits(ark); n != 1 || svc.Versions(merrittNode, ark) != 1 {
		t.Errorf("%d calls made a version, the object has %d versions; want 1 and 1: %+v", n, svc.Versions(merrittNode, ark), calls)
	}
	if s := stays(job); len(s) != 1 || !strings.Contains(s[0], "did not answer") {
		t.Errorf("the job's failed attempts: %q", s)
	}
}

// TestAStoreThatMayPassIsTriedAgainEachAttemptInTheJobsHistory: the
// service unavailable, then failing a fetch, then losing its answer; the
// job stays in Storing, each attempt in its history with the service's
// reason, and is stored once.
func TestAStoreThatMayPassIsTriedAgainEachAttemptInTheJobsHistory(t *testing.T) {
	e, svc := startMerritt(t, true, time.Minute, StoreRetry{For: time.Minute, Backoff: 50 * time.Millisecond})
	svc.Next(merritttest.Fault{Refuse: 503, Detail: "the cloud store is down"},
		merritttest.Fault{Refuse: 500, Status: "GENERAL_EXCEPTION", Detail: "Object Fails: - objectID=x - version=1"},
		merritttest.Fault{LoseAnswer: true})
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	ark := job.GetIdentifiers().GetPrimaryId()
	if st := job.GetStatus(); st.GetStatus() != queue.Recording || job.GetInventory().GetVersion() != 1 || !strings.HasSuffix(st.GetMessage(), "(attempt 4)") {
		t.Fatalf("job %s (%q) at version %d, want Recording at 1 on the fourth attempt", queue.JobStateName(st.GetStatus()), st.GetMessage(), job.GetInventory().GetVersion())
	}
	s := stays(job)
	want := []string{"storing attempt 1 failed", "HTTP 503 EXTERNAL_SERVICE_UNAVAILABLE: the cloud store is down",
		"storing attempt 2 failed", "HTTP 500 GENERAL_EXCEPTION: Object Fails: - objectID=x - version=1", "storing attempt 3 failed", "calling the storage service"}
	if len(s) != 3 {
		t.Fatalf("the job's failed attempts: %q", s)
	}
	for i, w := range want {
		if !strings.Contains(s[i/2], w) {
			t.Errorf("attempt %d: %q lacks %q", i/2+1, s[i/2], w)
		}
	}
	if n := svc.Commits(ark); n != 1 || svc.Versions(merrittNode, ark) != 1 {
		t.Errorf("%d calls made a version, %d versions", n, svc.Versions(merrittNode, ark))
	}
}

// TestWhatCannotPassFailsAtOnceNamingTheServicesReason: a 4xx, and a 500
// that is not the service's failure to fetch or write, fail the job at
// once, its message the service's reason, not its trace.
func TestWhatCannotPassFailsAtOnceNamingTheServicesReason(t *testing.T) {
	for _, f := range []merritttest.Fault{
		{Refuse: 400, Detail: "VersionMap: Delete list component not found:producer/nope.txt"},
		{Refuse: 500, Status: "INVALID_DATA_FORMAT", Detail: "validateManifest - Fixity fails."},
	} {
		e, svc := startMerritt(t, true, time.Minute, StoreRetry{For: time.Minute, Backoff: 50 * time.Millisecond})
		svc.Next(f)
		jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
		job := e.ended(t, jid)
		st := job.GetStatus()
		if st.GetStatus() != queue.Failed || !strings.HasSuffix(st.GetMessage(), ": "+f.Detail) || strings.Contains(st.GetMessage(), "at org.") ||
			len(stays(job)) != 0 || len(svc.Calls()) != 1 {
			t.Errorf("HTTP %d: job %s (%q), %d stays in Storing, %d calls", f.Refuse, queue.JobStateName(st.GetStatus()), st.GetMessage(), len(stays(job)), len(svc.Calls()))
		}
	}
}

// TestStoringTriesAgainForItsTimeAndThenFailsWithTheLastReason.
func TestStoringTriesAgainForItsTimeAndThenFailsWithTheLastReason(t *testing.T) {
	e, svc := startMerritt(t, true, time.Minute, StoreRetry{For: 500 * time.Millisecond, Backoff: 50 * time.Millisecond})
	for range 100 {
		svc.Next(merritttest.Fault{Refuse: 503, Detail: "down for maintenance"})
	}
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	st := job.GetStatus()
	if st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Processing || !strings.Contains(st.GetMessage(), "down for maintenance") ||
		!strings.Contains(st.GetMessage(), "INGESTQ_MERRITT_RETRY_FOR") || len(stays(job)) < 2 {
		t.Errorf("job %s (%q) after %d attempts", queue.JobStateName(st.GetStatus()), st.GetMessage(), len(stays(job))+1)
	}
}

// TestFileNamesAreStoredExactlyOrRefusedInProcessing: a name the service
// reads back exactly is stored under it; one it cannot ("%20" reads as a
// space) fails the job in Processing, before anything is stored.
func TestFileNamesAreStoredExactlyOrRefusedInProcessing(t *testing.T) {
	e, svc := startMerritt(t, true, time.Minute)
	exact := map[string]string{"100% off.txt": "1", "x%7Cy.txt": "2", "50%25.txt": "3", "two  spaces.txt": "4"}
	jid, _ := e.spawn(t, object{files: exact})
	job := e.ended(t, jid)
	ark := job.GetIdentifiers().GetPrimaryId()
	if job.GetStatus().GetStatus() != queue.Recording {
		t.Fatalf("job %s (%q)", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
	files := svc.Files(merrittNode, ark, 1)
	for name, body := range exact {
		if string(files["producer/"+name]) != body {
			t.Errorf("%q not stored under its name: %q", name, names(files))
		}
	}
	jid, _ = e.spawn(t, object{files: map[string]string{"100%20off.txt": "sale"}})
	job = e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Downloading ||
		!strings.Contains(st.GetMessage(), `"producer/100%20off.txt" cannot be stored in Merritt's storage service under its own name`) {
		t.Errorf("job %s after %s (%q), want Failed in Processing", queue.JobStateName(st.GetStatus()), queue.JobStateName(st.GetLastSuccessfulStatus()), st.GetMessage())
	}
	if len(svc.Calls()) != 1 {
		t.Errorf("%d calls, want the first job's only", len(svc.Calls()))
	}
}

// TestAVersionStoredAlreadyIsHeldToTheFilesAFreshStoreHolds: the object
// holds a version with the job's ingest record whose files are not the
// job's (a file renamed by the service); storing the job finds it and,
// as it would hold a fresh store's answer, fails saying so rather than
// recording it.
func TestAVersionStoredAlreadyIsHeldToTheFilesAFreshStoreHolds(t *testing.T) {
	e, svc := startMerritt(t, false, time.Minute)
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	ark := job.GetIdentifiers().GetPrimaryId()
	// The job's version, one file renamed, stored from its served files.
	_, manifest := get(t, job.GetStore().GetManifestUrl())
	renamed := strings.Replace(manifest, " | producer/a.txt | ", " | producer/A.txt | ", 1)
	ms := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, renamed) }))
	defer ms.Close()
	if _, err := e.merritt.Storage.Add(context.Background(), ark, merrittstore.Request{ManifestURL: ms.URL + "/mrt-manifest.txt"}); err != nil {
		t.Fatal(err)
	}
	// Storing taken over by ingestq's processor.
	e.merritt = &Merritt{Storage: e.merritt.Storage, Serving: serve(t, e.workRoot, false)}
	e.storing = true
	e.run(t, e.q, true)
	job = e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "stored already") ||
		!strings.Contains(st.GetMessage(), "producer/A.txt") {
		t.Errorf("job %s (%q), want Failed naming the version's files", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if n := svc.Versions(merrittNode, ark); n != 1 {
		t.Errorf("%d versions", n)
	}
}
