package batches_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/queue/session"
)

// TestProcessNameNamesWorkersAndHistory: one name for this process, made
// in one place, is what a client records in job histories by default and
// what its worker ids start with.
func TestProcessNameNamesWorkersAndHistory(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	if got, want := session.ProcessName("estimator"), fmt.Sprintf("estimator-%s-%d", host, pid); got != want {
		t.Errorf("ProcessName(estimator) = %q, want %q", got, want)
	}
	if got, want := session.ProcessName(""), fmt.Sprintf("%s-%d", host, pid); got != want {
		t.Errorf("ProcessName() = %q, want %q", got, want)
	}
	if got := session.ProcessName("a stage/1"); !queue.ValidWorkerID(got) {
		t.Errorf("ProcessName(a stage/1) = %q, not a valid worker id", got)
	}

	s := connect(t)
	if id := jobs.New(s).NewWorkerID("estimator"); !strings.HasPrefix(id, session.ProcessName("estimator")+"-") {
		t.Errorf("worker id %q does not start with ProcessName(estimator)", id)
	}
	_, jids := queuetest.SpawnBatch(t, s, 1, queue.DefaultPriority)
	st, err := jobs.NewReader(s).JobStatus(testCtx(t), jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if hs := st.GetHistory(); len(hs) == 0 || hs[0].GetWorker() != session.ProcessName("") {
		t.Errorf("history %v; want its first entry by %s (Options.Worker's default)", hs, session.ProcessName(""))
	}
}
