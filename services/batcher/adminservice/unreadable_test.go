package adminservice

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/zktest"
	"google.golang.org/grpc/codes"
)

// TestAJobWhoseStatusIsUnreadableIsFailedThenDeletedOverGRPC garbles the
// status of two pending jobs, as a broken peer would: deleting one at once
// is refused, saying to fail it first; failing it works and says the old
// status was unreadable, and deleting it then takes its working directory.
// The other, locked by a worker, is refused as locked.
func TestAJobWhoseStatusIsUnreadableIsFailedThenDeletedOverGRPC(t *testing.T) {
	f := newFixture(t)
	bid, jids := f.batch("demo", "demo_coll", 2)
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	held, err := jobs.New(f.q).ClaimJob(f.ctx, jids[1])
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(f.ctx)
	for _, jid := range jids {
		if _, err := conn.Set(f.zkRoot+"/jobs/"+jid+"/status", []byte(`{"status":`), -1); err != nil {
			t.Fatal(err)
		}
	}

	_, err = f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jids[0], Force: true})
	wantStatus(t, err, codes.FailedPrecondition, "status is unreadable and its entry says Pending", "fail it first")
	fj, err := f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[0], Message: "garbled by a restore"})
	if err != nil || fj.GetJob().GetStatus().GetStatus() != queue.Failed {
		t.Fatalf("FailJob of a job whose status is unreadable: %v %v", fj, err)
	}
	dj, err := f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jids[0], Force: true})
	if err != nil || dj.GetWorkingDir() != f.root.Job(bid, jids[0]) {
		t.Fatalf("DeleteJob after FailJob: %v %v", dj, err)
	}

	_, err = f.admin.FailJob(f.ctx, &v1.FailJobRequest{JobId: jids[1]})
	wantStatus(t, err, codes.Aborted, "job "+jids[1], "status unreadable", "a consumer is working on it now")
	_, err = f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jids[1], Force: true})
	wantStatus(t, err, codes.Aborted, "job "+jids[1], "status unreadable", "a consumer is working on it now")
}

// TestAJobWhoseStatusIsUnreadableIsDeletedAtOnceWithItsWorkingDirectory
// garbles the status of a failed and of a held job (the second one's
// configuration too): their entries say Failed and Held, so DeleteJob takes
// them without FailJob first. Each deletion leaves what a readable failed
// job's leaves: no nodes, no state entry, no working directory, and a
// reference in batch-deleted. A deletion refused (the batch is open and
// force is not given) leaves the job and its directory as they were.
func TestAJobWhoseStatusIsUnreadableIsDeletedAtOnceWithItsWorkingDirectory(t *testing.T) {
	f := newFixture(t)
	bid, jids := f.batch("demo", "demo_coll", 3)
	readable, failed, held := jids[0], jids[1], jids[2]
	f.fail(readable)
	f.fail(failed)
	if _, err := f.admin.HoldJob(f.ctx, &v1.HoldJobRequest{JobId: held}); err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect(zktest.Servers(t), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, p := range []string{"/jobs/" + failed + "/status", "/jobs/" + held + "/status", "/jobs/" + held + "/configuration"} {
		if _, err := conn.Set(f.zkRoot+p, []byte(`{"status":`), -1); err != nil {
			t.Fatal(err)
		}
	}

	_, err = f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: held})
	wantStatus(t, err, codes.FailedPrecondition, "batch "+bid+" is still Processing", "pass force")
	if data, _, err := conn.Get(f.zkRoot + "/jobs/" + held + "/status"); err != nil || string(data) != `{"status":` {
		t.Errorf("the refused deletion left the status as %q (%v)", data, err)
	}
	if _, err := os.Stat(filepath.Join(f.root.Job(bid, held), "producer", "a.txt")); err != nil {
		t.Errorf("the refused deletion touched the working directory: %v", err)
	}

	for _, jid := range []string{readable, failed, held} {
		dj, err := f.admin.DeleteJob(f.ctx, &v1.DeleteJobRequest{JobId: jid, Force: true})
		if err != nil || dj.GetWorkingDir() != f.root.Job(bid, jid) {
			t.Errorf("DeleteJob %s: %v %v, want its working directory %s", jid, dj, err, f.root.Job(bid, jid))
		}
		if _, err := os.Stat(f.root.Job(bid, jid)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("job %s: its working directory is left (%v)", jid, err)
		}
		if ok, _, err := conn.Exists(f.zkRoot + "/jobs/" + jid); err != nil || ok {
			t.Errorf("job %s: its node is left (%v)", jid, err)
		}
		if ok, _, err := conn.Exists(f.zkRoot + "/batches/" + bid + "/states/batch-deleted/" + jid); err != nil || !ok {
			t.Errorf("job %s: no reference in batch-deleted (%v)", jid, err)
		}
	}
	states, _, err := conn.Children(f.zkRoot + "/jobs/states")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		entries, _, err := conn.Children(f.zkRoot + "/jobs/states/" + s)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			for _, jid := range []string{readable, failed, held} {
				if strings.HasSuffix(e, "-"+jid) {
					t.Errorf("job %s: entry %s left in %s", jid, e, s)
				}
			}
		}
	}
	if _, err := os.Stat(f.root.Batch(bid)); err != nil {
		t.Errorf("the batch's own directory went with its jobs': %v", err)
	}
}
