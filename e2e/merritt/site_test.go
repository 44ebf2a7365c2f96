package merritt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ingestq/ingestq/shared/queue/merrittzk"
)

// A Merritt site's programs as they use the queue, through merrittzk, each
// doing what its source (docs/merritt.md names them) does of the queue:
//   - storeConsumer: the storage service's StoreConsumer, the consumer of
//     Storing;
//   - inventoryConsumer: the inventory service's ProcessJob, the consumer
//     of Recording;
//   - ingest: the ingest service's batch and job consumers (Pending to
//     Processing, Notify) and its batch reporting, reduced to what they
//     put in the queue: at Processing its queue folder holds the version's
//     files and their add manifest, served over HTTP, and the job's store
//     and inventory nodes name them.

// javaEncode is Java's URLEncoder, which Merritt's programs spell an id
// in a URL with.
func javaEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// counter counts what a program did to each job.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(jid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[jid]++
}

func (c *counter) get(jid string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[jid]
}

// run calls step until ctx ends, pausing when it found nothing to do,
// and returns a function that stops it and waits.
func run(t *testing.T, name string, step func(context.Context) (bool, error)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			did, err := step(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
			if !did {
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// storeConsumer is Merritt's storage service's consumer of Storing
// (CDLUC3/mrt-store StoreConsumer): while the ingest queue is not held it
// acquires a Storing job, leaves it if its status says another state,
// reads the store node (manifest_url; mode split at "/" into the action,
// the node and the object id, decoded; delete), takes the object's storage
// lock (waiting while it is held), calls the service's add or update for
// the node and object with the manifest URL (and the delete list), and
// moves the job on with the library's success() when the answer gives the
// stored size, or fails it. It calls the service's HTTP interface with the
// form Merritt's ingest service uses, where the real consumer calls the
// service in its own process.
type storeConsumer struct {
	peer      *merrittzk.Peer
	storage   string // the storage service's base URL
	lockRetry time.Duration
	stored    counter
}

func (c *storeConsumer) step(ctx context.Context) (bool, error) {
	if held, err := c.peer.Locks().IngestQueueHeld(); err != nil || held {
		return false, err
	}
	job, err := c.peer.AcquireJob("Storing")
	if err != nil || job == nil {
		return false, err
	}
	defer job.Unlock()
	if job.State() != "Storing" {
		return false, nil
	}
	manifestURL, err1 := merrittzk.String(job.Store, "manifest_url")
	mode, err2 := merrittzk.String(job.Store, "mode")
	del, err3 := merrittzk.String(job.Store, "delete")
	parts := strings.Split(mode, "/")
	var node int
	var object string
	err4 := errors.New("mode has no node and object")
	if len(parts) >= 3 {
		node, err4 = strconv.Atoi(parts[1])
		if err4 == nil {
			object, err4 = url.QueryUnescape(parts[2])
		}
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return true, job.SetStatus("Failed", " [error] Store Job data could not be processed "+job.ID)
	}
	for {
		ok, err := c.peer.Locks().Storage(object)
		if err != nil {
			return true, err
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-time.After(c.lockRetry):
		}
	}
	defer c.peer.Locks().UnlockStorage(object)
	form := url.Values{"url": {manifestURL}, "t": {"json"}}
	switch parts[0] {
	case "update":
		form.Set("delete", del)
	case "add":
	default:
		return true, job.SetStatus("Failed", "StoreConsumeData [error] Action not supported")
	}
	resp, err := http.PostForm(c.storage+"/"+parts[0]+"/"+strconv.Itoa(node)+"/"+javaEncode(object), form)
	if err != nil {
		return true, job.SetStatus("Failed", "StoreConsumeData [error] Store action failed: "+err.Error())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return true, job.SetStatus("Failed", fmt.Sprintf("StoreConsumeData [error] Store action failed: HTTP %d %s", resp.StatusCode, body))
	}
	var answer map[string]map[string]any
	if json.Unmarshal(body, &answer) != nil || answer["ver:versionState"]["ver:totalActualSize"] == nil {
		return true, job.SetStatus("Failed", "")
	}
	c.stored.add(job.ID)
	return true, job.SetStatus(job.Success(), "Success")
}

// objectInfo is what Merritt's inventory service reads of the storage
// service's manifest of an object.
type objectInfo struct {
	Object struct {
		ID      string `xml:"id,attr"`
		Current int    `xml:"current"`
	} `xml:"object"`
	Versions []struct {
		ID    int `xml:"id,attr"`
		Files []struct {
			ID     string `xml:"id,attr"`
			Digest string `xml:"digest"`
		} `xml:"manifest>file"`
	} `xml:"versions>version"`
}

// inventoryConsumer is Merritt's inventory service's consumer of Recording
// (CDLUC3/mrt-inventory ProcessJob): it acquires a Recording job (without
// looking at its status), reads inventory.manifest_url, takes the ARK from
// the URL path's last segment, decoded, and the inventory lock on it, reads
// the storage base, node and object from the segments around "manifest",
// fetches the object's manifest from <storage base>/manifest/<node>/<object>
// and records its versions, then moves the job on with success(), or fails
// it.
type inventoryConsumer struct {
	peer     *merrittzk.Peer
	recorded counter
	mu       sync.Mutex
	objects  map[string]objectInfo // ARK -> its manifest, as last recorded
}

func (c *inventoryConsumer) step(ctx context.Context) (bool, error) {
	job, err := c.peer.AcquireJob("Recording")
	if err != nil || job == nil {
		return false, err
	}
	defer job.Unlock()
	info, ark, err := c.record(job)
	if err != nil {
		return true, job.SetStatus("Failed", err.Error())
	}
	defer c.peer.Locks().UnlockInventory(ark)
	c.mu.Lock()
	c.objects[ark] = info
	c.mu.Unlock()
	c.recorded.add(job.ID)
	return true, job.SetStatus(job.Success(), "")
}

func (c *inventoryConsumer) record(job *merrittzk.Job) (objectInfo, string, error) {
	manifestURL, err := merrittzk.String(job.Inventory, "manifest_url")
	if err != nil || manifestURL == "" {
		return objectInfo{}, "", fmt.Errorf("ProcessJob: manifestURL null")
	}
	u, err := url.Parse(manifestURL)
	if err != nil {
		return objectInfo{}, "", err
	}
	path := u.EscapedPath()
	ark, err := url.QueryUnescape(path[strings.LastIndexByte(path, '/')+1:])
	if err != nil {
		return objectInfo{}, "", err
	}
	if ok, err := c.peer.Locks().Inventory(ark); err != nil || !ok {
		return objectInfo{}, "", fmt.Errorf("inventory lock of %s: held %v, %v", ark, !ok, err)
	}
	segs := strings.Split(path, "/")
	base, node, object := u.Scheme+"://"+u.Host, 0, ""
	for i, s := range segs {
		if s == "manifest" && i+2 < len(segs) {
			node, _ = strconv.Atoi(segs[i+1])
			object, _ = url.QueryUnescape(segs[i+2])
			break
		}
		if s != "" {
			base += "/" + s
		}
	}
	if node < 1 || object == "" {
		c.peer.Locks().UnlockInventory(ark)
		return objectInfo{}, "", fmt.Errorf("processItem - URL format invalid:%s", manifestURL)
	}
	resp, err := http.Get(base + "/manifest/" + strconv.Itoa(node) + "/" + javaEncode(object))
	if err != nil {
		c.peer.Locks().UnlockInventory(ark)
		return objectInfo{}, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.peer.Locks().UnlockInventory(ark)
		return objectInfo{}, "", fmt.Errorf("manifest of %s: HTTP %d", object, resp.StatusCode)
	}
	// The service declares XML 1.1, which Java's parser takes and Go's
	// does not; the document is 1.0 otherwise.
	body = bytes.Replace(body, []byte(`<?xml version="1.1"?>`), []byte(`<?xml version="1.0"?>`), 1)
	var info objectInfo
	if err := xml.Unmarshal(body, &info); err != nil || info.Object.ID != object || info.Object.Current < 1 {
		c.peer.Locks().UnlockInventory(ark)
		return objectInfo{}, "", fmt.Errorf("manifest of %s: %v (object %q, current %d)", object, err, info.Object.ID, info.Object.Current)
	}
	return info, ark, nil
}

// ingest is Merritt's ingest service reduced to what it puts in the queue.
type ingest struct {
	peer     *merrittzk.Peer
	queueDir string // its queue folder
	queueURL string // where the storage service fetches from it
	storage  string
	node     int
	notified counter
}

// batch makes a batch of n jobs as Merritt's ingest service does: the
// submission, the batch acquired, each job with its configuration (the
// ingest service's keys, no payload_url), identifiers and metadata.
func (in *ingest) batch(t *testing.T, uuid string, n int) (bid string, jids []string) {
	t.Helper()
	if _, err := in.peer.CreateBatch(map[string]any{"batchID": uuid, "profile": "demo", "type": "file", "filename": "notes.txt",
		"update": false, "submitter": "merritt/depositor"}); err != nil {
		t.Fatal(err)
	}
	b, err := in.peer.AcquirePendingBatch()
	if err != nil || b == nil {
		t.Fatalf("acquiring the batch: %v", err)
	}
	for i := range n {
		conf := map[string]any{"batchID": uuid, "profile": "demo", "type": "file", "filename": "notes.txt", "update": false,
			"submitter": "merritt/depositor", "jobID": fmt.Sprintf("%s-%d", uuid, i)}
		j, err := in.peer.CreateJob(b.ID, 5, conf, merrittzk.JobIdentifiers("", ""), merrittzk.JobMetadata("Merritt", "object "+strconv.Itoa(i), "2026", ""))
		if err != nil {
			t.Fatal(err)
		}
		jids = append(jids, j.ID)
	}
	if err := b.Unlock(); err != nil {
		t.Fatal(err)
	}
	return b.ID, jids
}

// processed is what the ingest service's Process step leaves: the ARK in
// the identifiers, the version's files and add manifest in its queue
// folder, the inventory node naming the object's manifest on the node, the
// store node naming the add manifest, then Storing.
func (in *ingest) process(j *merrittzk.Job) error {
	ark := "ark:/99999/fk4m" + strings.TrimPrefix(j.ID, "jid")
	uuid, _ := merrittzk.String(j.Configuration, "batchID")
	rel := uuid + "/" + j.ID
	files := map[string]string{
		"producer/notes.txt":    "notes of " + j.ID + "\n",
		"system/mrt-ingest.txt": "ingest: ingest\nbatch: " + j.Bid + "\njob: " + j.ID + "\nprofile: demo\n",
	}
	var manifest strings.Builder
	manifest.WriteString("#%checkm_0.7\n#%profile | http://uc3.cdlib.org/registry/store/manifest/mrt-add-manifest\n" +
		"#%prefix | nfo:<http://www.semanticdesktop.org/ontologies/2007/03/22/nfo#>\n" +
		"#%prefix | nie:<http://www.semanticdesktop.org/ontologies/2007/01/19/nie/#>\n" +
		"#%prefix | mrt:<http://uc3.cdlib.org/ontology/mrt/mom#>\n" +
		"#%columns | nfo:fileURL | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | nie:mimeType\n")
	for _, name := range []string{"producer/notes.txt", "system/mrt-ingest.txt"} {
		p := filepath.Join(in.queueDir, filepath.FromSlash(rel+"/"+name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(files[name]))
		fmt.Fprintf(&manifest, "%s/%s/%s | sha256 | %s | %d | | %s | text/plain\n", in.queueURL, rel, name, hex.EncodeToString(sum[:]), len(files[name]), name)
	}
	manifest.WriteString("#%eof\n")
	if err := os.WriteFile(filepath.Join(in.queueDir, filepath.FromSlash(rel), "mrt-manifest.txt"), []byte(manifest.String()), 0o644); err != nil {
		return err
	}
	ids := merrittzk.JobIdentifiers(ark, "")
	data, _ := json.Marshal(ids)
	if err := in.peer.Set("/jobs/"+j.ID+"/identifiers", data); err != nil {
		return err
	}
	if err := j.SetInventory(in.storage+"/manifest/"+strconv.Itoa(in.node)+"/"+javaEncode(ark), ""); err != nil {
		return err
	}
	if err := j.SetStore(in.queueURL+"/"+rel+"/mrt-manifest.txt", "add/"+strconv.Itoa(in.node)+"/"+javaEncode(ark), ""); err != nil {
		return err
	}
	return j.SetStatus("Storing", "")
}

// jobStep is one of the ingest service's job consumers: it acquires a job
// of its states, checks the status it loaded, and does its step.
func (in *ingest) jobStep(ctx context.Context) (bool, error) {
	for _, state := range ingestStates {
		if did, err := in.stepIn(state); did || err != nil {
			return did, err
		}
	}
	return false, nil
}

// ingestStates are the job states the ingest service's consumers take.
var ingestStates = []string{"Pending", "Estimating", "Provisioning", "Downloading", "Processing", "Notify"}

// stepIn is the consumer of one state.
func (in *ingest) stepIn(state string) (bool, error) {
	j, err := in.peer.AcquireJob(state)
	if err != nil || j == nil {
		return false, err
	}
	defer j.Unlock()
	if j.State() != state {
		return false, nil
	}
	return true, in.advance(j)
}

// advance does a job's step in the ingest service's own states.
func (in *ingest) advance(j *merrittzk.Job) error {
	switch j.State() {
	case "Processing":
		return in.process(j)
	case "Notify":
		in.notified.add(j.ID)
		return j.SetStatus("Completed", "")
	}
	return j.SetStatus(j.Success(), "")
}

// reportStep is the ingest service's batch reporting: a Processing batch
// with no live job is reported, then Completed (or Failed).
func (in *ingest) reportStep(ctx context.Context) (bool, error) {
	bids, err := in.peer.Children("/batches")
	if err != nil {
		return false, err
	}
	for _, bid := range bids {
		b, err := in.peer.LoadBatch(bid)
		if err != nil || b.Status != "Processing" {
			continue
		}
		if live, err := in.peer.Children("/batches/" + bid + "/states/batch-processing"); err != nil || len(live) > 0 {
			continue
		}
		failed, _ := in.peer.Children("/batches/" + bid + "/states/batch-failed")
		if err := b.SetStatus("Reporting", ""); err != nil {
			return true, err
		}
		end := "Completed"
		if len(failed) > 0 {
			end = "Failed"
		}
		return true, b.SetStatus(end, "")
	}
	return false, nil
}
