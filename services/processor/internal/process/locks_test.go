package process

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-zookeeper/zk"
	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/services/processor/internal/mint"
	"github.com/ingestq/ingestq/services/processor/internal/store"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/admin"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/merrittzk"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/zktest"
)

// stallingMinter mints as mint.Local does, except the first time: then it
// panics when panics is set; otherwise, the ARK minted (and in the job's
// identifiers), it names the job and waits, the job's local id locks held,
// until proceed closes (it then returns the ARK) or its context ends (it
// gives up).
type stallingMinter struct {
	mint.Local
	panics  bool
	minting chan string
	proceed chan struct{}
	once    sync.Once
}

func newStallingMinter() *stallingMinter {
	return &stallingMinter{Local: mint.Local{Shoulder: shoulder}, minting: make(chan string, 1), proceed: make(chan struct{})}
}

func (m *stallingMinter) Mint(ctx context.Context, claim mint.Job) (string, error) {
	first := false
	m.once.Do(func() { first = true })
	if !first {
		return m.Local.Mint(ctx, claim)
	}
	if m.panics {
		panic("minting broke")
	}
	ark, err := m.Local.Mint(ctx, claim)
	if err != nil {
		return "", err
	}
	m.minting <- claim.Data().GetId()
	select {
	case <-ctx.Done():
		return "", context.Cause(ctx)
	case <-m.proceed:
		return ark, nil
	}
}

// startStalling runs the processor with a stallingMinter.
func startStalling(t *testing.T, m *stallingMinter) *env {
	t.Helper()
	e := newEnv(t, "", true)
	e.minter = m
	e.runners = e.run(t, e.q, true)
	return e
}

// stalled waits until m stalls on a job and returns the job.
func (m *stallingMinter) stalled(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), queuetest.Wait)
	defer cancel()
	select {
	case jid := <-m.minting:
		return jid
	case <-ctx.Done():
		t.Fatal("the processor never came to minting")
		return ""
	}
}

// localIDLockName is the node of the local id lock of profile demo's owner.
func localIDLockName(localID string) string {
	return merrittzk.LockName(localID + "_ark:/99999/j2owner")
}

