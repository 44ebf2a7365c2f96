// Package traffic is the robustness suite's load: deposits of every
// payload type and size class submitted through BatchService, batches
// written as Merritt's queue library writes them, an operator's actions
// (requeue, hold and release, bulk requeue, delete) through AdminService,
// and an external inventory recording through RecordingService, all at
// once. It keeps what it asked for, for the checker to hold the queue to.
package traffic

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
)

// Profile is the collection profile every deposit is made under; its
// callback goes to the depositor's server.
const (
	Profile    = "robust"
	Collection = "robust"
)

// ProfileYAML is the profile's file, its callback to callbackURL.
func ProfileYAML(callbackURL string) string {
	return fmt.Sprintf("name: %s\ncollection: %s\nowner: ark:/99999/fk4owner\nnotification_addresses: [depositor@example.org]\ncallback_url: %s\n",
		Profile, Collection, callbackURL)
}

// Size classes of the deposited files.
var sizeClasses = []struct {
	name string
	size int
}{{"small", 1 << 10}, {"medium", 64 << 10}, {"large", 1 << 20}}

// Object is one deposited object: what must be stored for it.
type Object struct {
	LocalID string            // "" for a single-object batch, whose jobs have none
	Files   map[string]string // sha256 → file name, of every file the object stores
	Sizes   map[string]int64  // file name → size
}

// add records a file of the object.
func (o *Object) add(name string, body []byte) {
	if o.Files == nil {
		o.Files, o.Sizes = map[string]string{}, map[string]int64{}
	}
	o.Files[digest(body)] = name
	o.Sizes[name] = int64(len(body))
}

// Batch is one deposit.
type Batch struct {
	Index   int
	UUID    string
	Type    v1.PayloadType
	URLPath string // the payload's path on the depositor's server
	Size    string // size class of its files
	// Peer: written into the queue as Merritt's library writes a batch,
	// not submitted through BatchService.
	Peer bool
	// Doomed: its payload is missing (404); the batch must fail, and an
	// operator deletes it.
	Doomed  bool
	Objects []Object
}

