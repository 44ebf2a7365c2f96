package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The codec turns the proto types into the exact JSON of the spec and back.
// It is hand-mapped (not protojson) because the spec's spelling differs from
// protojson's: capitalised status names, null for an unset
// last_successful_status, flattened erc_* keys, decimal text for integers.

// MaxNodeBytes is the most ingestq writes into one ZooKeeper node (900 KiB):
// a node holds less than 1 MB (the server's jute.maxbuffer, 1 MiB by
// default, bounds a whole request, and a server that receives a larger one
// drops the connection), and the rest of the write shares the request. A
// job's file list (its manifest node) is refused past it; a batch's
// status-report is trimmed to it (see fitStatusReport).
const MaxNodeBytes = 900 << 10

// TimeLayout is the spec's last_modified format: "2026-11-22 03:51:07 +0000".
const TimeLayout = "2006-01-02 15:04:05 -0700"

func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(TimeLayout)
}

// parseTime accepts the spec's layout and, leniently, RFC 3339 from other
// writers; anything else reads as "unknown" rather than failing the item.
// So does a time whose UTC form falls outside the years 0000–9999: the
// layout could not write it back.
func parseTime(s string) *timestamppb.Timestamp {
	if s == "" {
		return nil
	}
	for _, layout := range []string{TimeLayout, time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			if y := t.UTC().Year(); y < 0 || y > 9999 {
				return nil
			}
			return timestamppb.New(t)
		}
	}
	return nil
}

func nowStamp() *timestamppb.Timestamp {
	return timestamppb.New(time.Now().UTC().Truncate(time.Second))
}

var payloadTypeNames = map[v1.PayloadType]string{
	v1.PayloadType_PAYLOAD_TYPE_FILE:                   "file",
	v1.PayloadType_PAYLOAD_TYPE_CONTAINER:              "container",
	v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST:        "object_manifest",
	v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS:  "manifest_of_manifests",
	v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS: "manifest_of_containers",
}

// PayloadTypeName is the JSON spelling of t ("object_manifest").
func PayloadTypeName(t v1.PayloadType) string { return payloadTypeNames[t] }

// ParsePayloadType reads "object_manifest", "object-manifest" or the enum name.
func ParsePayloadType(s string) (v1.PayloadType, error) {
	norm := strings.ToLower(strings.ReplaceAll(s, "-", "_"))
	for t, n := range payloadTypeNames {
		if norm == n || s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown payload type %q", s)
}

func submissionModeName(m v1.SubmissionMode) string {
	switch m {
	case v1.SubmissionMode_SUBMISSION_MODE_ADD:
		return "add"
	case v1.SubmissionMode_SUBMISSION_MODE_UPDATE:
		return "update"
	}
	return ""
}

// ParseSubmissionMode reads "add" or "update" (or the enum name).
func ParseSubmissionMode(s string) (v1.SubmissionMode, error) {
	switch strings.ToLower(s) {
	case "add", "submission_mode_add":
		return v1.SubmissionMode_SUBMISSION_MODE_ADD, nil
	case "update", "submission_mode_update":
		return v1.SubmissionMode_SUBMISSION_MODE_UPDATE, nil
	}
	return 0, fmt.Errorf("unknown submission mode %q", s)
}

// marshal encodes compact JSON without HTML escaping (the spec wants plain UTF-8).
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only reachable with unsupported types, which the wire structs never hold.
		panic(fmt.Sprintf("queue: encoding %T: %v", v, err))
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

func unmarshal(path string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &CorruptError{Path: path, Err: fmt.Errorf("invalid JSON: %w", err)}
	}
	return nil
}

// --- job status ---

type jobStatusJSON struct {
	Status               string  `json:"status"`
	LastModified         string  `json:"last_modified"`
	Message              string  `json:"message"`
	LastSuccessfulStatus *string `json:"last_successful_status"`
	RetryCount           int32   `json:"retry_count"`
	Traceparent          string  `json:"traceparent,omitempty"`
}

func encodeJobStatus(s *v1.JobStatus) []byte {
	w := jobStatusJSON{
		Status:       JobStateName(s.GetStatus()),
		LastModified: formatTime(s.GetLastModified()),
		Message:      s.GetMessage(),
		RetryCount:   s.GetRetryCount(),
		Traceparent:  s.GetTraceparent(),
	}
	if ls := s.GetLastSuccessfulStatus(); ls != v1.JobState_JOB_STATE_UNSPECIFIED {
		n := JobStateName(ls)
		w.LastSuccessfulStatus = &n
	}
	return marshal(w)
}

