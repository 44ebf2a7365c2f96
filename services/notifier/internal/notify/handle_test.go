package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
)

// The handler's decisions, tried on jobs held in memory (stagetest): how
// the queue reads and commits a job is not what these tests are about.

// notifyJob is a recorded job of profile in Notify, with a working folder
// under workRoot holding one file.
func notifyJob(t *testing.T, workRoot, profileName string) (claim *stagetest.Job, wd string) {
	t.Helper()
	wd = filepath.Join(workRoot, "bid0000000001", "jid0000000001")
	if err := os.MkdirAll(filepath.Join(wd, "producer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "producer", "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := &v1.Job{Id: "jid0000000001", Bid: "bid0000000001",
		Configuration: &v1.JobConfiguration{ProfileName: profileName, WorkingDir: wd},
		Identifiers:   &v1.Identifiers{PrimaryId: "ark:/99999/fk4x", LocalId: []string{"loc001"}},
		Inventory:     &v1.Inventory{ManifestUrl: manifestURL, Mode: "update", Version: 2}}
	return stagetest.New(job, queue.Notify), wd
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestACallbackAnsweredWithServerErrorsIsPostedAgainUntilItIsDelivered(t *testing.T) {
	rcv := &receiver{script: []int{500, 503, 200}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	root := t.TempDir()
	claim, wd := notifyJob(t, root, "demo")
	out := newNotifier(t, root, srv.URL+"/cb").Handle(context.Background(), claim)
	if want := "next: callback " + srv.URL + "/cb delivered; working folder removed"; out.String() != want || rcv.calls() != 3 {
		t.Errorf("outcome %q after %d calls, want %q after 3", out, rcv.calls(), want)
	}
	if exists(wd) {
		t.Error("the working folder is still there")
	}
}

// A callback that keeps failing leaves the job waiting in Notify, to be
// tried again after the first backoff, and its working folder goes: the
// object is stored, only the news of it waits.
func TestACallbackThatKeepsFailingWaitsInNotifyToBeTriedAgain(t *testing.T) {
	rcv := &receiver{script: []int{500}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	root := t.TempDir()
	claim, wd := notifyJob(t, root, "demo")
	n := newNotifier(t, root, srv.URL+"/cb")
	n.Now = func() time.Time { return t0 }
	out := n.Handle(context.Background(), claim)
	want := "wait 200ms: callback " + srv.URL + "/cb: HTTP 500 Internal Server Error after 3 attempts; pending: tried again for 1h0m0s from the first failure"
	if out.String() != want || rcv.calls() != 3 {
		t.Errorf("outcome %q after %d calls, want %q after 3", out, rcv.calls(), want)
	}
	if exists(wd) {
		t.Error("the working folder of a job whose callback waits is still there")
	}
}

func TestACallbackRefusedWithAClientErrorIsNotRetried(t *testing.T) {
	rcv := &receiver{script: []int{404}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	root := t.TempDir()
	claim, wd := notifyJob(t, root, "demo")
	out := newNotifier(t, root, srv.URL+"/gone").Handle(context.Background(), claim)
	if want := "to Failed: callback " + srv.URL + "/gone: HTTP 404 Not Found (refused, not retried)"; out.String() != want || rcv.calls() != 1 {
		t.Errorf("outcome %q after %d calls, want %q after 1", out, rcv.calls(), want)
	}
	if !exists(wd) {
		t.Error("the failed job's working folder is gone: a requeued job would need it")
	}
}

func TestWithoutACallbackTheJobCompletesAndItsFolderIsRemoved(t *testing.T) {
	root := t.TempDir()
	claim, wd := notifyJob(t, root, "demo")
	if out := newNotifier(t, root, "").Handle(context.Background(), claim); out.String() != "next: working folder removed" {
		t.Errorf("outcome %q", out)
	}
	if exists(wd) || !exists(filepath.Dir(wd)) {
		t.Errorf("after the job: its folder there %v, its batch's folder there %v; want only the batch's", exists(wd), exists(filepath.Dir(wd)))
	}
}

func TestAnUnknownProfileFailsTheJob(t *testing.T) {
	root := t.TempDir()
	claim, wd := notifyJob(t, root, "gone")
	out := newNotifier(t, root, "").Handle(context.Background(), claim)
	if want := `to Failed: profile "gone" is not among the loaded profiles (demo): whether a callback is due is unknown`; out.String() != want {
		t.Errorf("outcome %q, want %q", out, want)
	}
	if !exists(wd) {
		t.Error("the failed job's working folder is gone")
	}
}

func TestAWorkingFolderOutsideTheWorkRootIsLeftAlone(t *testing.T) {
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := &v1.Job{Id: "jid0000000001", Configuration: &v1.JobConfiguration{ProfileName: "demo", WorkingDir: outside}}
	out := newNotifier(t, t.TempDir(), "").Handle(context.Background(), stagetest.New(job, queue.Notify))
	if !strings.HasPrefix(out.String(), "next: working folder left in place: ") || !strings.Contains(out.String(), "is not inside the work root") {
		t.Errorf("outcome %q, want the job completed, saying its folder is not inside the work root", out)
	}
	if !exists(keep) {
		t.Error("a folder outside the work root was emptied")
	}
}

// TestAJobWhoseCallbackDataCannotBeReadIsFailedOrReleased: the ids and the
// inventory a callback reports are read with the claim only for a profile
// with a callback. Data that cannot be decoded fails the job, saying so;
// any other failure to read it (the session lost, say) gives the job back
// for another try. Either way nothing is posted and the folder stays.
func TestAJobWhoseCallbackDataCannotBeReadIsFailedOrReleased(t *testing.T) {
	rcv := &receiver{script: []int{200}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	root := t.TempDir()
	n := newNotifier(t, root, srv.URL+"/cb")
	corrupt := fmt.Errorf("jobs/jid0000000001/identifiers: %w", queue.ErrCorrupt)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{corrupt, "to Failed: job data unreadable: " + corrupt.Error()},
		{errors.New("zk: connection closed"), "release"},
	} {
		claim, wd := notifyJob(t, root, "demo")
		claim.Err = tt.err
		if out := n.Handle(context.Background(), claim); out.String() != tt.want {
			t.Errorf("reading the job failing with %v: outcome %q, want %q", tt.err, out, tt.want)
		}
		if !exists(wd) {
			t.Errorf("reading the job failing with %v: its working folder is gone", tt.err)
		}
	}
	if rcv.calls() != 0 {
		t.Errorf("%d callbacks posted for jobs whose data was not read", rcv.calls())
	}
}
