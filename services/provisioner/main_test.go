package main

import (
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/service/servicetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestBinaryServesWhileConnectedAndStopsOnSIGTERM(t *testing.T) {
	t.Setenv("INGESTQ_WORK_ROOT", t.TempDir())
	servicetest.CheckBinary(t, "provisioner")
}

func TestBinaryMovesAJobToDownloading(t *testing.T) {
	root := zktest.Root(t)
	q := queuetest.Connect(t, root)
	jid := createJobs(t, q, queue.Provisioning, jobSpec{spaceNeeded: 1 << 20, priority: 5})[0]
	servicetest.Start(t, servicetest.Build(t, "."), root, "INGESTQ_WORK_ROOT="+t.TempDir(), "INGESTQ_PROVISION_MAX_USAGE=1")
	st := queuetest.WaitState(t, q, jid, queue.Downloading).GetStatus()
	if !strings.Contains(st.GetMessage(), "provisioned 1.0 MiB") {
		t.Errorf("message %q", st.GetMessage())
	}
}
