package process

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestAProcessedJobReachesRecordingThroughStoringStoredOnce(t *testing.T) {
	e := start(t, "")
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}, ids: &v1.Identifiers{LocalId: []string{"loc001"}}})
	job := e.ended(t, jid)
	st := job.GetStatus()
	if st.GetStatus() != queue.Recording || st.GetLastSuccessfulStatus() != queue.Storing {
		t.Fatalf("job %s (%q) after %s; want Recording after Storing", queue.JobStateName(st.GetStatus()), st.GetMessage(),
			queue.JobStateName(st.GetLastSuccessfulStatus()))
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if got := e.versions(t, ark); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("object folder holds %v, want [v1]", got)
	}
	for name, want := range map[string]int64{"processing": 1, "storing": 1} {
		// The runner counts a step once it has returned, which may be just
		// after its commit ended the job.
		queuetest.Eventually(t, name+" counted its step", func() bool {
			return e.runners[name].Status().GetOutcomes()["advanced"] >= want
		})
		if got := e.runners[name].Status().GetOutcomes()["advanced"]; got != want {
			t.Errorf("%s advanced %d jobs, want %d", name, got, want)
		}
	}
}

func TestWithTheStoringStepOffAProcessedJobWaitsInStoringForAnotherConsumer(t *testing.T) {
	e := startWith(t, "", false)
	if _, ok := e.runners["storing"]; ok || len(e.runners) != 1 {
		t.Fatalf("stages %v with the storing step off, want processing alone", e.runners)
	}
	jid, wd := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	job := e.ended(t, jid)
	if st := job.GetStatus(); st.GetStatus() != queue.Storing || st.GetLastSuccessfulStatus() != queue.Processing {
		t.Fatalf("job %s (%q), want Storing after Processing", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if s := job.GetStore(); s.GetManifestUrl() != checkm.FileURL(filepath.Join(wd, StorageManifest)) || s.GetMode() != "add" {
		t.Errorf("store %v, want the working folder's storage manifest in add mode", s)
	}
	if job.GetInventory() != nil {
		t.Errorf("a job nobody stored has an inventory node: %v", job.GetInventory())
	}
	if des, err := os.ReadDir(e.storeRoot); err != nil || len(des) != 0 {
		t.Errorf("the store holds %v (%v); nothing was to be stored", des, err)
	}
	// The consumer that owns Storing (here a replica with the step on) finds
	// everything it needs in the job.
	e.storing = true
	e.run(t, queuetest.Connect(t, e.zkRoot), true)
	job = e.ended(t, jid)
	if job.GetStatus().GetStatus() != queue.Recording || job.GetInventory().GetVersion() != 1 {
		t.Fatalf("job %s (%q) with inventory %v, want Recording at version 1", queue.JobStateName(job.GetStatus().GetStatus()),
			job.GetStatus().GetMessage(), job.GetInventory())
	}
}

// TestAJobAPeerRequeuedToStoringIsStoredAndRecorded: storing fails (the
// store root is blocked), and the peer library's admin requeues the job to
// Storing the way that library writes it: status, then state entry, then
// batch reference, one after another. The storing step takes it.
func TestAJobAPeerRequeuedToStoringIsStoredAndRecorded(t *testing.T) {
	storeRoot := filepath.Join(t.TempDir(), "store")
	if err := os.WriteFile(storeRoot, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := start(t, storeRoot)
	jid, _ := e.spawn(t, object{files: map[string]string{"a.txt": "alpha"}})
	failed := e.ended(t, jid)
	if st := failed.GetStatus(); st.GetStatus() != queue.Failed || st.GetLastSuccessfulStatus() != queue.Processing {
		t.Fatalf("job %s (%q) after %s, want Failed after Processing", queue.JobStateName(st.GetStatus()), st.GetMessage(),
			queue.JobStateName(st.GetLastSuccessfulStatus()))
	}
	if err := os.Remove(storeRoot); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(storeRoot, 0o755); err != nil {
		t.Fatal(err)
	}

	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	root, bid := e.zkRoot, failed.GetBid()
	entry := fmt.Sprintf("%02d-%s", failed.GetPriority(), jid)
	status := `{"status":"Storing","last_modified":"2026-11-22 03:51:07 +0000","message":"requeued",` +
		`"last_successful_status":"Processing","retry_count":1}`
	for _, op := range []func() error{
		func() error { _, err := conn.Set(root+"/jobs/"+jid+"/status", []byte(status), -1); return err },
		func() error { return conn.Delete(root+"/jobs/states/failed/"+entry, -1) },
		func() error {
			_, err := conn.Create(root+"/jobs/states/storing/"+entry, nil, 0, zk.WorldACL(zk.PermAll))
			return err
		},
		func() error { return conn.Delete(root+"/batches/"+bid+"/states/batch-failed/"+jid, -1) },
		func() error {
			_, err := conn.Create(root+"/batches/"+bid+"/states/batch-processing/"+jid, nil, 0, zk.WorldACL(zk.PermAll))
			return err
		},
	} {
		if err := op(); err != nil {
			t.Fatalf("writing the requeue as the peer does: %v", err)
		}
	}

	job := e.ended(t, jid)
	st := job.GetStatus()
	if st.GetStatus() != queue.Recording || st.GetLastSuccessfulStatus() != queue.Storing || st.GetRetryCount() != 1 {
		t.Fatalf("job %s (%q) after %s, retry %d; want Recording after Storing, retry 1", queue.JobStateName(st.GetStatus()),
			st.GetMessage(), queue.JobStateName(st.GetLastSuccessfulStatus()), st.GetRetryCount())
	}
	ark := job.GetIdentifiers().GetPrimaryId()
	if got := e.versions(t, ark); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("object folder holds %v, want [v1]", got)
	}
	if want := checkm.FileURL(filepath.Join(storeRoot, queue.LockName(ark), "v1", store.VersionManifest)); job.GetInventory().GetManifestUrl() != want {
		t.Errorf("inventory %v, want version 1 at %s", job.GetInventory(), want)
	}
}
