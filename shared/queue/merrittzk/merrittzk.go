// Package merrittzk plays Merritt's side of the queue in tests: it writes
// and reads the queue's nodes the way Merritt's queue library (mrt-zk,
// Java and Ruby) and Merritt's ingest service do, so that a test can put
// into ZooKeeper exactly what those programs put there and read back what
// ingestq wrote the way they read it. The node names, JSON keys, value
// types and write order are those of docs/queue-contract.md ("The peer
// library's keys"); the peer's moves are not atomic, as the library's are
// not.
//
// It talks to ZooKeeper directly, not through package queue, so that what
// it writes owes nothing to ingestq's codec.
package merrittzk

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// Peer is one connection of a Merritt program to the queue under root (the
// prefix a chroot would hide from it).
type Peer struct {
	conn *zk.Conn
	root string
}

// Connect opens a peer session on servers, closed when the test ends.
func Connect(t testing.TB, servers []string, root string) *Peer {
	t.Helper()
	conn, events, err := zk.Connect(servers, 4*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	deadline := time.After(30 * time.Second)
	for conn.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-deadline:
			t.Fatalf("merrittzk: no session with %v", servers)
		}
	}
	if root == "/" {
		root = ""
	}
	return &Peer{conn: conn, root: root}
}

// InitNodes creates the queue's folders as the library's initNodes and
// initLocks do, each only when missing: /batches, /batch-uuids, /jobs,
// /jobs/states with a folder per job state, and the lock folders; and
// first the root itself, which a chroot assumes.
func (p *Peer) InitNodes() error {
	for i := 1; p.root != "" && i <= len(p.root); i++ {
		if i < len(p.root) && p.root[i] != '/' {
			continue
		}
		if _, err := p.conn.Create(p.root[:i], nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("merrittzk: create %s: %w", p.root[:i], err)
		}
	}
	folders := []string{"/batches", "/batch-uuids", "/jobs", "/jobs/states", "/locks", "/locks/queue", "/locks/localid",
		"/locks/storage", "/locks/inventory", "/locks/collections"}
	for _, s := range []string{"pending", "held", "estimating", "provisioning", "downloading", "processing", "storing",
		"recording", "notify", "failed", "deleted", "completed"} {
		folders = append(folders, "/jobs/states/"+s)
	}
	for _, f := range folders {
		if err := p.createIfMissing(f); err != nil {
			return err
		}
	}
	return nil
}

// Close ends the peer's session: its ephemeral locks go with it.
func (p *Peer) Close() { p.conn.Close() }

func (p *Peer) abs(rel string) string { return p.root + rel }

var acl = zk.WorldACL(zk.PermAll)

// Now is the library's last_modified: "yyyy-MM-dd HH:mm:ss Z".
func Now() string { return time.Now().Format("2006-01-02 15:04:05 -0700") }

func (p *Peer) create(rel string, data []byte, flags int32) (string, error) {
	got, err := p.conn.Create(p.abs(rel), data, flags, acl)
	if err != nil {
		return "", fmt.Errorf("merrittzk: create %s: %w", rel, err)
	}
	return strings.TrimPrefix(got, p.root), nil
}

// createIfMissing creates rel (and its missing parents) as an empty
// persistent node, as the Ruby library does for state folders.
func (p *Peer) createIfMissing(rel string) error {
	if rel == "/" || rel == "" {
		return nil
	}
	ok, _, err := p.conn.Exists(p.abs(rel))
	if err != nil || ok {
		return err
	}
	if err := p.createIfMissing(path.Dir(rel)); err != nil {
		return err
	}
	if _, err := p.conn.Create(p.abs(rel), nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("merrittzk: create %s: %w", rel, err)
	}
	return nil
}

func (p *Peer) get(rel string) ([]byte, error) {
	data, _, err := p.conn.Get(p.abs(rel))
	if err != nil {
		return nil, fmt.Errorf("merrittzk: get %s: %w", rel, err)
	}
	return data, nil
}

