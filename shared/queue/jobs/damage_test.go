package jobs_test

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// These tests damage the tree as another writer would, through a plain
// go-zookeeper session of its own, and check that the queue ends the job
// with a message; package admin's check that a held job stays held for its
// operator and that fsck names the damage.

func wantFailedWith(t *testing.T, c *client, jid, msg string) *v1.JobStatus {
	t.Helper()
	st, err := c.JobStatus(testCtx(t), jid)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), msg) {
		t.Errorf("job %s is %s (%q), want Failed with %q", jid, queue.JobStateName(st.GetStatus()), st.GetMessage(), msg)
	}
	return st
}

func TestAJobLockNoSessionHoldsIsFailedWhenTheClaimFindsItByItsWrite(t *testing.T) {
	// A consumer that rarely meets locked jobs tries the lock's create
	// without looking first: the failed create leads to the same end.
	c := newClient(t)
	raw := zktest.RawConn(t)
	_, jids := queuetest.SpawnBatch(t, c.s, 1, 5)
	zktest.WriteNode(t, raw, c.p.Job(jids[0]).Lock(), "")
	_, err := c.ClaimEntry(testCtx(t), queue.Pending, queue.Entry{Name: queue.EntryName(5, jids[0]), Priority: 5, JID: jids[0]}, 0, false)
	if !errors.Is(err, jobs.ErrStale) {
		t.Errorf("claim: %v, want the entry stale (its job failed)", err)
	}
	wantFailedWith(t, c, jids[0], "lock node is not a session's")
}
