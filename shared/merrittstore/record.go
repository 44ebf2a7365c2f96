package merrittstore

import (
	"fmt"
	"strconv"
	"strings"
)

// IngestRecordFile is the file of every version ingestq stores in
// Merritt's storage service that names the job that made it, where
// Merritt's ingest service keeps the same record of its own jobs.
const IngestRecordFile = "system/mrt-ingest.txt"

// IngestRecord is what IngestRecordFile says, in ANVL ("name: value"
// lines), under the names Merritt's ingest service uses for the same
// facts. It holds nothing that changes when a job is processed again, so
// the file's digest tells the version a job made from every other.
type IngestRecord struct {
	Batch, Job     string
	Object         string // the ARK
	Profile        string
	StorageService string
	StorageNode    int
}

// Bytes is the record as the file holds it.
func (r IngestRecord) Bytes() []byte {
	var b strings.Builder
	for _, kv := range [][2]string{{"ingest", "ingestq"}, {"batch", r.Batch}, {"job", r.Job}, {"primaryIdentifier", r.Object},
		{"profile", r.Profile}, {"storageService", r.StorageService}, {"storageNode", strconv.Itoa(r.StorageNode)}} {
		v := strings.Join(strings.Fields(kv[1]), " ")
		if v == "" {
			v = "(:unas)"
		}
		fmt.Fprintf(&b, "%s: %s\n", kv[0], v)
	}
	return []byte(b.String())
}

// JobOfIngestRecord is the job an ingest record names, ingestq's or
// Merritt's ingest service's ("" when it names none).
func JobOfIngestRecord(data []byte) string {
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "job:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