func decodeJobStatus(path string, data []byte) (*v1.JobStatus, error) {
	var w jobStatusJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	st, err := ParseJobState(w.Status)
	if err != nil {
		return nil, &CorruptError{Path: path, Err: err}
	}
	out := &v1.JobStatus{Status: st, LastModified: parseTime(w.LastModified), Message: w.Message, RetryCount: w.RetryCount, Traceparent: w.Traceparent}
	if w.LastSuccessfulStatus != nil && *w.LastSuccessfulStatus != "" {
		ls, err := ParseJobState(*w.LastSuccessfulStatus)
		if err != nil {
			return nil, &CorruptError{Path: path, Err: fmt.Errorf("last_successful_status: %w", err)}
		}
		out.LastSuccessfulStatus = ls
	}
	return out, nil
}

// --- batch status and report ---

type batchStatusJSON struct {
	Status       string `json:"status"`
	LastModified string `json:"last_modified"`
	Message      string `json:"message"`
}

func encodeBatchStatus(s *v1.BatchStatus) []byte {
	return marshal(batchStatusJSON{
		Status:       BatchStateName(s.GetStatus()),
		LastModified: formatTime(s.GetLastModified()),
		Message:      s.GetMessage(),
	})
}

func decodeBatchStatus(path string, data []byte) (*v1.BatchStatus, error) {
	var w batchStatusJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	st, err := ParseBatchState(w.Status)
	if err != nil {
		return nil, &CorruptError{Path: path, Err: err}
	}
	return &v1.BatchStatus{Status: st, LastModified: parseTime(w.LastModified), Message: w.Message}, nil
}

// A batch's status-report lists a jid per job, ~16 bytes of JSON each, so
// past ~57,000 jobs it no longer fits a node. encodeStatusReport then trims
// it (fitStatusReport): failed_jobs is kept whole if it fits, since the
// batcher's update report works from it; successful_jobs is cut to what
// fits; and the count each trimmed list had is written beside it as
// "successful_jobs_total" (and "failed_jobs_total"), so that nobody takes a
// trimmed list for the whole. Only if failed_jobs alone does not fit is
// successful_jobs emptied and failed_jobs cut too. The keys are ingestq's
// own and written only when a list was trimmed: a report that fits is
// written byte for byte as the Merritt library writes it, and peers ignore
// keys they do not know. The whole lists stay derivable from the batch's
// states/batch-completed and states/batch-failed references.
//
// Read back, a total is never less than its list: a node without the key
// (a peer's report, or one of ours that fit) reads as total = the list's
// length, and so does a key that is not a count (not an integer, negative,
// less than the list, or past int32), rather than failing the node.

type statusReportJSON struct {
	LastModified        string   `json:"last_modified"`
	FailedJobs          []string `json:"failed_jobs"`
	SuccessfulJobs      []string `json:"successful_jobs"`
	FailedJobsTotal     int32    `json:"failed_jobs_total,omitempty"`
	SuccessfulJobsTotal int32    `json:"successful_jobs_total,omitempty"`
}

// reportTotal is a list's total: the larger of the count given and the
// list's length (0 or less means the list is whole).
func reportTotal(total int32, list []string) int32 {
	return max(total, int32(min(len(list), math.MaxInt32)))
}

// fitStatusReport returns r as the node keeps it within limit bytes, and
// its JSON: the lists trimmed as described above and both totals filled.
// It returns r's lists unchanged (not copied) when they fit.
func fitStatusReport(r *v1.StatusReport, limit int) (*v1.StatusReport, []byte) {
	out := &v1.StatusReport{
		LastModified:        r.GetLastModified(),
		FailedJobs:          r.GetFailedJobs(),
		SuccessfulJobs:      r.GetSuccessfulJobs(),
		FailedJobsTotal:     reportTotal(r.GetFailedJobsTotal(), r.GetFailedJobs()),
		SuccessfulJobsTotal: reportTotal(r.GetSuccessfulJobsTotal(), r.GetSuccessfulJobs()),
	}
	if data := marshal(statusReportWire(out)); len(data) <= limit {
		return out, data
	}
	// base is the report with both lists empty and the keys it will have:
	// successful_jobs_total (that list is trimmed, or was already), and
	// failed_jobs_total if trimFailed or that list was already trimmed.
	// Each kept jid adds its JSON string and a comma.
	base := func(trimFailed bool) int {
		w := statusReportJSON{LastModified: formatTime(out.GetLastModified()), FailedJobs: []string{}, SuccessfulJobs: []string{},
			SuccessfulJobsTotal: out.SuccessfulJobsTotal}
		if trimFailed || int(out.FailedJobsTotal) > len(out.FailedJobs) {
			w.FailedJobsTotal = out.FailedJobsTotal
		}
		return len(marshal(w))
	}
	failed, successful := out.FailedJobs, out.SuccessfulJobs
	if b := base(false) + listBytes(failed); b <= limit {
		out.SuccessfulJobs = successful[:fitting(successful, limit-b)]
	} else {
		out.SuccessfulJobs = nil
		out.FailedJobs = failed[:fitting(failed, limit-base(true))]
	}
	// The sums are exact; the loop only guards against a mistake in them.
	for {
		data := marshal(statusReportWire(out))
		switch {
		case len(data) <= limit:
			return out, data
		case len(out.SuccessfulJobs) > 0:
			out.SuccessfulJobs = out.SuccessfulJobs[:len(out.SuccessfulJobs)-1]
		case len(out.FailedJobs) > 0:
			out.FailedJobs = out.FailedJobs[:len(out.FailedJobs)-1]
		default:
			return out, data
		}
	}
}

