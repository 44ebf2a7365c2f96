package queue

import (
	"fmt"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// A job's nodes, in the order they are read; a batch's; and the lock and
// status both have.
const (
	NodeBid         = "bid"
	NodePriority    = "priority"
	NodeSpaceNeeded = "space_needed"
	NodeConfig      = "configuration"
	NodeIdentifiers = "identifiers"
	NodeMetadata    = "metadata"
	NodeStore       = "store"
	NodeInventory   = "inventory"
	NodeManifest    = "manifest" // ingestq's own

	NodeSubmission   = "submission"
	NodeStatusReport = "status-report"
	NodeStates       = "states"
	NodeSpawning     = "spawning" // ingestq's own
	NodePayload      = "payload"  // ingestq's own

	NodeStatus = "status"
	NodeLock   = "lock"
)

// WrittenOnce reports whether a job's node name is written only when the
// job is created, by every writer the contract knows (ingestq, the peer
// library, Merritt's ingest service): a reader that has it need not check
// that it is still as read.
func WrittenOnce(name string) bool {
	return name == NodeBid || name == NodeConfig
}

// JobDataNodes are a job's data nodes but its manifest, in the order they
// are read.
func JobDataNodes() []string {
	return []string{NodeBid, NodePriority, NodeSpaceNeeded, NodeConfig, NodeIdentifiers, NodeMetadata, NodeStore, NodeInventory}
}

// Parts says which of a job's data nodes a consumer reads when it claims a
// job. Reading only what a stage needs keeps a transition at two reads and
// two writes; the rest can still be written (presence is checked then).
type Parts uint16

// The parts of a job. The status is always read; the bid is read when a
// commit needs it.
const (
	PartConfiguration Parts = 1 << iota
	PartIdentifiers
	PartMetadata
	PartStore
	PartInventory
	PartSpaceNeeded
	PartPriority
	PartBid
	// PartManifest reads the job's file list with its claim, in the same
	// request; LoadManifest then returns it without a read of its own.
	// Only a consumer's claims honour it.
	PartManifest
	// PartsAll is every data node but the manifest (read with LoadManifest).
	PartsAll = PartConfiguration | PartIdentifiers | PartMetadata | PartStore | PartInventory | PartSpaceNeeded | PartPriority | PartBid
	// PartsStatusOnly reads nothing but the status.
	PartsStatusOnly Parts = 1 << 15
)

// Nodes are the data nodes of ps, in the order they are read (0: PartsAll).
func (ps Parts) Nodes() []string {
	if ps == 0 {
		ps = PartsAll
	}
	var out []string
	for _, x := range []struct {
		p    Parts
		node string
	}{{PartBid, NodeBid}, {PartPriority, NodePriority}, {PartSpaceNeeded, NodeSpaceNeeded}, {PartConfiguration, NodeConfig},
		{PartIdentifiers, NodeIdentifiers}, {PartMetadata, NodeMetadata}, {PartStore, NodeStore}, {PartInventory, NodeInventory},
		{PartManifest, NodeManifest}} {
		if ps&x.p != 0 {
			out = append(out, x.node)
		}
	}
	return out
}

// DefaultPriority is a job's priority when the caller gives none.
const DefaultPriority = 5

// MaxPriority is the largest priority ingestq writes. Larger numbers are read
// (and sort after 99), but the Merritt library's reader assumes two digits,
// so ingestq never writes more.
const MaxPriority = 99

// ValidPriority refuses a priority outside 0..MaxPriority (nil: none given).
func ValidPriority(p *int32) error {
	if p != nil && (*p < 0 || *p > MaxPriority) {
		return fmt.Errorf("%w: priority %d is outside 0..%d", ErrInvalid, *p, MaxPriority)
	}
	return nil
}

// JobWorkingDir is the folder that holds a job's files: the working_dir
// its configuration names or, for a job created without one (the peer
// library's createJobConfiguration writes none), <workRoot>/<bid>/<jid>,
// where the batcher puts every job's. "" when the job names none and its
// bid is not known.
func JobWorkingDir(workRoot string, j *v1.Job) string {
	if wd := j.GetConfiguration().GetWorkingDir(); wd != "" {
		return wd
	}
	if workRoot == "" || j.GetBid() == "" || j.GetId() == "" {
		return ""
	}
	return filepath.Join(workRoot, j.GetBid(), j.GetId())
}

// ForeignLockMessage begins the message of a job whose lock node belongs
// to no session.
const ForeignLockMessage = "its lock node is not a session's (ephemeralOwner 0, left by another writer), so no consumer could ever take it"

// PayloadRecord is what the batcher records, with the move to Processing,
// of the one reading of a payload its jobs are made from (ingestq's own
// node, /batches/BID/payload; see the package doc): a batcher finishing a
// half-spawned batch makes the rest of its jobs from that same reading.
type PayloadRecord struct {
	// SHA256 (hex) and Size are the digest and length of the payload as
	// first fetched.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// SpawnStopped says why not every row of the payload became a job (set
	// by BatchClaim.StopSpawning): the batch fails once the jobs it has end.
	SpawnStopped string `json:"spawn_stopped,omitempty"`
}

// DecodePayloadRecord reads a batch's payload node.
func DecodePayloadRecord(path string, data []byte) (*PayloadRecord, error) {
	var r PayloadRecord
	if err := unmarshal(path, data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// EncodePayloadRecord writes a batch's payload node.
func EncodePayloadRecord(r PayloadRecord) []byte { return marshal(r) }

// MaxUUIDLength bounds a submitter's batch id (it becomes a node name).
const MaxUUIDLength = 128

// ValidUUID refuses a submitter's batch id that cannot be a node name.
func ValidUUID(id string) error {
	if id == "" || len(id) > MaxUUIDLength || id == "." || id == ".." || id == "zookeeper" {
		return fmt.Errorf("%w: batch id %q must be 1 to %d characters, and neither %q nor %q", ErrInvalid, Truncate(id, 40), MaxUUIDLength, ".", "..")
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: batch id %q is not valid UTF-8", ErrInvalid, Truncate(id, 40))
	}
	for _, r := range id {
		if r == '/' || unicode.IsControl(r) || unicode.IsSpace(r) || v1.ZooKeeperRefuses(r) {
			return fmt.Errorf("%w: batch id %q must not contain '/', spaces, control characters or a character ZooKeeper refuses in a node name (%U)",
				ErrInvalid, Truncate(id, 40), r)
		}
	}
	return nil
}

// ValidName refuses a counter, owner or local id (kind) ingestq cannot
// name a node after.
func ValidName(kind, s string) error {
	if s == "" || len(s) > 200 || strings.ContainsAny(s, "\x00\n") {
		return fmt.Errorf("%w: %s %q must be 1..200 characters", ErrInvalid, kind, Truncate(s, 40))
	}
	return nil
}

// ValidWorkerID reports whether id can name a worker's registry entry.
func ValidWorkerID(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// EncodeJobReservation is the data of a job node ingestq reserves for a
// batch's job (a sequential create under /jobs, whose children are written
// after it): "<bid> <mark>", the batch it is for and a mark of the one
// request that reserved it. A node so made says whose it is from its first
// moment, so that one left unwritten (its writer stopped between the two)
// is found and removed by the batch's next batcher. Merritt's queue library
// creates a job node with no data and never reads it.
func EncodeJobReservation(bid, mark string) []byte { return []byte(bid + " " + mark) }

// JobReservationBatch is the batch a job node's data reserves it for ("" and
// false when the data is not a reservation: a Merritt job node holds none).
func JobReservationBatch(data []byte) (string, bool) {
	bid, _, ok := strings.Cut(string(data), " ")
	if !ok || !ValidBatchID(bid) {
		return "", false
	}
	return bid, true
}
