package queue

import (
	"errors"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/zktest"
)

// These tests damage the tree as another writer would, through a plain
// go-zookeeper session of its own, and check that the queue ends the job
// with a message; package admin's check that a held job stays held for its
// operator and that fsck names the damage.

func wantFailedWith(t *testing.T, c *Client, jid, msg string) *v1.JobStatus {
	t.Helper()
	st, err := c.JobStatus(testCtx(t), jid)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus() != Failed || !strings.Contains(st.GetMessage(), msg) {
		t.Errorf("job %s is %s (%q), want Failed with %q", jid, JobStateName(st.GetStatus()), st.GetMessage(), msg)
	}
	return st
}

func TestAJobLockNoSessionHoldsIsFailedWhenTheClaimFindsItByItsWrite(t *testing.T) {
	// A consumer that rarely meets locked jobs tries the lock's create
	// without looking first: the failed create leads to the same end.
	c := newClient(t)
	raw := zktest.RawConn(t)
	_, jids := spawn(t, c, 1, 5)
	zktest.WriteNode(t, raw, c.p.jobLock(jids[0]), "")
	_, err := c.claimEntry(testCtx(t), Pending, entry{name: entryName(5, jids[0]), priority: 5, jid: jids[0]}, 0, false)
	if !errors.Is(err, errStale) {
		t.Errorf("claim: %v, want the entry stale (its job failed)", err)
	}
	wantFailedWith(t, c, jids[0], "lock node is not a session's")
}
