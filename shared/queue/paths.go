package queue

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Paths spells the queue's ZooKeeper paths (docs/queue-contract.md): the
// one place that does. Each entity has its own (Batch, Job, Locks, Own).
type Paths struct{ root string }

// NewPaths is the paths of a queue under root ("" or "/some/prefix").
func NewPaths(root string) (Paths, error) {
	if root == "/" {
		root = ""
	}
	if root != "" && (!strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") || strings.Contains(root, "//")) {
		return Paths{}, fmt.Errorf("%w: root prefix %q must start with / and not end with /", ErrInvalid, root)
	}
	return Paths{root: root}, nil
}

// Root is the prefix every path hangs under ("" for none).
func (p Paths) Root() string { return p.root }

func (p Paths) Batches() string { return p.root + "/batches" }

// BatchSeq is the prefix of a new batch's sequential node.
func (p Paths) BatchSeq() string            { return p.root + "/batches/bid" }
func (p Paths) Batch(bid string) BatchPaths { return BatchPaths{dir: p.root + "/batches/" + bid} }
func (p Paths) BatchUUIDs() string          { return p.root + "/batch-uuids" }
func (p Paths) BatchUUID(uuid string) string {
	return p.root + "/batch-uuids/" + uuid
}
func (p Paths) Jobs() string { return p.root + "/jobs" }

// JobSeq is the prefix of a new job's sequential node.
func (p Paths) JobSeq() string          { return p.root + "/jobs/jid" }
func (p Paths) Job(jid string) JobPaths { return JobPaths{dir: p.root + "/jobs/" + jid} }
func (p Paths) JobStates() string       { return p.root + "/jobs/states" }

// StateDir is the folder of the jobs in state s.
func (p Paths) StateDir(s JobState) string { return p.JobStates() + "/" + StateSegment(s) }

// Entry is a job's entry in state s's folder at priority.
func (p Paths) Entry(s JobState, priority int32, jid string) string {
	return p.StateDir(s) + "/" + EntryName(priority, jid)
}

func (p Paths) Locks() LockPaths { return LockPaths{dir: p.root + "/locks"} }

// Own are ingestq's own folders, outside the spec's paths so Merritt's
// programs never see them.
func (p Paths) Own() OwnPaths { return OwnPaths(p) }

// Folders lists the persistent folders every queue has, the root first.
func (p Paths) Folders() []string {
	var out []string
	if p.root != "" {
		out = append(out, p.root)
	}
	out = append(out, p.Batches(), p.BatchUUIDs(), p.Jobs(), p.JobStates())
	for _, s := range jobStates {
		out = append(out, p.StateDir(s))
	}
	l, o := p.Locks(), p.Own()
	return append(out, l.Dir(), l.Queue(), l.Collections(), l.Storage(), l.Inventory(), l.LocalIDs(),
		o.Workers(), o.Counters(), o.Bindings())
}

// BatchPaths are one batch's nodes.
type BatchPaths struct{ dir string }

func (b BatchPaths) Dir() string                 { return b.dir }
func (b BatchPaths) Node(name string) string     { return b.dir + "/" + name }
func (b BatchPaths) Status() string              { return b.dir + "/" + NodeStatus }
func (b BatchPaths) Lock() string                { return b.dir + "/" + NodeLock }
func (b BatchPaths) States() string              { return b.dir + "/" + NodeStates }
func (b BatchPaths) Folder(folder string) string { return b.States() + "/" + folder }

// Ref is the reference to job jid in the batch's folder.
func (b BatchPaths) Ref(folder, jid string) string { return b.Folder(folder) + "/" + jid }

// RefFolders are the batch's folders of job references, in
// BatchRefFolders' order.
func (b BatchPaths) RefFolders() []string {
	out := make([]string, len(batchFolders))
	for i, f := range batchFolders {
		out[i] = b.Folder(f)
	}
	return out
}

