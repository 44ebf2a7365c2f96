package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/session/internal/zkwire"
)

// Txn is one ZooKeeper multi, built as etcd's clientv3.Txn is: guards
// (If) and operations (Then), each added under a name, applied together or
// not at all. A refusal is a *Refused naming the guard or operation that
// failed; nothing in the queue reads a multi's answer by position.
//
// A Txn begun from a Hold (Hold.Txn) is fenced: it opens with the hold's
// status at the version the hold owns (StatusStep) and its lock node
// (LockStep), and Commit keeps the hold in step with what happened (see
// Commit). Every write of a claim goes through one.
//
// Steps go to the server in the order added (a fenced Txn's two first);
// a refusal names the first step that failed. A Txn may be committed
// again after an answer lost with the connection.
type Txn struct {
	n     *Nodes
	steps []step
	// absent are the nodes IfAbsent creates, deleted again at the end.
	absent []step
	alone  bool

	// A fenced Txn's hold, the status it writes (nil: checked) and
	// whether it deletes the hold's lock (ReleaseLock).
	hold    *Hold
	status  []byte
	release bool

	res []zk.MultiResponse // the answer of the commit that applied it
}

// step is a guard or an operation as added: the request, and its name.
type step struct {
	name  string
	guard bool
	req   any // *zk.CreateRequest, *zk.SetDataRequest, *zk.DeleteRequest, *zk.CheckVersionRequest
}

// Names of a hold's own steps, as a Refused gives them.
const (
	// StatusStep is the item's status, at the version the hold owns
	// (written, or checked); taking the hold, the status rewritten as
	// read. Refused: the fence is lost (another writer moved the item on).
	StatusStep = "status"
	// LockStep is the hold's lock node, checked or deleted; taking the
	// hold, created. Refused: the lock is gone (or, taking it, there).
	LockStep = "lock"
)

// Guard is a condition a Txn checks (If).
type Guard struct {
	name   string
	req    any
	absent bool
}

// IfVersion guards on a node's data being at version: refused as changed
// (zk.ErrBadVersion) or gone (zk.ErrNoNode).
func IfVersion(name, path string, version int32) Guard {
	return Guard{name: name, req: &zk.CheckVersionRequest{Path: path, Version: version}}
}

// IfExists guards on a node existing, at any version (a lock held):
// refused as gone.
func IfExists(name, path string) Guard { return IfVersion(name, path, -1) }

// IfAbsent guards on there being no node at path: the node is created
// where the guard stands and deleted at the end of the Txn (two
// operations; ZooKeeper has no check of absence). Refused as there
// (zk.ErrNodeExists).
func IfAbsent(name, path string) Guard {
	return Guard{name: name, req: &zk.CreateRequest{Path: path, Flags: zk.FlagEphemeral}, absent: true}
}

// Op is an operation of a Txn (Then).
type Op struct {
	name string
	req  any
}

// Create creates path holding data (flags: zk.FlagEphemeral,
// zk.FlagSequence), with the session's ACL. Created gives the path made.
func Create(name, path string, data []byte, flags int32) Op {
	return Op{name: name, req: &zk.CreateRequest{Path: path, Data: data, Flags: flags}}
}

// Set writes path's data at version (-1: any).
func Set(name, path string, data []byte, version int32) Op {
	return Op{name: name, req: &zk.SetDataRequest{Path: path, Data: data, Version: version}}
}

// Delete deletes path at version (-1: any).
func Delete(name, path string, version int32) Op {
	return Op{name: name, req: &zk.DeleteRequest{Path: path, Version: version}}
}

// Size is about what a creation puts on the wire and in the server's
// memory (its path and data); other operations count their path.
func (o Op) Size() int {
	switch r := o.req.(type) {
	case *zk.CreateRequest:
		return len(r.Path) + len(r.Data) + 16
	case *zk.SetDataRequest:
		return len(r.Path) + len(r.Data) + 16
	case *zk.DeleteRequest:
		return len(r.Path) + 16
	}
	return 16
}

// Txn begins a transaction of the session's, fenced by nothing.
func (n *Nodes) Txn() *Txn { return &Txn{n: n} }

// Txn begins a transaction fenced by the hold (see Txn.Commit): it opens
// with the status at the version the hold owns, written as status when
// not nil and checked otherwise (StatusStep), then the lock's presence
// (LockStep). A Txn refused by either lost the item.
func (h *Hold) Txn(status []byte) *Txn {
	return &Txn{n: h.b.s.nodes, hold: h, status: status}
}