func (p *Peer) set(rel string, data []byte) error {
	if _, err := p.conn.Set(p.abs(rel), data, -1); err != nil {
		return fmt.Errorf("merrittzk: set %s: %w", rel, err)
	}
	return nil
}

func (p *Peer) createOrSet(rel string, data []byte) error {
	ok, _, err := p.conn.Exists(p.abs(rel))
	if err != nil {
		return err
	}
	if ok {
		return p.set(rel, data)
	}
	_, err = p.create(rel, data, 0)
	return err
}

func (p *Peer) remove(rel string) error {
	err := p.conn.Delete(p.abs(rel), -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("merrittzk: delete %s: %w", rel, err)
	}
	return nil
}

func (p *Peer) removeAll(rel string) error {
	children, _, err := p.conn.Children(p.abs(rel))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := p.removeAll(rel + "/" + c); err != nil {
			return err
		}
	}
	return p.remove(rel)
}

// Exists reports whether the node rel (below the root) exists.
func (p *Peer) Exists(rel string) (bool, error) {
	ok, _, err := p.conn.Exists(p.abs(rel))
	return ok, err
}

// Get reads the node rel (below the root).
func (p *Peer) Get(rel string) ([]byte, error) { return p.get(rel) }

// Children lists the children of rel (below the root), sorted; none when
// rel does not exist.
func (p *Peer) Children(rel string) ([]string, error) {
	names, _, err := p.conn.Children(p.abs(rel))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	slices.Sort(names)
	return names, err
}

// Set overwrites the node rel (below the root), as a peer's setData does.
func (p *Peer) Set(rel string, data []byte) error { return p.set(rel, data) }

// encode is the JSON a peer writes for an object (key order is the
// peer's own business: org.json keeps none).
func encode(obj map[string]any) []byte {
	if len(obj) == 0 {
		return nil // the library writes an empty object as an empty node
	}
	data, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("merrittzk: %v", err))
	}
	return data
}

// decode reads a node's JSON object; an empty node is an empty object.
func decode(rel string, data []byte) (map[string]any, error) {
	obj := map[string]any{}
	if len(data) == 0 {
		return obj, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("merrittzk: %s is not a JSON object: %w", rel, err)
	}
	return obj, nil
}

// String reads key of obj as the library's getters do: absent reads as
// "", and a value that is not a JSON string is an error (org.json's
// getString throws), which is what a Merritt consumer meets.
func String(obj map[string]any, key string) (string, error) {
	v, ok := obj[key]
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("merrittzk: JSONObject[%q] is not a string: %v (%T)", key, v, v)
	}
	return s, nil
}

// Int reads key of obj as the library's getInt does: a JSON number or a
// string holding one.
func Int(obj map[string]any, key string) (int, error) {
	switch v := obj[key].(type) {
	case json.Number:
		n, err := strconv.Atoi(v.String())
		return n, err
	case string:
		return strconv.Atoi(v)
	default:
		return 0, fmt.Errorf("merrittzk: JSONObject[%q] is not a number: %v", key, v)
	}
}

// --- batches ---

// Batch is a batch as a peer holds it.
type Batch struct {
	p          *Peer
	ID         string
	Submission map[string]any
	Status     string
}

func (b *Batch) path() string { return "/batches/" + b.ID }

// CreateBatch writes a new Pending batch as the library's createBatch
// does: a sequential /batches/bid, the /batch-uuids/<batchID> entry when
// the submission has a batchID, the submission, then the status.
func (p *Peer) CreateBatch(submission map[string]any) (*Batch, error) {
	created, err := p.create("/batches/bid", nil, zk.FlagSequence)
	if err != nil {
		return nil, err
	}
	b := &Batch{p: p, ID: path.Base(created), Submission: submission}
	if uuid, _ := String(submission, "batchID"); uuid != "" {
		if _, err := p.create("/batch-uuids/"+uuid, []byte(b.ID), 0); err != nil {
			return nil, err
		}
	}
	if _, err := p.create(b.path()+"/submission", encode(submission), 0); err != nil {
		return nil, err
	}
	return b, b.setStatus("Pending", "", true)
}

