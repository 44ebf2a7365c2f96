package main

import (
	"testing"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	servicetest.CheckBinary(t, "estimator")
}

func TestBinaryTakesAJobFromPendingToProvisioning(t *testing.T) {
	d := newDepositor(t)
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	url := d.putManifest(t, "object.checkm", checkm.ProfileObject, checkm.Entry{FileURL: d.URL + "/sized/1234", FileSize: -1, FileName: "a.bin"})
	jid := queuetest.Spawn(t, q, batches.NewJob{Configuration: &v1.JobConfiguration{PayloadUrl: url, PayloadType: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST}}, queue.Pending)
	servicetest.Start(t, servicetest.Build(t, "."), root, "INGESTQ_FETCH_ALLOW=loopback")
	job := queuetest.WaitState(t, q, jid, queue.Provisioning)
	if job.GetSpaceNeeded() != 1234 || job.GetStatus().GetLastSuccessfulStatus() != queue.Estimating {
		t.Errorf("job after the estimator: space_needed %d, status %v", job.GetSpaceNeeded(), job.GetStatus())
	}
}