// If adds guards, in order.
func (t *Txn) If(guards ...Guard) *Txn {
	for _, g := range guards {
		if g.absent {
			c := *g.req.(*zk.CreateRequest)
			c.Acl = t.n.acl
			t.steps = append(t.steps, step{name: g.name, guard: true, req: &c})
			t.absent = append(t.absent, step{name: g.name, guard: true, req: &zk.DeleteRequest{Path: c.Path, Version: -1}})
			continue
		}
		t.steps = append(t.steps, step{name: g.name, guard: true, req: g.req})
	}
	return t
}

// Then adds operations, in order.
func (t *Txn) Then(ops ...Op) *Txn {
	for _, o := range ops {
		if c, ok := o.req.(*zk.CreateRequest); ok {
			c.Acl = t.n.acl
		}
		t.steps = append(t.steps, step{name: o.name, req: o.req})
	}
	return t
}

// ReleaseLock makes a fenced Txn delete the hold's lock (its LockStep)
// instead of checking it: the change ends the hold, which Commit settles.
func (t *Txn) ReleaseLock() *Txn {
	t.release = true
	return t
}

// Alone sends the Txn as a request of its own, not grouped with the multis
// of other callers: a large one (a reservation of many ids) would only hold
// them back.
func (t *Txn) Alone() *Txn {
	t.alone = true
	return t
}

// Len is how many guards and operations the Txn holds (a fenced Txn's
// fence not counted).
func (t *Txn) Len() int { return len(t.steps) }

// Created returns the paths created, in order, by the operations added
// under name, once the Txn was applied (a sequential node's numbered).
func (t *Txn) Created(name string) []string {
	var out []string
	for i, s := range t.all() {
		if _, ok := s.req.(*zk.CreateRequest); ok && s.name == name && !s.guard && i < len(t.res) {
			out = append(out, t.res[i].String)
		}
	}
	return out
}

// all are the steps as sent: a fenced Txn's fence, the steps added, the
// deletions that end IfAbsent's guards.
func (t *Txn) all() []step {
	if t.hold == nil && len(t.absent) == 0 {
		return t.steps
	}
	out := make([]step, 0, len(t.steps)+len(t.absent)+2)
	if h := t.hold; h != nil {
		v := h.Version()
		status := step{name: StatusStep, guard: true, req: &zk.CheckVersionRequest{Path: h.statusPath, Version: v}}
		if t.status != nil {
			status = step{name: StatusStep, req: &zk.SetDataRequest{Path: h.statusPath, Data: t.status, Version: v}}
		}
		lock := step{name: LockStep, guard: true, req: &zk.CheckVersionRequest{Path: h.lockPath, Version: -1}}
		if t.release {
			lock = step{name: LockStep, req: &zk.DeleteRequest{Path: h.lockPath, Version: -1}}
		}
		out = append(out, status, lock)
	}
	out = append(out, t.steps...)
	return append(out, t.absent...)
}

// send sends the Txn once and says how the server answered: nil when it
// was applied, a *Refused naming the step that failed, or the request's
// error (the connection lost: applied or not, nobody knows).
func (t *Txn) send(ctx context.Context) error {
	steps := t.all()
	ops := make([]any, len(steps))
	for i, s := range steps {
		ops[i] = s.req
	}
	var res []zk.MultiResponse
	var err error
	if t.alone {
		res, err = call(ctx, func() ([]zk.MultiResponse, error) { return t.n.group.send(ops) })
	} else {
		res, err = t.n.group.do(ctx, ops)
	}
	if err == nil {
		t.res = res
		return nil
	}
	if i := zkwire.FailedAt(res, err); i >= 0 && i < len(steps) {
		r := &Refused{Name: steps[i].name, Guard: steps[i].guard, Err: res[i].Error}
		if t.hold != nil && i < 2 {
			r.What, r.fence = t.hold.what, true
		}
		return r
	}
	return denied(err)
}

