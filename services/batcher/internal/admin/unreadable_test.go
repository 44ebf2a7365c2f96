package admin

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
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
	held, err := f.q.ClaimJob(f.ctx, jids[1])
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
