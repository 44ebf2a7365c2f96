package queue

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is. Each returned error also names the
// item it is about.
var (
	// ErrNotFound: the batch, job or lock does not exist.
	ErrNotFound = errors.New("not found")
	// ErrLocked: another consumer holds the item's lock.
	ErrLocked = errors.New("locked by another consumer")
	// ErrFenced: this consumer lost its lock or session (or another writer
	// changed the item) after taking it, so its change was refused.
	ErrFenced = errors.New("lock lost: change refused")
	// ErrNoSession: there is no live ZooKeeper session right now.
	ErrNoSession = errors.New("no ZooKeeper session")
	// ErrExists: the item already exists.
	ErrExists = errors.New("already exists")
	// ErrWrongState: the item is not in the state the operation needs.
	ErrWrongState = errors.New("wrong state")
	// ErrCorrupt: a node holds data that does not follow the contract.
	ErrCorrupt = errors.New("corrupt node")
	// ErrInvalid: the caller passed an argument the contract does not allow.
	ErrInvalid = errors.New("invalid argument")
	// ErrDenied: ZooKeeper's ACLs refuse this client the change (it lacks
	// the digest credentials the queue's nodes were created with).
	ErrDenied = errors.New("not allowed by ZooKeeper's ACLs")
)

// TransitionError is a state change that the state machine does not allow.
// It matches ErrWrongState.
type TransitionError struct {
	Item     string // jid or bid
	From, To string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("%s: transition %s → %s is not allowed", e.Item, e.From, e.To)
}

// Is makes errors.Is(err, ErrWrongState) true.
func (e *TransitionError) Is(target error) bool { return target == ErrWrongState }

// CorruptError is a node whose content another writer made unreadable.
// It matches ErrCorrupt.
type CorruptError struct {
	Path string
	Err  error
}

func (e *CorruptError) Error() string { return fmt.Sprintf("%s: unreadable: %v", e.Path, e.Err) }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *CorruptError) Unwrap() error { return e.Err }

// NoBatchError is a job whose batch does not exist: deleted under it, or
// never written by the job's writer. No change that needs the batch is
// made; Failed says the job was failed instead, with a message saying so.
// It matches ErrWrongState.
type NoBatchError struct {
	Job, Batch string
	Failed     bool
}

func (e *NoBatchError) Error() string {
	msg := "job " + e.Job + ": " + e.Reason()
	if e.Failed {
		msg += "; the job was failed instead"
	}
	return msg
}

// Is makes errors.Is(err, ErrWrongState) true.
func (e *NoBatchError) Is(target error) bool { return target == ErrWrongState }

// Reason says what is wrong with the job's batch.
func (e *NoBatchError) Reason() string {
	if e.Batch == "" {
		return "it names no batch (its bid node is missing or empty)"
	}
	return fmt.Sprintf("its batch %s does not exist", e.Batch)
}