// statusReportWire is the JSON of r as written: a total only where its list
// is shorter than it.
func statusReportWire(r *v1.StatusReport) statusReportJSON {
	// Empty lists are written [], as the Merritt library writes them.
	w := statusReportJSON{
		LastModified:   formatTime(r.GetLastModified()),
		FailedJobs:     r.GetFailedJobs(),
		SuccessfulJobs: r.GetSuccessfulJobs(),
	}
	if w.FailedJobs == nil {
		w.FailedJobs = []string{}
	}
	if w.SuccessfulJobs == nil {
		w.SuccessfulJobs = []string{}
	}
	if t := reportTotal(r.GetFailedJobsTotal(), r.GetFailedJobs()); int(t) > len(r.GetFailedJobs()) {
		w.FailedJobsTotal = t
	}
	if t := reportTotal(r.GetSuccessfulJobsTotal(), r.GetSuccessfulJobs()); int(t) > len(r.GetSuccessfulJobs()) {
		w.SuccessfulJobsTotal = t
	}
	return w
}

// listBytes is what the elements of a JSON list of jids take between its
// brackets.
func listBytes(jids []string) int {
	n := max(len(jids)-1, 0) // commas
	for _, s := range jids {
		n += jsonStringBytes(s)
	}
	return n
}

// fitting is how many of jids, from the first, fit in room bytes.
func fitting(jids []string, room int) int {
	for i, s := range jids {
		if i > 0 {
			room-- // comma
		}
		if room -= jsonStringBytes(s); room < 0 {
			return i
		}
	}
	return len(jids)
}

// jsonStringBytes is the length of s as marshal writes it: quotes added,
// and escapes for whatever a jid from a careless writer may hold.
func jsonStringBytes(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return len(marshal(s))
		}
	}
	return len(s) + 2
}

func encodeStatusReport(r *v1.StatusReport) []byte {
	_, data := fitStatusReport(r, MaxNodeBytes)
	return data
}

func decodeStatusReport(path string, data []byte) (*v1.StatusReport, error) {
	var w struct {
		LastModified        string          `json:"last_modified"`
		FailedJobs          []string        `json:"failed_jobs"`
		SuccessfulJobs      []string        `json:"successful_jobs"`
		FailedJobsTotal     json.RawMessage `json:"failed_jobs_total"`
		SuccessfulJobsTotal json.RawMessage `json:"successful_jobs_total"`
	}
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	return &v1.StatusReport{LastModified: parseTime(w.LastModified), FailedJobs: w.FailedJobs, SuccessfulJobs: w.SuccessfulJobs,
		FailedJobsTotal:     reportTotal(decodeCount(w.FailedJobsTotal), w.FailedJobs),
		SuccessfulJobsTotal: reportTotal(decodeCount(w.SuccessfulJobsTotal), w.SuccessfulJobs)}, nil
}

