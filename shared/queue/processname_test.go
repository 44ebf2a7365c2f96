package queue

import (
	"fmt"
	"os"
	"strings"
	"testing"
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
	if got, want := ProcessName("estimator"), fmt.Sprintf("estimator-%s-%d", host, pid); got != want {
		t.Errorf("ProcessName(estimator) = %q, want %q", got, want)
	}
	if got, want := ProcessName(""), fmt.Sprintf("%s-%d", host, pid); got != want {
		t.Errorf("ProcessName() = %q, want %q", got, want)
	}
	if got := ProcessName("a stage/1"); !validWorkerID(got) {
		t.Errorf("ProcessName(a stage/1) = %q, not a valid worker id", got)
	}

	c := newClient(t)
	if id := c.NewWorkerID("estimator"); !strings.HasPrefix(id, ProcessName("estimator")+"-") {
		t.Errorf("worker id %q does not start with ProcessName(estimator)", id)
	}
	_, jids := spawn(t, c, 1, DefaultPriority)
	st, err := c.JobStatus(testCtx(t), jids[0])
	if err != nil {
		t.Fatal(err)
	}
	if hs := st.GetHistory(); len(hs) == 0 || hs[0].GetWorker() != ProcessName("") {
		t.Errorf("history %v; want its first entry by %s (Options.Worker's default)", hs, ProcessName(""))
	}
}