// Plan makes n batches, cycling through the payload types and size
// classes (so every type and class comes in a run), with a Merritt
// library batch and one whose payload is missing among them.
func Plan(rng *rand.Rand, seed uint64, n int) []*Batch {
	types := []v1.PayloadType{v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, v1.PayloadType_PAYLOAD_TYPE_FILE,
		v1.PayloadType_PAYLOAD_TYPE_CONTAINER, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS}
	var out []*Batch
	for i := range n {
		b := &Batch{Index: i, UUID: fmt.Sprintf("robust-%d-%d", seed, i), Type: types[i%len(types)],
			Size: sizeClasses[(i/len(types)+i)%len(sizeClasses)].name}
		switch {
		case i == 1:
			b.Peer = true
		case i == 3:
			b.Doomed = true
		}
		out = append(out, b)
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	for i, b := range out {
		b.Index = i
	}
	return out
}

// PlanReserve adds n batches after batches: one object manifest of small
// files each, kept for faults that need a batch to arrive (every stage
// sees its one job, and the batcher keeps its payload).
func PlanReserve(seed uint64, batches []*Batch, n int) []*Batch {
	for i := range n {
		k := len(batches)
		batches = append(batches, &Batch{Index: k, UUID: fmt.Sprintf("robust-%d-%d", seed, k), Type: v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			Size: sizeClasses[i%len(sizeClasses)].name})
	}
	return batches
}

// PlanFiles makes n batches of one small file each: a run whose every
// job a targeted fault can find.
func PlanFiles(seed uint64, n int) []*Batch {
	var out []*Batch
	for i := range n {
		out = append(out, &Batch{Index: i, UUID: fmt.Sprintf("robust-%d-%d", seed, i), Type: v1.PayloadType_PAYLOAD_TYPE_FILE, Size: "small"})
	}
	return out
}

// rowsPerManifest is how many objects a manifest of manifests or of
// containers lists: enough that its jobs take more than one multi to
// create (the batcher's failpoint between them).
const rowsPerManifest = 48

// Write writes every batch's payload under dir, served at base.
func Write(dir, base string, rng *rand.Rand, batches []*Batch) error {
	for _, b := range batches {
		if err := b.write(dir, base, rng); err != nil {
			return fmt.Errorf("batch %d: %w", b.Index, err)
		}
	}
	return nil
}

func sizeOf(class string) int {
	for _, c := range sizeClasses {
		if c.name == class {
			return c.size
		}
	}
	return 1 << 10
}

func (b *Batch) write(dir, base string, rng *rand.Rand) error {
	prefix := fmt.Sprintf("b%02d", b.Index)
	size := sizeOf(b.Size)
	if b.Doomed {
		b.URLPath = "/" + prefix + "/missing"
		return nil
	}
	switch b.Type {
	case v1.PayloadType_PAYLOAD_TYPE_FILE:
		body := fileBody(rng, b.UUID, "single.txt", size)
		b.URLPath = "/" + prefix + "/single.txt"
		var obj Object
		obj.add("single.txt", body)
		b.Objects = []Object{obj}
		return writeFile(filepath.Join(dir, prefix, "single.txt"), body)
	case v1.PayloadType_PAYLOAD_TYPE_CONTAINER:
		obj, data, err := container(rng, b.UUID, size)
		if err != nil {
			return err
		}
		b.URLPath, b.Objects = "/"+prefix+"/object.zip", []Object{obj}
		return writeFile(filepath.Join(dir, prefix, "object.zip"), data)
	case v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST:
		obj, err := objectManifest(dir, base, prefix+"/obj", rng, b.UUID, size, "")
		if err != nil {
			return err
		}
		b.URLPath, b.Objects = "/"+prefix+"/obj.checkm", []Object{obj}
		return nil
	case v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS:
		var rows []checkm.Entry
		for i := range rowsPerManifest {
			lid := fmt.Sprintf("%s-%03d", b.UUID, i)
			// Most rows small: a manifest's rows are many.
			rowSize := min(size, sizeOf("small")<<uint(i%3))
			var obj Object
			var url string
			if b.Type == v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS {
				var err error
				if obj, err = objectManifest(dir, base, fmt.Sprintf("%s/o%03d", prefix, i), rng, lid, rowSize, lid); err != nil {
					return err
				}
				url = fmt.Sprintf("%s/%s/o%03d.checkm", base, prefix, i)
			} else {
				var data []byte
				var err error
				if obj, data, err = container(rng, lid, rowSize); err != nil {
					return err
				}
				obj.LocalID = lid
				name := fmt.Sprintf("%s/c%03d.zip", prefix, i)
				if err := writeFile(filepath.Join(dir, name), data); err != nil {
					return err
				}
				url = base + "/" + name
			}
			rows = append(rows, checkm.Entry{FileURL: url, FileSize: -1, FileName: path.Base(url), LocalIdentifier: lid, Title: "robust object " + lid})
			b.Objects = append(b.Objects, obj)
		}
		profile := checkm.ProfileBatch
		if b.Type == v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS {
			profile = checkm.ProfileContainerBatch
		}
		b.URLPath = "/" + prefix + "/batch.checkm"
		return writeManifest(filepath.Join(dir, prefix, "batch.checkm"), profile,
			[]string{"nfo:fileUrl", "nfo:fileName", "mrt:localIdentifier", "mrt:title"}, rows)
	}
	return fmt.Errorf("payload type %v", b.Type)
}

// objectManifest writes the files of one object and its manifest at
// <dir>/<stem>.checkm.
func objectManifest(dir, base, stem string, rng *rand.Rand, name string, size int, lid string) (Object, error) {
	obj := Object{LocalID: lid}
	var entries []checkm.Entry
	for f := range 1 + rng.IntN(3) {
		fname := fmt.Sprintf("part-%d.txt", f)
		body := fileBody(rng, name, fname, size)
		if err := writeFile(filepath.Join(dir, stem, fname), body); err != nil {
			return Object{}, err
		}
		obj.add(fname, body)
		entries = append(entries, checkm.Entry{FileURL: base + "/" + stem + "/" + fname, HashAlgorithm: "sha256",
			HashValue: digest(body), FileSize: int64(len(body)), FileName: fname})
	}
	return obj, writeManifest(filepath.Join(dir, stem+".checkm"), checkm.ProfileObject,
		[]string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}, entries)
}

// container is a zip of two files.
func container(rng *rand.Rand, name string, size int) (Object, []byte, error) {
	var obj Object
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, fname := range []string{"data/a.txt", "data/b.txt"} {
		body := fileBody(rng, name, fname, size)
		w, err := zw.Create(fname)
		if err != nil {
			return Object{}, nil, err
		}
		if _, err := w.Write(body); err != nil {
			return Object{}, nil, err
		}
		obj.add(fname, body)
	}
	if err := zw.Close(); err != nil {
		return Object{}, nil, err
	}
	return obj, buf.Bytes(), nil
}

// fileBody is size bytes that name their object and file, so that no two
// files share content.
func fileBody(rng *rand.Rand, obj, name string, size int) []byte {
	line := fmt.Sprintf("%s %s %016x\n", obj, name, rng.Uint64())
	return []byte(strings.Repeat(line, size/len(line)+1)[:size])
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func writeFile(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

func writeManifest(p, profile string, fields []string, entries []checkm.Entry) error {
	var b strings.Builder
	if err := checkm.Write(&b, profile, fields, entries); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return writeFile(p, []byte(b.String()))
}