// decodeCount reads a JSON count leniently: anything but an integer in
// int32's range reads as 0 (unknown).
func decodeCount(raw json.RawMessage) int32 {
	n, err := strconv.ParseInt(string(raw), 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// --- submission ---

type submissionJSON struct {
	ProfileName    string `json:"profile_name"`
	Submitter      string `json:"submitter"`
	PayloadURL     string `json:"payload_url"`
	ErcWho         string `json:"erc_who"`
	ErcWhat        string `json:"erc_what"`
	ErcWhen        string `json:"erc_when"`
	ErcWhere       string `json:"erc_where"`
	Type           string `json:"type"`
	SubmissionMode string `json:"submission_mode"`
	BatchID        string `json:"batch_id,omitempty"`
	SubmissionDate string `json:"submission_date,omitempty"`
	Traceparent    string `json:"traceparent,omitempty"`
	Collection     string `json:"collection,omitempty"`
}

func encodeSubmission(s *v1.Submission) []byte {
	md := s.GetMetadata()
	return marshal(submissionJSON{
		ProfileName:    s.GetProfileName(),
		Submitter:      s.GetSubmitter(),
		PayloadURL:     s.GetPayloadUrl(),
		ErcWho:         md.GetWho(),
		ErcWhat:        md.GetWhat(),
		ErcWhen:        md.GetWhen(),
		ErcWhere:       md.GetWhere(),
		Type:           PayloadTypeName(s.GetType()),
		SubmissionMode: submissionModeName(s.GetSubmissionMode()),
		BatchID:        s.GetBatchId(),
		SubmissionDate: formatTime(s.GetSubmissionDate()),
		Traceparent:    s.GetTraceparent(),
		Collection:     s.GetCollection(),
	})
}

func decodeSubmission(path string, data []byte) (*v1.Submission, error) {
	var w submissionJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	out := &v1.Submission{
		ProfileName: w.ProfileName,
		Submitter:   w.Submitter,
		PayloadUrl:  w.PayloadURL,
		Metadata:    &v1.Metadata{Who: w.ErcWho, What: w.ErcWhat, When: w.ErcWhen, Where: w.ErcWhere},
		BatchId:     w.BatchID,
		// Peers may omit the date; a missing one reads as unknown.
		SubmissionDate: parseTime(w.SubmissionDate),
		Traceparent:    w.Traceparent,
		Collection:     w.Collection,
	}
	var err error
	if out.Type, out.SubmissionMode, err = decodeKinds(path, w.Type, w.SubmissionMode); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeKinds reads the payload type and submission mode words that a
// submission and a job configuration both carry; an absent word leaves its
// value unspecified.
func decodeKinds(path, payloadType, mode string) (v1.PayloadType, v1.SubmissionMode, error) {
	var t v1.PayloadType
	var m v1.SubmissionMode
	var err error
	if payloadType != "" {
		if t, err = ParsePayloadType(payloadType); err != nil {
			return 0, 0, &CorruptError{Path: path, Err: err}
		}
	}
	if mode != "" {
		if m, err = ParseSubmissionMode(mode); err != nil {
			return 0, 0, &CorruptError{Path: path, Err: err}
		}
	}
	return t, m, nil
}

// --- job data nodes ---

type configurationJSON struct {
	ProfileName    string `json:"profile_name"`
	Submitter      string `json:"submitter"`
	PayloadURL     string `json:"payload_url"`
	PayloadType    string `json:"payload_type"`
	ResponseType   string `json:"response_type"`
	SubmissionMode string `json:"submission_mode"`
	WorkingDir     string `json:"working_dir"`
	BatchID        string `json:"batch_id,omitempty"`
	BatchEntry     *int32 `json:"batch_entry,omitempty"`
	Traceparent    string `json:"traceparent,omitempty"`
	Collection     string `json:"collection,omitempty"`
}

func encodeConfiguration(c *v1.JobConfiguration) []byte {
	entry := c.GetBatchEntry()
	return marshal(configurationJSON{
		ProfileName:    c.GetProfileName(),
		Submitter:      c.GetSubmitter(),
		PayloadURL:     c.GetPayloadUrl(),
		PayloadType:    PayloadTypeName(c.GetPayloadType()),
		ResponseType:   c.GetResponseType(),
		SubmissionMode: submissionModeName(c.GetSubmissionMode()),
		WorkingDir:     c.GetWorkingDir(),
		BatchID:        c.GetBatchId(),
		BatchEntry:     &entry,
		Traceparent:    c.GetTraceparent(),
		Collection:     c.GetCollection(),
	})
}

func decodeConfiguration(path string, data []byte) (*v1.JobConfiguration, error) {
	var w configurationJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	out := &v1.JobConfiguration{
		ProfileName:  w.ProfileName,
		Submitter:    w.Submitter,
		PayloadUrl:   w.PayloadURL,
		ResponseType: w.ResponseType,
		WorkingDir:   w.WorkingDir,
		BatchId:      w.BatchID,
		Traceparent:  w.Traceparent,
		Collection:   w.Collection,
	}
	if w.BatchEntry != nil {
		out.BatchEntry = *w.BatchEntry
	}
	var err error
	if out.PayloadType, out.SubmissionMode, err = decodeKinds(path, w.PayloadType, w.SubmissionMode); err != nil {
		return nil, err
	}
	return out, nil
}

type identifiersJSON struct {
	PrimaryID string   `json:"primary_id"`
	LocalID   []string `json:"local_id"`
}

func encodeIdentifiers(i *v1.Identifiers) []byte {
	return marshal(identifiersJSON{PrimaryID: i.GetPrimaryId(), LocalID: append([]string{}, i.GetLocalId()...)})
}

func decodeIdentifiers(path string, data []byte) (*v1.Identifiers, error) {
	var w identifiersJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	return &v1.Identifiers{PrimaryId: w.PrimaryID, LocalId: w.LocalID}, nil
}

type metadataJSON struct {
	ErcWho   string `json:"erc_who"`
	ErcWhat  string `json:"erc_what"`
	ErcWhen  string `json:"erc_when"`
	ErcWhere string `json:"erc_where"`
}

func encodeMetadata(m *v1.Metadata) []byte {
	return marshal(metadataJSON{ErcWho: m.GetWho(), ErcWhat: m.GetWhat(), ErcWhen: m.GetWhen(), ErcWhere: m.GetWhere()})
}

func decodeMetadata(path string, data []byte) (*v1.Metadata, error) {
	var w metadataJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	return &v1.Metadata{Who: w.ErcWho, What: w.ErcWhat, When: w.ErcWhen, Where: w.ErcWhere}, nil
}

// storeJSON and inventoryJSON carry "version", ingestq's own key: written
// only when known, so a node without it reads as it did before (version 0).
type storeJSON struct {
	ManifestURL string `json:"manifest_url"`
	Mode        string `json:"mode"`
	Delete      bool   `json:"delete"`
	Version     int32  `json:"version,omitempty"`
}

func encodeStore(s *v1.Store) []byte {
	return marshal(storeJSON{ManifestURL: s.GetManifestUrl(), Mode: s.GetMode(), Delete: s.GetDelete(), Version: s.GetVersion()})
}

func decodeStore(path string, data []byte) (*v1.Store, error) {
	// The Merritt library writes "delete" as a string; accept both.
	var w struct {
		ManifestURL string          `json:"manifest_url"`
		Mode        string          `json:"mode"`
		Delete      json.RawMessage `json:"delete"`
		Version     int32           `json:"version"`
	}
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	del := strings.Trim(string(w.Delete), `"`)
	return &v1.Store{ManifestUrl: w.ManifestURL, Mode: w.Mode, Delete: del == "true", Version: w.Version}, nil
}

type inventoryJSON struct {
	ManifestURL string `json:"manifest_url"`
	Mode        string `json:"mode"`
	Version     int32  `json:"version,omitempty"`
}

func encodeInventory(i *v1.Inventory) []byte {
	return marshal(inventoryJSON{ManifestURL: i.GetManifestUrl(), Mode: i.GetMode(), Version: i.GetVersion()})
}

func decodeInventory(path string, data []byte) (*v1.Inventory, error) {
	var w inventoryJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	return &v1.Inventory{ManifestUrl: w.ManifestURL, Mode: w.Mode, Version: w.Version}, nil
}

type manifestFileJSON struct {
	URL           string `json:"url"`
	HashAlgorithm string `json:"hash_algorithm,omitempty"`
	HashValue     string `json:"hash_value,omitempty"`
	Size          int64  `json:"size"`
	LastModified  string `json:"last_modified,omitempty"`
	Name          string `json:"name"`
}

func encodeManifest(m *v1.Manifest) []byte {
	files := make([]manifestFileJSON, 0, len(m.GetFiles()))
	for _, f := range m.GetFiles() {
		files = append(files, manifestFileJSON{URL: f.GetUrl(), HashAlgorithm: f.GetHashAlgorithm(),
			HashValue: f.GetHashValue(), Size: f.GetSize(), LastModified: f.GetLastModified(), Name: f.GetName()})
	}
	return marshal(struct {
		Files []manifestFileJSON `json:"files"`
	}{files})
}

func decodeManifest(path string, data []byte) (*v1.Manifest, error) {
	var w struct {
		Files []manifestFileJSON `json:"files"`
	}
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	out := &v1.Manifest{Files: make([]*v1.ManifestFile, 0, len(w.Files))}
	for _, f := range w.Files {
		out.Files = append(out.Files, &v1.ManifestFile{Url: f.URL, HashAlgorithm: f.HashAlgorithm,
			HashValue: f.HashValue, Size: f.Size, LastModified: f.LastModified, Name: f.Name})
	}
	return out, nil
}

// --- decimal text ---

func encodeInt(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

func decodeInt(path string, data []byte) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, &CorruptError{Path: path, Err: fmt.Errorf("not a decimal integer: %q", truncate(string(data), 40))}
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
