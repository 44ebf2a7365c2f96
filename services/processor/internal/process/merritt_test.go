package process

import (
	"context"
	"io"
	"net"
	"net/http"
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
// storing off, Storing is handed over. timeout bounds one call.
func startMerritt(t *testing.T, storing bool, timeout time.Duration) (*env, *merritttest.Service) {
	t.Helper()
	svc := merritttest.Start(t, merrittNode)
	e := newEnv(t, "", storing)
	u, node := svc.URL, merrittNode
	client, err := merrittstore.Settings{URL: &u, Node: &node, Timeout: &timeout}.Client()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serving.New(e.workRoot, "http://"+ln.Addr().String(), !storing)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	e.merritt = &Merritt{Storage: client, Serving: srv}
	e.runners = e.run(t, e.q, storing)
	return e, svc
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
	calls := svc.Calls()
	if len(calls) != 1 || calls[0].Form.Get("url") != st.GetManifestUrl() || calls[0].Form.Get("digestValue") == "" || calls[0].Form.Get("size") == "" ||
		calls[0].Form.Get("localIdentifier") != "loc-a;loc-b" {
		t.Errorf("calls %+v, want one add naming the add manifest with its size and digest, and the local ids", calls)
	}
	// The version is served only while its call is in flight.
	if code, _ := get(t, st.GetManifestUrl()); code != http.StatusNotFound {
		t.Errorf("the add manifest is served after the call: %d", code)
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