// JobPaths are one job's nodes.
type JobPaths struct{ dir string }

func (j JobPaths) Dir() string             { return j.dir }
func (j JobPaths) Node(name string) string { return j.dir + "/" + name }
func (j JobPaths) Status() string          { return j.dir + "/" + NodeStatus }
func (j JobPaths) Lock() string            { return j.dir + "/" + NodeLock }

// LockPaths are the locks under /locks, which Merritt's programs take
// too.
type LockPaths struct{ dir string }

func (l LockPaths) Dir() string         { return l.dir }
func (l LockPaths) Queue() string       { return l.dir + "/queue" }
func (l LockPaths) IngestPause() string { return l.dir + "/queue/ingest" }
func (l LockPaths) Collections() string { return l.dir + "/collections" }
func (l LockPaths) CollectionHold(mnemonic string) string {
	return l.Collections() + "/" + mnemonic
}
func (l LockPaths) Storage() string               { return l.dir + "/storage" }
func (l LockPaths) StorageLock(ark string) string { return l.Storage() + "/" + peerLockName(ark) }
func (l LockPaths) Inventory() string             { return l.dir + "/inventory" }
func (l LockPaths) InventoryLock(ark string) string {
	return l.Inventory() + "/" + peerLockName(ark)
}
func (l LockPaths) LocalIDs() string { return l.dir + "/localid" }
func (l LockPaths) LocalIDLock(name string) string {
	return l.LocalIDs() + "/" + peerLockName(name)
}

// OwnPaths are ingestq's own folders.
type OwnPaths struct{ root string }

func (o OwnPaths) Workers() string            { return o.root + "/workers" }
func (o OwnPaths) Worker(id string) string    { return o.Workers() + "/" + id }
func (o OwnPaths) Counters() string           { return o.root + "/counters" }
func (o OwnPaths) Counter(name string) string { return o.Counters() + "/" + name }
func (o OwnPaths) Bindings() string           { return o.root + "/local-ids" }

// BindingOwner is the folder of one owner's local ids.
func (o OwnPaths) BindingOwner(owner string) string { return o.Bindings() + "/" + LockName(owner) }
func (o OwnPaths) Binding(owner, localID string) string {
	return o.BindingOwner(owner) + "/" + LockName(localID)
}
func (o OwnPaths) SignIns() string         { return o.root + "/console-sessions" }
func (o OwnPaths) SignIn(id string) string { return o.SignIns() + "/" + id }

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

// EntryName is a job's name in a state folder: two-digit priority, '-',
// jid. Priorities above 99 are written with all their digits ("150-jid…"),
// exactly as the Merritt library's own "%02d" writes them; ingestq's readers
// compare the numbers, not the text, so such entries still sort after 99.
func EntryName(priority int32, jid string) string {
	return fmt.Sprintf("%02d-%s", priority, jid)
}

// Entry is a job's entry in a state folder, as read from its name.
type Entry struct {
	Name     string
	Priority int32
	JID      string
}

// ParseEntry splits "05-jid0000000001".
func ParseEntry(name string) (Entry, bool) {
	i := strings.IndexByte(name, '-')
	if i <= 0 {
		return Entry{}, false
	}
	n, err := strconv.ParseInt(name[:i], 10, 32)
	if err != nil || n < 0 || !validID(name[i+1:], "jid") {
		return Entry{}, false
	}
	return Entry{Name: name, Priority: int32(n), JID: name[i+1:]}, true
}

// SortedEntries parses and sorts a state folder's children (CompareEntries);
// names that are not "PP-jid…" are skipped.
func SortedEntries(names []string) []Entry {
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		if e, ok := ParseEntry(n); ok {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, CompareEntries)
	return out
}

// CompareEntries orders entries by priority, then jid (oldest first): the
// order a state's jobs are taken in.
func CompareEntries(a, b Entry) int {
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	return strings.Compare(a.JID, b.JID)
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
