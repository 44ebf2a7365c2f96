package queue

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// paths is the one place that spells ZooKeeper paths
// (docs/queue-contract.md).
type paths struct{ root string }

func newPaths(root string) (paths, error) {
	if root == "/" {
		root = ""
	}
	if root != "" && (!strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") || strings.Contains(root, "//")) {
		return paths{}, fmt.Errorf("%w: root prefix %q must start with / and not end with /", ErrInvalid, root)
	}
	return paths{root: root}, nil
}

func (p paths) batches() string                   { return p.root + "/batches" }
func (p paths) batch(bid string) string           { return p.root + "/batches/" + bid }
func (p paths) batchSeq() string                  { return p.root + "/batches/bid" }
func (p paths) batchNode(bid, name string) string { return p.batch(bid) + "/" + name }
func (p paths) batchStatus(bid string) string     { return p.batchNode(bid, "status") }
func (p paths) batchLock(bid string) string       { return p.batchNode(bid, "lock") }
func (p paths) batchStates(bid string) string     { return p.batchNode(bid, "states") }

// batchSpawning marks a batch whose jobs are still being created (ingestq's
// own node; a batcher that finds it with no lock finishes the batch).
func (p paths) batchSpawning(bid string) string { return p.batchNode(bid, "spawning") }
func (p paths) batchFolder(bid, folder string) string {
	return p.batchStates(bid) + "/" + folder
}
func (p paths) batchRef(bid, folder, jid string) string {
	return p.batchFolder(bid, folder) + "/" + jid
}
func (p paths) batchUUIDs() string           { return p.root + "/batch-uuids" }
func (p paths) batchUUID(uuid string) string { return p.root + "/batch-uuids/" + uuid }

func (p paths) jobs() string                    { return p.root + "/jobs" }
func (p paths) jobSeq() string                  { return p.root + "/jobs/jid" }
func (p paths) job(jid string) string           { return p.root + "/jobs/" + jid }
func (p paths) jobNode(jid, name string) string { return p.job(jid) + "/" + name }
func (p paths) jobStatus(jid string) string     { return p.jobNode(jid, "status") }
func (p paths) jobLock(jid string) string       { return p.jobNode(jid, "lock") }
func (p paths) jobStates() string               { return p.root + "/jobs/states" }
func (p paths) jobStateDir(s JobState) string   { return p.jobStates() + "/" + jobStateSegment(s) }
func (p paths) jobEntry(s JobState, priority int32, jid string) string {
	return p.jobStateDir(s) + "/" + entryName(priority, jid)
}

func (p paths) locks() string                  { return p.root + "/locks" }
func (p paths) queueLocks() string             { return p.root + "/locks/queue" }
func (p paths) ingestPause() string            { return p.root + "/locks/queue/ingest" }
func (p paths) collections() string            { return p.root + "/locks/collections" }
func (p paths) collectionHold(m string) string { return p.collections() + "/" + m }
func (p paths) storageLocks() string           { return p.root + "/locks/storage" }
func (p paths) storageLock(ark string) string  { return p.storageLocks() + "/" + peerLockName(ark) }
func (p paths) inventoryLocks() string         { return p.root + "/locks/inventory" }
func (p paths) inventoryLock(ark string) string {
	return p.inventoryLocks() + "/" + peerLockName(ark)
}
func (p paths) localIDLocks() string { return p.root + "/locks/localid" }
func (p paths) localIDLock(name string) string {
	return p.localIDLocks() + "/" + peerLockName(name)
}

// ingestq's own areas, outside the spec's paths so Merritt peers never see them.
func (p paths) workers() string            { return p.root + "/workers" }
func (p paths) worker(id string) string    { return p.workers() + "/" + id }
func (p paths) counters() string           { return p.root + "/counters" }
func (p paths) counter(name string) string { return p.counters() + "/" + name }
func (p paths) bindings() string           { return p.root + "/local-ids" }
func (p paths) binding(owner, localID string) string {
	return p.bindings() + "/" + LockName(owner) + "/" + LockName(localID)
}
func (p paths) consoleSessions() string         { return p.root + "/console-sessions" }
func (p paths) consoleSession(id string) string { return p.consoleSessions() + "/" + id }

// skeleton lists the persistent folders every queue has, the root first.
func (p paths) skeleton() []string {
	var out []string
	if p.root != "" {
		out = append(out, p.root)
	}
	out = append(out, p.batches(), p.batchUUIDs(), p.jobs(), p.jobStates())
	for _, s := range jobStates {
		out = append(out, p.jobStateDir(s))
	}
	return append(out, p.locks(), p.queueLocks(), p.collections(), p.storageLocks(),
		p.inventoryLocks(), p.localIDLocks(), p.workers(), p.counters(), p.bindings())
}

// LockName turns an ARK or local id into a name for ingestq's own nodes
// (/counters, /local-ids) and the store's folders: ':' and '/' become '_',
// and the ":/" after "ark" becomes one '_' ("ark:/99999/fk4x" →
// "ark_99999_fk4x"). Locks under /locks, which Merritt's programs take
// too, are named as they name them (peerLockName); for an ARK the two
// agree.
func LockName(id string) string {
	return strings.NewReplacer(":/", "_", ":", "_", "/", "_").Replace(id)
}

// peerLockName is the name of a lock under /locks as the peer library
// spells it: each '/', with a ':' just before it, becomes '_'
// ("ark:/99999/fk4x" → "ark_99999_fk4x"); other ':' stay. A lock shared
// with Merritt's programs must have their name for the same id.
func peerLockName(id string) string {
	return strings.NewReplacer(":/", "_", "/", "_").Replace(id)
}

// entryName is a job's name in a state folder: two-digit priority, '-', jid.
// Priorities above 99 are written with all their digits ("150-jid…"), exactly
// as the Merritt library's own "%02d" writes them; ingestq's readers compare
// the numbers, not the text, so such entries still sort after 99.
func entryName(priority int32, jid string) string {
	return fmt.Sprintf("%02d-%s", priority, jid)
}

// parseEntry splits "05-jid0000000001".
func parseEntry(name string) (priority int32, jid string, ok bool) {
	i := strings.IndexByte(name, '-')
	if i <= 0 {
		return 0, "", false
	}
	n, err := strconv.ParseInt(name[:i], 10, 32)
	if err != nil || n < 0 || !validID(name[i+1:], "jid") {
		return 0, "", false
	}
	return int32(n), name[i+1:], true
}

// validID accepts ZooKeeper sequential names like "jid0000000042".
func validID(id, prefix string) bool {
	if !strings.HasPrefix(id, prefix) || len(id) != len(prefix)+10 {
		return false
	}
	for _, c := range id[len(prefix):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ValidJobID reports whether id looks like "jid0000000042".
func ValidJobID(id string) bool { return validID(id, "jid") }

// ValidBatchID reports whether id looks like "bid0000000042".
func ValidBatchID(id string) bool { return validID(id, "bid") }

// compareEntries orders entries by priority, then jid (oldest first).
func compareEntries(a, b entry) int {
	if c := cmp.Compare(a.priority, b.priority); c != 0 {
		return c
	}
	return strings.Compare(a.jid, b.jid)
}

type entry struct {
	name     string
	priority int32
	jid      string
	pick     uint64 // its pick's number (Consumer InOrder)
}