// setStatus rewrites the batch's status as the library does: the old
// object with status and last_modified replaced and message set.
func (b *Batch) setStatus(status, message string, create bool) error {
	obj := map[string]any{}
	if !create {
		data, err := b.p.get(b.path() + "/status")
		if err != nil {
			return err
		}
		if obj, err = decode(b.path()+"/status", data); err != nil {
			return err
		}
	}
	obj["status"] = status
	obj["last_modified"] = Now()
	obj["message"] = message
	b.Status = status
	if create {
		_, err := b.p.create(b.path()+"/status", encode(obj), 0)
		return err
	}
	return b.p.set(b.path()+"/status", encode(obj))
}

// SetStatus moves the batch as a peer's batch consumer does.
func (b *Batch) SetStatus(status, message string) error { return b.setStatus(status, message, false) }

// LoadBatch reads a batch as the library's load does: its status and its
// submission.
func (p *Peer) LoadBatch(bid string) (*Batch, error) {
	b := &Batch{p: p, ID: bid}
	data, err := p.get(b.path() + "/status")
	if err != nil {
		return nil, err
	}
	st, err := decode(b.path()+"/status", data)
	if err != nil {
		return nil, err
	}
	if b.Status, err = String(st, "status"); err != nil {
		return nil, err
	}
	if ok, _ := p.Exists(b.path() + "/submission"); ok {
		if data, err = p.get(b.path() + "/submission"); err != nil {
			return nil, err
		}
		if b.Submission, err = decode(b.path()+"/submission", data); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// UUID is the library's batchUuid(): the submission's batchID.
func (b *Batch) UUID() (string, error) { return String(b.Submission, "batchID") }

// AcquirePendingBatch takes the oldest batch no consumer has taken (it has
// no states node) as the library does: its lock, then the states node,
// then the status Processing. The lock stays until Unlock.
func (p *Peer) AcquirePendingBatch() (*Batch, error) {
	names, _, err := p.conn.Children(p.abs("/batches"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for _, bid := range names {
		if ok, err := p.Exists("/batches/" + bid + "/states"); err != nil || ok {
			continue
		}
		if _, err := p.create("/batches/"+bid+"/lock", nil, zk.FlagEphemeral); err != nil {
			continue
		}
		b, err := p.LoadBatch(bid)
		if err != nil {
			return nil, err
		}
		if _, err := p.create(b.path()+"/states", nil, 0); err != nil {
			return nil, err
		}
		return b, b.SetStatus("Processing", "")
	}
	return nil, nil
}

// Unlock removes the batch's lock.
func (b *Batch) Unlock() error { return b.p.remove(b.path() + "/lock") }

// FindBatchByUUID reads /batch-uuids/<uuid> ("" when there is none).
func (p *Peer) FindBatchByUUID(uuid string) (string, error) {
	data, _, err := p.conn.Get(p.abs("/batch-uuids/" + uuid))
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	return string(data), err
}

var batchFolders = []string{"batch-processing", "batch-failed", "batch-completed", "batch-deleted"}

// DeleteCompletedBatches removes, as the library's cleanup does, every
// batch that has a batch-processing folder with nothing in it and is
// Completed or Deleted: its jobs, its /batch-uuids entry (found through
// the submission's batchID) and its tree. It returns the bids removed.
func (p *Peer) DeleteCompletedBatches() ([]string, error) {
	names, _, err := p.conn.Children(p.abs("/batches"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []string
	for _, bid := range names {
		live, _, err := p.conn.Children(p.abs("/batches/" + bid + "/states/batch-processing"))
		if err != nil || len(live) > 0 {
			continue
		}
		b, err := p.LoadBatch(bid)
		if err != nil {
			return out, err
		}
		if b.Status != "Completed" && b.Status != "Deleted" {
			continue
		}
		for _, f := range batchFolders {
			jids, _, err := p.conn.Children(p.abs(b.path() + "/states/" + f))
			if err != nil {
				continue
			}
			for _, jid := range jids {
				j, err := p.LoadJob(jid)
				if err != nil {
					return out, err
				}
				if err := j.Delete(); err != nil {
					return out, err
				}
			}
		}
		uuid, err := b.UUID()
		if err != nil {
			return out, err
		}
		if uuid != "" {
			if err := p.remove("/batch-uuids/" + uuid); err != nil {
				return out, err
			}
		}
		if err := p.removeAll(b.path()); err != nil {
			return out, err
		}
		out = append(out, bid)
	}
	return out, nil
}

// --- jobs ---

// JobConfiguration is the library's createJobConfiguration: the five keys
// it writes, nothing else (no working_dir).
func JobConfiguration(profile, submitter, payloadURL, payloadType, responseType string) map[string]any {
	return map[string]any{"profile_name": profile, "submitter": submitter, "payload_url": payloadURL,
		"payload_type": payloadType, "response_type": responseType}
}

// JobIdentifiers is the library's createJobIdentifiers: primary_id (""
// when none) and local_id split at ';'.
func JobIdentifiers(primary, local string) map[string]any {
	ids := []any{}
	for s := range strings.SplitSeq(local, ";") {
		if s != "" {
			ids = append(ids, s)
		}
	}
	return map[string]any{"primary_id": primary, "local_id": ids}
}

// JobMetadata is the library's createJobMetadata.
func JobMetadata(who, what, when, where string) map[string]any {
	return map[string]any{"erc_who": who, "erc_what": what, "erc_when": when, "erc_where": where}
}

// Job is a job as a peer holds it after loading it.
type Job struct {
	p             *Peer
	ID            string
	Bid           string
	Priority      int
	SpaceNeeded   int64
	Status        map[string]any
	Configuration map[string]any
	Identifiers   map[string]any
	Metadata      map[string]any
	Store         map[string]any
	Inventory     map[string]any
	RetryCount    int
	entry, ref    string // where the job's state entry and batch reference are
}

func (j *Job) path() string { return "/jobs/" + j.ID }

// State is the job's status name.
func (j *Job) State() string { s, _ := String(j.Status, "status"); return s }

// CreateJob writes a new Pending job of batch bid as the library's
// createJob does, node after node under the job's own lock: bid,
// priority, space_needed 0, configuration, identifiers and metadata when
// not empty, the status, its state entry and its batch reference.
func (p *Peer) CreateJob(bid string, priority int, configuration, identifiers, metadata map[string]any) (*Job, error) {
	c, err := p.BeginJob(bid, priority, configuration, identifiers, metadata, true)
	if err != nil {
		return nil, err
	}
	for {
		done, err := c.Step()
		if err != nil || done {
			return c.Job, err
		}
	}
}

// JobCreation is a job being written as the library's createJob writes
// it: its node first, with no data (as createId makes it), then one node
// at each Step. A test stops between steps to leave what a producer that
// died there leaves, or to look at a creation under way.
type JobCreation struct {
	Job   *Job
	steps []func() error
}

// BeginJob creates the node of a new Pending job of batch bid and, when
// locked, its lock, which the Java library holds through the creation (the
// Ruby library takes none). Step writes the rest.
func (p *Peer) BeginJob(bid string, priority int, configuration, identifiers, metadata map[string]any, locked bool) (*JobCreation, error) {
	created, err := p.create("/jobs/jid", nil, zk.FlagSequence)
	if err != nil {
		return nil, err
	}
	j := &Job{p: p, ID: path.Base(created), Bid: bid, Priority: priority, Configuration: configuration,
		Identifiers: identifiers, Metadata: metadata}
	if locked {
		if _, err := p.create(j.path()+"/lock", nil, zk.FlagEphemeral); err != nil {
			return nil, err
		}
	}
	c := &JobCreation{Job: j}
	write := func(name string, data []byte) func() error {
		return func() error {
			_, err := p.create(j.path()+"/"+name, data, 0)
			return err
		}
	}
	c.steps = append(c.steps, write("bid", []byte(bid)), write("priority", []byte(strconv.Itoa(priority))),
		write("space_needed", []byte("0")), write("configuration", encode(configuration)))
	if len(identifiers) > 0 {
		c.steps = append(c.steps, write("identifiers", encode(identifiers)))
	}
	if len(metadata) > 0 {
		c.steps = append(c.steps, write("metadata", encode(metadata)))
	}
	c.steps = append(c.steps, func() error { return j.SetStatus("Pending", "") })
	if locked {
		c.steps = append(c.steps, j.Unlock)
	}
	return c, nil
}

// Step writes the job's next node (bid, priority, space_needed,
// configuration, identifiers and metadata when not empty, then its status
// with its state entry and batch reference, then the lock removed) and
// reports whether the job is whole.
func (c *JobCreation) Step() (done bool, err error) {
	if len(c.steps) == 0 {
		return true, nil
	}
	if err := c.steps[0](); err != nil {
		return false, err
	}
	c.steps = c.steps[1:]
	return len(c.steps) == 0, nil
}

// LoadJob reads a job as the library's load does, with its types: the
// status must be JSON with a status and a retry_count that getInt reads,
// bid must exist, priority and space_needed must be decimal text (Java's
// parseInt and parseLong: no spaces, no sign but '-'), and configuration,
// identifiers, metadata, inventory and store, when present, JSON objects.
// An error here is one a Merritt consumer would throw.
func (p *Peer) LoadJob(jid string) (*Job, error) {
	j := &Job{p: p, ID: jid}
	data, err := p.get(j.path() + "/status")
	if err != nil {
		return nil, err
	}
	if j.Status, err = decode(j.path()+"/status", data); err != nil {
		return nil, err
	}
	if _, err := String(j.Status, "status"); err != nil {
		return nil, err
	}
	if j.RetryCount, err = Int(j.Status, "retry_count"); err != nil {
		return nil, err
	}
	bid, err := p.get(j.path() + "/bid")
	if err != nil {
		return nil, err
	}
	j.Bid = string(bid)
	prio, err := p.get(j.path() + "/priority")
	if err != nil {
		return nil, err
	}
	if j.Priority, err = strconv.Atoi(string(prio)); err != nil {
		return nil, fmt.Errorf("merrittzk: %s/priority: %w", j.path(), err)
	}
	space, err := p.get(j.path() + "/space_needed")
	if err != nil {
		return nil, err
	}
	if j.SpaceNeeded, err = strconv.ParseInt(string(space), 10, 64); err != nil {
		return nil, fmt.Errorf("merrittzk: %s/space_needed: %w", j.path(), err)
	}
	for _, n := range []struct {
		name string
		into *map[string]any
	}{{"configuration", &j.Configuration}, {"identifiers", &j.Identifiers}, {"metadata", &j.Metadata},
		{"inventory", &j.Inventory}, {"store", &j.Store}} {
		*n.into = map[string]any{}
		data, _, err := p.conn.Get(p.abs(j.path() + "/" + n.name))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if *n.into, err = decode(j.path()+"/"+n.name, data); err != nil {
			return nil, err
		}
	}
	j.entry = fmt.Sprintf("/jobs/states/%s/%02d-%s", strings.ToLower(j.State()), j.Priority, j.ID)
	j.ref = fmt.Sprintf("/batches/%s/states/%s/%s", j.Bid, batchFolder(j.State()), j.ID)
	return j, nil
}

// StoreDelete is the library's storeDelete(): the store's "delete", which
// must be a string.
func (j *Job) StoreDelete() (string, error) { return String(j.Store, "delete") }

// JobID is the library's jid(): the configuration's "jobID".
func (j *Job) JobID() (string, error) { return String(j.Configuration, "jobID") }

func batchFolder(state string) string {
	switch state {
	case "Failed":
		return "batch-failed"
	case "Completed":
		return "batch-completed"
	case "Deleted":
		return "batch-deleted"
	}
	return "batch-processing"
}

// listState lists a state folder's entries in the order the library takes
// them ("05-jid…", sorted as text).
func (p *Peer) listState(state string) ([]string, error) {
	names, _, err := p.conn.Children(p.abs("/jobs/states/" + strings.ToLower(state)))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	slices.Sort(names)
	return names, err
}

// lockEntry locks and loads the job of one state-folder entry as the
// library's acquireJob does for each entry it lists: nil when another
// consumer holds the job. Like acquireJob it does not look at whether
// the job is still in the state the entry was listed under.
func (p *Peer) lockEntry(entry string) (*Job, error) {
	jid := entry[strings.IndexByte(entry, '-')+1:]
	if _, err := p.create("/jobs/"+jid+"/lock", nil, zk.FlagEphemeral); err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			return nil, nil
		}
		return nil, err
	}
	return p.LoadJob(jid)
}

// AcquireJob is the library's acquireJob: the first job of the state
// folder it can lock, loaded, whatever state it is in by then.
func (p *Peer) AcquireJob(state string) (*Job, error) {
	entries, err := p.listState(state)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		j, err := p.lockEntry(e)
		if err != nil || j != nil {
			return j, err
		}
	}
	return nil, nil
}

// Unlock removes the job's lock.
func (j *Job) Unlock() error { return j.p.remove(j.path() + "/lock") }

// SetStatus moves the job as the library does, one write after another:
// the status (the old object with status, last_modified, message,
// last_successful_status and retry_count updated), then its state entry,
// then its batch reference.
func (j *Job) SetStatus(status, message string) error {
	old := j.State()
	obj := map[string]any{}
	for k, v := range j.Status {
		obj[k] = v
	}
	obj["status"] = status
	obj["last_modified"] = Now()
	if _, ok := obj["last_successful_status"]; !ok {
		obj["last_successful_status"] = nil
	}
	if old != "" && old != status && status != "Failed" && status != "Deleted" && old != "Failed" && old != "Deleted" {
		obj["last_successful_status"] = old
	}
	obj["retry_count"] = j.RetryCount
	obj["message"] = message
	var err error
	if old == "" {
		_, err = j.p.create(j.path()+"/status", encode(obj), 0)
	} else {
		err = j.p.set(j.path()+"/status", encode(obj))
	}
	if err != nil {
		return err
	}
	j.Status = obj
	entry := fmt.Sprintf("/jobs/states/%s/%02d-%s", strings.ToLower(status), j.Priority, j.ID)
	if entry != j.entry {
		if j.entry != "" {
			if err := j.p.remove(j.entry); err != nil {
				return err
			}
		}
		if err := j.p.createIfMissing(path.Dir(entry)); err != nil {
			return err
		}
		if _, err := j.p.create(entry, nil, 0); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		j.entry = entry
	}
	ref := fmt.Sprintf("/batches/%s/states/%s/%s", j.Bid, batchFolder(status), j.ID)
	if ref != j.ref {
		if j.ref != "" {
			if err := j.p.remove(j.ref); err != nil {
				return err
			}
		}
		if err := j.p.createIfMissing(ref); err != nil {
			return err
		}
		j.ref = ref
	}
	return nil
}

// SetStore writes the store node as the library's setStore does: the
// store object read with the job, its three keys set (delete a string).
func (j *Job) SetStore(manifestURL, mode, deleteFlag string) error {
	if j.Store == nil {
		j.Store = map[string]any{}
	}
	j.Store["manifest_url"] = manifestURL
	j.Store["mode"] = mode
	j.Store["delete"] = deleteFlag
	return j.p.createOrSet(j.path()+"/store", encode(j.Store))
}

// SetInventory writes the inventory node as the library's setInventory
// does: the inventory object read with the job, its two keys set.
func (j *Job) SetInventory(manifestURL, mode string) error {
	if j.Inventory == nil {
		j.Inventory = map[string]any{}
	}
	j.Inventory["manifest_url"] = manifestURL
	j.Inventory["mode"] = mode
	return j.p.createOrSet(j.path()+"/inventory", encode(j.Inventory))
}

// successor is the library's success() of each job state.
var successor = map[string]string{"Pending": "Estimating", "Estimating": "Provisioning", "Provisioning": "Downloading",
	"Downloading": "Processing", "Processing": "Storing", "Storing": "Recording", "Recording": "Notify", "Notify": "Completed"}

// Success is the state the library's status().success() moves the job to
// ("" from a state it has none for).
func (j *Job) Success() string { return successor[j.State()] }

// Delete removes the job as the library does: its state entry, its batch
// reference, then its tree.
func (j *Job) Delete() error {
	if err := j.p.remove(j.entry); err != nil {
		return err
	}
	if err := j.p.remove(j.ref); err != nil {
		return err
	}
	return j.p.removeAll(j.path())
}

// --- locks ---

// LockName is how the library turns an id into a lock's node name: each
// '/', with the ':' before it if there is one, becomes '_'
// ("ark:/99999/fk4x" → "ark_99999_fk4x"; other ':' stay).
func LockName(id string) string { return strings.NewReplacer(":/", "_", "/", "_").Replace(id) }

// Locks are the locks under /locks as the library takes them.
type Locks struct{ p *Peer }

// Locks takes and releases the locks under /locks as the library does.
func (p *Peer) Locks() *Locks { return &Locks{p: p} }

// LocalID takes /locks/localid/<name> as the library's
// lockObjectLocalID does: an ephemeral, empty node. Merritt's ingest
// service names the lock "<local id>_<owner>". It reports false when the
// lock is held.
func (l *Locks) LocalID(name string) (bool, error) {
	p := l.p
	if err := p.createIfMissing("/locks/localid"); err != nil {
		return false, err
	}
	_, err := p.create("/locks/localid/"+LockName(name), nil, zk.FlagEphemeral)
	if errors.Is(err, zk.ErrNodeExists) {
		return false, nil
	}
	return err == nil, err
}

// UnlockLocalID releases a local id lock.
func (l *Locks) UnlockLocalID(name string) error {
	return l.p.remove("/locks/localid/" + LockName(name))
}

// IngestQueue holds the ingest queue as the library's lockIngestQueue
// does: the persistent node /locks/queue/ingest. False: it is held.
func (l *Locks) IngestQueue() (bool, error) {
	p := l.p
	if err := p.createIfMissing("/locks/queue"); err != nil {
		return false, err
	}
	_, err := p.create("/locks/queue/ingest", nil, 0)
	if errors.Is(err, zk.ErrNodeExists) {
		return false, nil
	}
	return err == nil, err
}

// IngestQueueHeld is the library's checkLockIngestQueue.
func (l *Locks) IngestQueueHeld() (bool, error) { return l.p.Exists("/locks/queue/ingest") }

// Storage takes /locks/storage/<ark> as the Java library's
// lockObjectStorage does: a persistent, empty node, there until
// UnlockStorage (the Ruby library's is ephemeral). False: it is held.
func (l *Locks) Storage(ark string) (bool, error) {
	return l.take("/locks/storage", ark, 0)
}

// UnlockStorage releases a storage lock.
func (l *Locks) UnlockStorage(ark string) error { return l.p.remove("/locks/storage/" + LockName(ark)) }

// Inventory takes /locks/inventory/<ark> as the library's
// lockObjectInventory does: an ephemeral, empty node. False: it is held.
func (l *Locks) Inventory(ark string) (bool, error) {
	return l.take("/locks/inventory", ark, zk.FlagEphemeral)
}

// UnlockInventory releases an inventory lock.
func (l *Locks) UnlockInventory(ark string) error {
	return l.p.remove("/locks/inventory/" + LockName(ark))
}

func (l *Locks) take(folder, id string, flags int32) (bool, error) {
	if err := l.p.createIfMissing(folder); err != nil {
		return false, err
	}
	_, err := l.p.create(folder+"/"+LockName(id), nil, flags)
	if errors.Is(err, zk.ErrNodeExists) {
		return false, nil
	}
	return err == nil, err
}

// UnlockIngestQueue releases the ingest queue.
func (l *Locks) UnlockIngestQueue() error { return l.p.remove("/locks/queue/ingest") }
