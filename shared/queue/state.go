package queue

import (
	"fmt"
	"slices"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// This file is the state machine: every state, its spelling in ZooKeeper,
// every allowed transition and every rule about where a job may go. Nothing
// else in ingestq decides whether a move is legal.

// JobState is a job's state.
type JobState = v1.JobState

// BatchState is a batch's state.
type BatchState = v1.BatchState

// Job states.
const (
	Pending      = v1.JobState_JOB_STATE_PENDING
	Held         = v1.JobState_JOB_STATE_HELD
	Estimating   = v1.JobState_JOB_STATE_ESTIMATING
	Provisioning = v1.JobState_JOB_STATE_PROVISIONING
	Downloading  = v1.JobState_JOB_STATE_DOWNLOADING
	Processing   = v1.JobState_JOB_STATE_PROCESSING
	Storing      = v1.JobState_JOB_STATE_STORING
	Recording    = v1.JobState_JOB_STATE_RECORDING
	Notify       = v1.JobState_JOB_STATE_NOTIFY
	Completed    = v1.JobState_JOB_STATE_COMPLETED
	Failed       = v1.JobState_JOB_STATE_FAILED
	Deleted      = v1.JobState_JOB_STATE_DELETED
)

// Batch states.
const (
	BatchPending         = v1.BatchState_BATCH_STATE_PENDING
	BatchHeld            = v1.BatchState_BATCH_STATE_HELD
	BatchProcessing      = v1.BatchState_BATCH_STATE_PROCESSING
	BatchReporting       = v1.BatchState_BATCH_STATE_REPORTING
	BatchUpdateReporting = v1.BatchState_BATCH_STATE_UPDATE_REPORTING
	BatchCompleted       = v1.BatchState_BATCH_STATE_COMPLETED
	BatchFailed          = v1.BatchState_BATCH_STATE_FAILED
	BatchDeleted         = v1.BatchState_BATCH_STATE_DELETED
)

// JobStates lists every job state in pipeline order.
var jobStates = []JobState{Pending, Held, Estimating, Provisioning, Downloading, Processing,
	Storing, Recording, Notify, Completed, Failed, Deleted}

// JobStates returns every job state in pipeline order.
func JobStates() []JobState { return append([]JobState(nil), jobStates...) }

// BatchStates lists the batch states in lifecycle order.
func BatchStates() []BatchState { return append([]BatchState(nil), batchStates...) }

var batchStates = []BatchState{BatchPending, BatchHeld, BatchProcessing, BatchReporting, BatchFailed, BatchUpdateReporting,
	BatchCompleted, BatchDeleted}

var jobStateNames = map[JobState]string{
	Pending: "Pending", Held: "Held", Estimating: "Estimating", Provisioning: "Provisioning",
	Downloading: "Downloading", Processing: "Processing", Storing: "Storing", Recording: "Recording",
	Notify: "Notify", Completed: "Completed", Failed: "Failed", Deleted: "Deleted",
}

// jobStatesByName is jobStateNames the other way round.
var jobStatesByName = func() map[string]JobState {
	m := make(map[string]JobState, len(jobStateNames))
	for st, n := range jobStateNames {
		m[n] = st
	}
	return m
}()

var batchStateNames = map[BatchState]string{
	BatchPending: "Pending", BatchHeld: "Held", BatchProcessing: "Processing",
	BatchReporting: "Reporting", BatchUpdateReporting: "UpdateReporting",
	BatchCompleted: "Completed", BatchFailed: "Failed", BatchDeleted: "Deleted",
}

// JobStateName is the spelling of s in ZooKeeper status JSON ("Pending").
func JobStateName(s JobState) string {
	if n, ok := jobStateNames[s]; ok {
		return n
	}
	return s.String()
}

// BatchStateName is the spelling of s in ZooKeeper status JSON ("UpdateReporting").
func BatchStateName(s BatchState) string {
	if n, ok := batchStateNames[s]; ok {
		return n
	}
	return s.String()
}

// ParseJobState reads a job state as written in ZooKeeper or as typed by an
// operator: "Pending", "pending" and "JOB_STATE_PENDING" all work.
func ParseJobState(s string) (JobState, error) {
	// The spelling ingestq writes, found at once: every status read holds
	// a few (its history's).
	if st, ok := jobStatesByName[s]; ok {
		return st, nil
	}
	for st, n := range jobStateNames {
		if strings.EqualFold(s, n) || s == st.String() {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown job state %q", s)
}

// ParseBatchState reads a batch state ("UpdateReporting", "update-reporting",
// "BATCH_STATE_UPDATE_REPORTING").
func ParseBatchState(s string) (BatchState, error) {
	norm := strings.ReplaceAll(s, "-", "")
	for st, n := range batchStateNames {
		if strings.EqualFold(norm, n) || s == st.String() {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown batch state %q", s)
}

// StateSegment is the path segment of a state under /jobs/states
// ("pending").
func StateSegment(s JobState) string { return strings.ToLower(JobStateName(s)) }

// jobTransitions is the spec's job table. Estimating → Failed is an ingestq
// addition: estimating never fails for its own reasons, but a job whose nodes
// another writer made unreadable must still leave the pipeline with a message.
// Storing → Storing is another: the storing step stays, saying why, while the
// store is unavailable, as Provisioning stays while space is short; and so is
// Notify → Notify, while a job's callback has not been delivered.
var jobTransitions = map[JobState][]JobState{
	Pending:      {Estimating, Held, Failed},
	Held:         {Pending, Deleted},
	Estimating:   {Provisioning, Failed},
	Provisioning: {Downloading, Provisioning, Failed},
	Downloading:  {Processing, Failed},
	Processing:   {Storing, Failed},
	Storing:      {Recording, Storing, Failed},
	Recording:    {Notify, Failed},
	Notify:       {Completed, Notify, Failed},
	Failed:       {Pending, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Deleted},
}

// batchTransitions is the spec's batch table.
var batchTransitions = map[BatchState][]BatchState{
	BatchPending:         {BatchProcessing, BatchHeld},
	BatchHeld:            {BatchPending, BatchDeleted},
	BatchProcessing:      {BatchReporting, BatchFailed},
	BatchReporting:       {BatchCompleted, BatchFailed},
	BatchFailed:          {BatchUpdateReporting, BatchDeleted},
	BatchUpdateReporting: {BatchCompleted, BatchFailed},
}

// CanMoveJob reports whether the spec allows a job to go from one state to another.
func CanMoveJob(from, to JobState) bool {
	for _, s := range jobTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CanMoveBatch reports whether the spec allows a batch to go from one state to another.
func CanMoveBatch(from, to BatchState) bool {
	for _, s := range batchTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CheckJobMove is the state machine's refusal of job jid's move from to (a
// *TransitionError), nil when the move is allowed.
func CheckJobMove(jid string, from, to JobState) error {
	if !CanMoveJob(from, to) {
		return &TransitionError{Item: jid, From: JobStateName(from), To: JobStateName(to)}
	}
	return nil
}

// CheckBatchMove is CheckJobMove for batch bid.
func CheckBatchMove(bid string, from, to BatchState) error {
	if !CanMoveBatch(from, to) {
		return &TransitionError{Item: bid, From: BatchStateName(from), To: BatchStateName(to)}
	}
	return nil
}

// NextLastSuccessful applies the spec's rule for last_successful_status: a
// job moving from old to `to` keeps lastSuccessful or takes old.
func NextLastSuccessful(old, lastSuccessful, to JobState) JobState {
	switch {
	case to == Failed || to == Deleted, old == Failed || old == Deleted, old == to:
		return lastSuccessful
	default:
		return old
	}
}

// ResumeState is where an admin resume of a failed job restarts when the
// admin names no state: the state after last_successful_status.
func ResumeState(lastSuccessful JobState) JobState {
	switch lastSuccessful {
	case Estimating:
		return Provisioning
	case Provisioning:
		return Downloading
	case Downloading:
		return Processing
	case Processing:
		return Storing
	case Storing:
		return Recording
	case Recording:
		return Notify
	default: // null, Pending, Held
		return Estimating
	}
}

// IsLive reports whether a job in s still counts as open work of its batch.
func IsLive(s JobState) bool { return s != Completed && s != Failed && s != Deleted }

// BatchFolderOf is the folder under /batches/BID/states that references a
// job in s.
func BatchFolderOf(s JobState) string {
	switch s {
	case Completed:
		return FolderCompleted
	case Failed:
		return FolderFailed
	case Deleted:
		return FolderDeleted
	default:
		return FolderProcessing
	}
}

// A batch's folders of job references.
const (
	FolderProcessing = "batch-processing"
	FolderCompleted  = "batch-completed"
	FolderFailed     = "batch-failed"
	FolderDeleted    = "batch-deleted"
)

var batchFolders = []string{FolderProcessing, FolderCompleted, FolderFailed, FolderDeleted}

// BatchRefFolders lists a batch's folders of job references: processing,
// completed, failed, deleted.
func BatchRefFolders() []string { return slices.Clone(batchFolders) }

// BatchOpen reports whether a batch in s will still report to its
// depositor.
func BatchOpen(s BatchState) bool {
	switch s {
	case BatchCompleted, BatchFailed, BatchDeleted:
		return false
	}
	return true
}

// RequeueStates are the states a failed job may be requeued to, in pipeline
// order: those the state machine allows from Failed up to the one after its
// last successful state (a step it never reached would find nothing of the
// steps before it: a file list, downloaded files), each only with the nodes
// it needs (a store, an inventory: HasWhatItNeeds, as fsck decides).
func RequeueStates(lastSuccessful JobState, hasStore, hasInventory bool) []JobState {
	reach := slices.Index(jobStates, ResumeState(lastSuccessful))
	var out []JobState
	for i, s := range jobStates {
		if i <= reach && s != Deleted && CanMoveJob(Failed, s) && HasWhatItNeeds(s, hasStore, hasInventory) {
			out = append(out, s)
		}
	}
	return out
}

// RereadsManifest reports whether a requeue to `to` drops a job's file
// list, so that the stage there reads the job's object manifest again: a
// depositor's corrected manifest is then the one the job goes on with.
// It does for a job whose payload is an object manifest (a manifest of
// manifests' row, or a batch of one object) requeued to Pending or
// Estimating, whose stages read a file list the job lacks; a requeue
// further on keeps the list the job has.
func RereadsManifest(conf *v1.JobConfiguration, to JobState) bool {
	return conf.GetPayloadType() == v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST && conf.GetPayloadUrl() != "" &&
		(to == Pending || to == Estimating)
}

// HasWhatItNeeds reports whether a job in s has the nodes the steps
// before s write: processing writes its store (a job in Storing has it),
// storing its inventory (a job in Recording or later has both).
func HasWhatItNeeds(s JobState, hasStore, hasInventory bool) bool {
	switch s {
	case Storing:
		return hasStore
	case Recording, Notify, Completed:
		return hasStore && hasInventory
	}
	return true
}

// NeededNodes names what HasWhatItNeeds looks for in s.
func NeededNodes(s JobState) string {
	if s == Storing {
		return "store"
	}
	return "store and inventory"
}

// FailedIn is the stage a failed job failed in, from its last successful
// state alone: the one after it (Pending when nothing succeeded).
func FailedIn(lastSuccessful JobState) JobState {
	if lastSuccessful == v1.JobState_JOB_STATE_UNSPECIFIED || lastSuccessful == Held {
		return Pending
	}
	return ResumeState(lastSuccessful)
}

// ReachedBefore is the last successful state of a job known only to have
// reached s (an entry of it in s's folder, its status saying otherwise):
// the state whose success leads to s, so that a requeue resumes where the
// job was (none for Pending and Held: nothing succeeded yet). A job found
// in Recording goes back to before Storing: that its object was stored
// whole is not known. ok is false for the ended states, which say nothing
// of the job's progress.
func ReachedBefore(s JobState) (last JobState, ok bool) {
	switch s {
	case Pending, Held:
		return v1.JobState_JOB_STATE_UNSPECIFIED, true
	case Completed, Failed, Deleted:
		return v1.JobState_JOB_STATE_UNSPECIFIED, false
	case Recording:
		return Processing, true
	}
	i := slices.Index(pipeline, s)
	return pipeline[i-1], true
}

// pipeline is the states a job goes through when nothing goes wrong, in
// order: each state's success leads to the next (ResumeState).
var pipeline = []JobState{Pending, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Completed}

// WaitingStates are the states a job waits in for a stage or an operator:
// every state but Completed and Deleted, in pipeline order. Their oldest
// job's age is worth watching.
func WaitingStates() []JobState {
	return []JobState{Pending, Held, Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Failed}
}

// StageStates are the states a stage takes jobs from, in pipeline order.
func StageStates() []JobState { return slices.Clone(pipeline[:len(pipeline)-1]) }

// StateIndex is s's place in pipeline order (JobStates): a job's progress
// compares so.
func StateIndex(s JobState) int { return slices.Index(jobStates, s) }