// Commit sends the Txn. Unfenced, it answers as the server did: nil, a
// *Refused, or the connection's error.
//
// Fenced (Hold.Txn), it is the one path of every change under a hold:
//   - a hold that is over, or whose session is gone, commits nothing
//     (ErrFenced);
//   - applied, the hold follows: settled when its lock went with the change
//     (ReleaseLock), owning the next status version when it wrote the
//     status and kept the lock;
//   - refused by its fence, the hold ends (the item is lost) and the
//     *Refused matches queue.ErrFenced: the status moved on (the lock, if
//     still this hold's, is removed) or the lock is gone;
//   - its answer lost with the connection, a Txn that writes or deletes the
//     status reads it to learn what happened: its own write there (or the
//     status gone) is applied, the status as the hold owns it is sent again
//     (up to three times), anything else lost the item. One that only
//     checks the status returns the connection's error for its caller to
//     find out.
func (t *Txn) Commit(ctx context.Context) error {
	h := t.hold
	if h == nil {
		return t.send(ctx)
	}
	if err := h.Check(); err != nil {
		return err
	}
	deletes := t.deletesStatus()
	for sent := 1; ; sent++ {
		err := t.send(ctx)
		if Retryable(err) && (t.status != nil || deletes) {
			data, stat, gerr := t.n.Get(ctx, h.statusPath)
			switch {
			case deletes && errors.Is(gerr, zk.ErrNoNode):
				err = nil
			case gerr != nil:
				return fmt.Errorf("%s: commit outcome unknown after %v: %w", h.what, err, gerr)
			case !deletes && stat.Version == h.Version()+1 && bytes.Equal(data, t.status):
				err = nil
			case stat.Version == h.Version() && sent < 4:
				continue
			default:
				h.fenced(ctx)
				return fmt.Errorf("%s: %w: connection lost during commit", h.what, queue.ErrFenced)
			}
		}
		var r *Refused
		switch {
		case err == nil:
			if t.release {
				h.settle()
			} else if t.status != nil {
				h.moved()
			}
		case errors.As(err, &r) && r.fence && r.Name == LockStep:
			h.LockRemoved(r)
			h.Abandon()
		case errors.As(err, &r) && r.fence:
			h.fenced(ctx)
		}
		return err
	}
}

// deletesStatus reports whether the Txn deletes its hold's status node (a
// deletion of the item).
func (t *Txn) deletesStatus() bool {
	for _, s := range t.steps {
		if d, ok := s.req.(*zk.DeleteRequest); ok && d.Path == t.hold.statusPath {
			return true
		}
	}
	return false
}

// Refused is a Txn the server refused: nothing of it was applied. Name is
// the guard or operation that failed, as added (StatusStep, LockStep for
// a hold's own), Err the server's reason. A fenced Txn's refusal by its
// fence (the fence lost, the lock gone) matches queue.ErrFenced; any other
// matches Err (zk.ErrNoNode, zk.ErrBadVersion, zk.ErrNodeExists…), and
// queue.ErrDenied when the ACLs refused it.
type Refused struct {
	// What names the item a fenced Txn is about ("job jid…"; "" unfenced).
	What  string
	Name  string
	Guard bool
	Err   error
	fence bool
}

func (r *Refused) Error() string {
	var msg string
	switch {
	case r.fence && r.Name == StatusStep:
		msg = fmt.Sprintf("fence lost: its status moved on (%v)", r.Err)
	case r.fence:
		msg = "lock gone"
	case r.Gone():
		msg = r.Name + " gone"
	case r.Changed():
		msg = r.Name + " changed"
	case r.Exists():
		msg = r.Name + " there already"
	default:
		msg = fmt.Sprintf("%s: %v", r.Name, r.Err)
	}
	if r.What != "" {
		msg = r.What + ": " + msg
	}
	return msg
}

func (r *Refused) Unwrap() []error {
	switch {
	case r.fence:
		return []error{queue.ErrFenced}
	case errors.Is(r.Err, zk.ErrNoAuth):
		return []error{queue.ErrDenied, r.Err}
	}
	return []error{r.Err}
}

// Fence reports whether the refusal was a fenced Txn's fence's: the item
// is lost.
func (r *Refused) Fence() bool { return r.fence }

// Gone reports a node that did not exist (zk.ErrNoNode).
func (r *Refused) Gone() bool { return errors.Is(r.Err, zk.ErrNoNode) }

// Changed reports a node at another version (zk.ErrBadVersion).
func (r *Refused) Changed() bool { return errors.Is(r.Err, zk.ErrBadVersion) }

// Exists reports a node created that was there already (zk.ErrNodeExists).
func (r *Refused) Exists() bool { return errors.Is(r.Err, zk.ErrNodeExists) }

// RefusedBy returns the refusal err is, when the step that failed was
// added under name.
func RefusedBy(err error, name string) (*Refused, bool) {
	var r *Refused
	if errors.As(err, &r) && r.Name == name {
		return r, true
	}
	return nil, false
}

// denied makes a refusal by ZooKeeper's ACLs match queue.ErrDenied.
func denied(err error) error {
	if errors.Is(err, zk.ErrNoAuth) && !errors.Is(err, queue.ErrDenied) {
		return fmt.Errorf("%w: %w", queue.ErrDenied, err)
	}
	return err
}