// localIDLocks lists the local id lock nodes.
func localIDLocks(t *testing.T, raw *zk.Conn, e *env) []string {
	t.Helper()
	names, _, err := raw.Children(e.zkRoot + "/locks/localid")
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// drain stops the processor's stages: within ctx the steps in flight end
// on their own, after it they are cancelled; either way every handler has
// returned when drain does.
func (e *env) drain(ctx context.Context) {
	for _, name := range []string{"processing", "storing"} {
		if r := e.runners[name]; r != nil {
			r.Drain(ctx)
		}
	}
}

// TestEveryWayOutOfProcessingReleasesTheLocalIDLocks: a job takes its
// local id locks before it looks its local ids up, and its commit releases
// them when it moves on or fails (TestTheLocalIDLocksGoWithTheJobsCommit).
// Every other way out of the step releases them too: no lock node of the
// processor's (whose session lives on) is left to hold off the next job
// of those local ids, ingestq's or Merritt's.
func TestEveryWayOutOfProcessingReleasesTheLocalIDLocks(t *testing.T) {
	t.Run("another holds one of its locks: it waits", func(t *testing.T) {
		e := start(t, "")
		raw := zktest.RawConn(t)
		peer := merrittzk.Connect(t, zktest.Servers(t), e.zkRoot)
		const busy = "loc-w2_ark:/99999/j2owner"
		if ok, err := peer.Locks().LocalID(busy); !ok || err != nil {
			t.Fatalf("peer lock: %v, %v", ok, err)
		}
		// It takes loc-w1 and "loc-w1;loc-w2" before it meets loc-w2's.
		jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-w1", "loc-w2"}}})
		queuetest.Eventually(t, "the processor met the lock", func() bool {
			return e.runners["processing"].Status().GetOutcomes()["retried"] > 0
		})
		ctx, cancel := context.WithTimeout(context.Background(), queuetest.Wait)
		defer cancel()
		e.drain(ctx)
		if got := localIDLocks(t, raw, e); !slices.Equal(got, []string{localIDLockName("loc-w2")}) {
			t.Errorf("local id locks after the job waited: %v, want only the peer's %s", got, localIDLockName("loc-w2"))
		}
		if st := queuetest.Status(t, e.q, jid); st.GetStatus() != queue.Processing {
			t.Errorf("the waiting job is %s", queue.JobStateName(st.GetStatus()))
		}
	})

	t.Run("its claim's lock is removed while it mints: the job is lost", func(t *testing.T) {
		m := newStallingMinter()
		e := startStalling(t, m)
		raw := zktest.RawConn(t)
		jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-l"}}})
		if m.stalled(t) != jid {
			t.Fatal("stalled on another job")
		}
		if got := localIDLocks(t, raw, e); !slices.Equal(got, []string{localIDLockName("loc-l")}) {
			t.Fatalf("local id locks while minting: %v", got)
		}
		if err := raw.Delete(e.zkRoot+"/jobs/"+jid+"/lock", -1); err != nil {
			t.Fatal(err)
		}
		// Lost, then taken again: the second try could never take the
		// local id's lock if the first had left it.
		if job := e.ended(t, jid); job.GetStatus().GetStatus() != queue.Recording {
			t.Fatalf("job is %s (%q), want Recording", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
		}
		// The runner counts the lost try once its step has returned, which
		// may be just after the second try ended the job.
		queuetest.Eventually(t, "the first try counted as lost", func() bool {
			return e.runners["processing"].Status().GetOutcomes()["fenced"] > 0
		})
		if got := localIDLocks(t, raw, e); len(got) != 0 {
			t.Errorf("local id locks left: %v", got)
		}
	})

	t.Run("its status is rewritten while it mints: its commit is fenced", func(t *testing.T) {
		m := newStallingMinter()
		e := startStalling(t, m)
		raw := zktest.RawConn(t)
		jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-f"}}})
		m.stalled(t)
		status := e.zkRoot + "/jobs/" + jid + "/status"
		data, _, err := raw.Get(status)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Set(status, data, -1); err != nil { // as a writer that ignores locks would
			t.Fatal(err)
		}
		close(m.proceed)
		job := e.ended(t, jid)
		if job.GetStatus().GetStatus() != queue.Recording || job.GetIdentifiers().GetPrimaryId() != mint.NOIDName(shoulder, 1) {
			t.Fatalf("job is %s (%q) with %q, want Recording with the ARK minted once", queue.JobStateName(job.GetStatus().GetStatus()),
				job.GetStatus().GetMessage(), job.GetIdentifiers().GetPrimaryId())
		}
		// Counted once the fenced step has returned, which may be just after
		// the job's retry ended it.
		queuetest.Eventually(t, "the first commit counted as fenced", func() bool {
			return e.runners["processing"].Status().GetOutcomes()["fenced"] > 0
		})
		if got := localIDLocks(t, raw, e); len(got) != 0 {
			t.Errorf("local id locks left: %v", got)
		}
	})

	t.Run("the processor stops while it mints", func(t *testing.T) {
		m := newStallingMinter()
		e := startStalling(t, m)
		raw := zktest.RawConn(t)
		jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-d"}}})
		m.stalled(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no time left: the step in flight is cancelled
		e.drain(ctx)
		if got := localIDLocks(t, raw, e); len(got) != 0 {
			t.Errorf("local id locks left by the stopped step: %v", got)
		}
		if st := queuetest.Status(t, e.q, jid); st.GetStatus() != queue.Processing {
			t.Errorf("the job given back is %s", queue.JobStateName(st.GetStatus()))
		}
	})

	t.Run("minting panics", func(t *testing.T) {
		m := newStallingMinter()
		m.panics = true
		e := startStalling(t, m)
		raw := zktest.RawConn(t)
		jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}, ids: &v1.Identifiers{LocalId: []string{"loc-p1", "loc-p2"}}})
		job := e.ended(t, jid)
		if st := job.GetStatus(); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "minting broke") {
			t.Fatalf("job is %s (%q), want Failed by the panic", queue.JobStateName(st.GetStatus()), st.GetMessage())
		}
		if got := localIDLocks(t, raw, e); len(got) != 0 {
			t.Errorf("local id locks left by the panic: %v", got)
		}
	})

	t.Run("it fails before its ARK is settled", func(t *testing.T) {
		e := start(t, "")
		raw := zktest.RawConn(t)
		if _, err := jobs.New(e.q).BindLocalID(context.Background(), "ark:/99999/j2owner", "loc-x", "ark:/99999/fk4other"); err != nil {
			t.Fatal(err)
		}
		jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"},
			ids: &v1.Identifiers{PrimaryId: "ark:/99999/fk4given", LocalId: []string{"loc-x"}}})
		if st := e.ended(t, jid).GetStatus(); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "bound to ark:/99999/fk4other") {
			t.Fatalf("job is %s (%q), want Failed", queue.JobStateName(st.GetStatus()), st.GetMessage())
		}
		if got := localIDLocks(t, raw, e); len(got) != 0 {
			t.Errorf("local id locks left by the failure: %v", got)
		}
	})
}

// panickyStorage panics on its first store, and stores as Storage does
// after.
type panickyStorage struct {
	store.Storage
	once sync.Once
}

func (s *panickyStorage) Store(ctx context.Context, req store.Request) (store.Version, error) {
	s.once.Do(func() { panic("storing broke") })
	return s.Storage.Store(ctx, req)
}

// TestAPanicWhileStoringLeavesNoStorageLock: the storing step holds the
// object's storage lock while it stores; a panic there fails the job, and
// the lock goes with the step: the job requeued to Storing is stored.
func TestAPanicWhileStoringLeavesNoStorageLock(t *testing.T) {
	e := newEnv(t, "", true)
	e.storage = &panickyStorage{Storage: store.Local{Root: e.storeRoot}}
	e.runners = e.run(t, e.q, true)
	raw := zktest.RawConn(t)
	jid, _ := e.spawn(t, object{files: map[string]string{"a": "a"}})
	if st := e.ended(t, jid).GetStatus(); st.GetStatus() != queue.Failed || !strings.Contains(st.GetMessage(), "storing broke") {
		t.Fatalf("job is %s (%q), want Failed by the panic", queue.JobStateName(st.GetStatus()), st.GetMessage())
	}
	if names, _, err := raw.Children(e.zkRoot + "/locks/storage"); err != nil || len(names) != 0 {
		t.Errorf("storage locks left by the panic: %v (%v)", names, err)
	}
	ctx := context.Background()
	if _, err := admin.New(e.q).Jobs.Requeue(ctx, jid, queue.Storing, "test: store again"); err != nil {
		t.Fatal(err)
	}
	if job := e.ended(t, jid); job.GetStatus().GetStatus() != queue.Recording {
		t.Errorf("requeued: %s %q, want Recording", queue.JobStateName(job.GetStatus().GetStatus()), job.GetStatus().GetMessage())
	}
}
