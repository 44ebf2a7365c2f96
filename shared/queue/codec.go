package queue

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
// batch's status-report is trimmed to it (see FitStatusReport); a job's
// file list is kept in its node only far below it (MaxInlineFileListBytes).
const MaxNodeBytes = 900 << 10

// TimeLayout is the spec's last_modified format: "2026-11-22 03:51:07 +0000".
const TimeLayout = "2006-01-02 15:04:05 -0700"

func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(TimeLayout)
}

// parseTime accepts the spec's layout and, leniently, RFC 3339 and the
// Java Date text Merritt's ingest service writes ("Sun Nov 22 03:51:07 UTC
// 2026"); anything else reads as "unknown" rather than failing the item.
// So does a time whose UTC form falls outside the years 0000–9999: the
// layout could not write it back.
func parseTime(s string) *timestamppb.Timestamp {
	if s == "" {
		return nil
	}
	layouts := []string{TimeLayout, time.RFC3339Nano, time.UnixDate}
	if len(s) > 10 && s[10] == 'T' {
		// RFC 3339, as every history entry's time: no other layout
		// has a T there, so trying it first changes no result.
		layouts = layouts[1:]
	}
	for _, layout := range layouts {
		if t, err := time.Parse(layout, s); err == nil {
			if y := t.UTC().Year(); y < 0 || y > 9999 {
				return nil
			}
			return timestamppb.New(t)
		}
	}
	return nil
}

func NowStamp() *timestamppb.Timestamp {
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

// merrittPayloadTypes are the payload type words of Merritt's ingest
// service (its package types), as they reach the queue in a batch's
// "type" or a job's "payload_type" or "type", and what each is in
// ingestq.
var merrittPayloadTypes = map[string]v1.PayloadType{
	"file":                   v1.PayloadType_PAYLOAD_TYPE_FILE,
	"container":              v1.PayloadType_PAYLOAD_TYPE_CONTAINER,
	"manifest":               v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
	"batchManifest":          v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
	"batchManifestContainer": v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS,
}

// merrittUnsupported are Merritt's words that name something ingestq does
// not do, with what it is.
var merrittUnsupported = map[string]string{
	"batchManifestFile": "a manifest of single files",
}

// AcceptedPayloadTypes lists the payload type words the queue reads: ours,
// then Merritt's.
const AcceptedPayloadTypes = "file, container, object_manifest, manifest_of_manifests, manifest_of_containers" +
	"; Merritt's manifest, batchManifest, batchManifestContainer"

// ParsePayloadType reads a payload type word: ours ("object_manifest",
// "object-manifest"), the enum name, or Merritt's ("manifest",
// "batchManifest", "batchManifestContainer"). The error of a word it does
// not know names the word and every word accepted.
func ParsePayloadType(s string) (v1.PayloadType, error) {
	norm := strings.ToLower(strings.ReplaceAll(s, "-", "_"))
	for t, n := range payloadTypeNames {
		if norm == n || s == t.String() {
			return t, nil
		}
	}
	for w, t := range merrittPayloadTypes {
		if strings.EqualFold(s, w) {
			return t, nil
		}
	}
	for w, what := range merrittUnsupported {
		if strings.EqualFold(s, w) {
			return 0, fmt.Errorf("payload type %q (Merritt's %s) is not one ingestq ingests (accepted: %s)", s, what, AcceptedPayloadTypes)
		}
	}
	return 0, fmt.Errorf("unknown payload type %q (accepted: %s)", s, AcceptedPayloadTypes)
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
	// History is []historyJSON, read leniently (decodeHistory); written
	// by EncodeJobStatus.
	History        any   `json:"history,omitempty"`
	HistoryDropped int32 `json:"history_dropped,omitempty"`
}

// jobStatusRead is jobStatusJSON as read: the history is decoded apart.
type jobStatusRead struct {
	jobStatusJSON
	History        json.RawMessage `json:"history"`
	HistoryDropped json.RawMessage `json:"history_dropped"`
}

// jobStatusTyped is jobStatusJSON as read when its history is well-formed:
// one pass of the decoder reads it all (DecodeJobStatus).
type jobStatusTyped struct {
	jobStatusJSON
	History        []historyJSON   `json:"history"`
	HistoryDropped json.RawMessage `json:"history_dropped"`
}

// EncodeJobStatus writes what marshal writes of the jobStatusJSON of s,
// byte for byte, without reflection: every commit and claim of every job
// writes a status, its history included (TestJobStatusEncodingMatchesTheWireStruct).
func EncodeJobStatus(s *v1.JobStatus) []byte { return encodeJobStatusReusing(s, nil) }

// encodeJobStatusReusing is EncodeJobStatus writing raw[i] for the i-th
// history entry where raw has it (not nil): those very bytes, as read of
// an entry that encodes to them (keptEntries).
func encodeJobStatusReusing(s *v1.JobStatus, raw [][]byte) []byte {
	hs := s.GetHistory()
	b := make([]byte, 0, 160+len(s.GetMessage())+len(s.GetTraceparent())+110*len(hs))
	b = append(b, `{"status":`...)
	b = appendJSONString(b, JobStateName(s.GetStatus()))
	b = append(b, `,"last_modified":`...)
	b = appendJSONString(b, formatTime(s.GetLastModified()))
	b = append(b, `,"message":`...)
	b = appendJSONString(b, s.GetMessage())
	b = append(b, `,"last_successful_status":`...)
	if ls := s.GetLastSuccessfulStatus(); ls != v1.JobState_JOB_STATE_UNSPECIFIED {
		b = appendJSONString(b, JobStateName(ls))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"retry_count":`...)
	b = strconv.AppendInt(b, int64(s.GetRetryCount()), 10)
	if tp := s.GetTraceparent(); tp != "" {
		b = append(b, `,"traceparent":`...)
		b = appendJSONString(b, tp)
	}
	if len(hs) > 0 {
		b = append(b, `,"history":[`...)
		for i, h := range hs {
			if i > 0 {
				b = append(b, ',')
			}
			if i < len(raw) && raw[i] != nil {
				b = append(b, raw[i]...)
			} else {
				b = appendHistoryEntry(b, h)
			}
		}
		b = append(b, ']')
	}
	if n := s.GetHistoryDropped(); n != 0 {
		b = append(b, `,"history_dropped":`...)
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, escaped as marshal escapes
// it (encoding/json without HTML escaping): quote, backslash and control
// characters escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 as \u
// escapes.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// DecodeJobStatus reads a job status. What ingestq writes is scanned
// (scanStatus); else a status whose every key has its type, its history
// included, is read in one pass of the decoder; any other takes the
// lenient way (decodeJobStatusLenient). All three read the same from a
// status each can read.
func DecodeJobStatus(path string, data []byte) (*v1.JobStatus, error) {
	if st, ok := scanStatus(data); ok {
		return jobStatusOf(path, &st.w, st.hist, st.dropped)
	}
	return decodeJobStatusTyped(path, data)
}

// decodeJobStatusTyped is DecodeJobStatus through the JSON decoder.
func decodeJobStatusTyped(path string, data []byte) (*v1.JobStatus, error) {
	var r jobStatusTyped
	if json.Unmarshal(data, &r) != nil {
		return decodeJobStatusLenient(path, data)
	}
	var hist []*v1.JobStateChange
	if r.History != nil {
		hist = make([]*v1.JobStateChange, 0, len(r.History))
		for i := range r.History {
			if h, ok := historyEntry(&r.History[i]); ok {
				hist = append(hist, h)
			}
		}
	}
	return jobStatusOf(path, &r.jobStatusJSON, hist, r.HistoryDropped)
}

// decodeJobStatusLenient reads a job status whose history another writer
// may have garbled: such an entry is skipped (decodeHistory).
func decodeJobStatusLenient(path string, data []byte) (*v1.JobStatus, error) {
	var r jobStatusRead
	if err := unmarshal(path, data, &r); err != nil {
		return nil, err
	}
	return jobStatusOf(path, &r.jobStatusJSON, decodeHistory(r.History), r.HistoryDropped)
}

// jobStatusOf is the status w read, with its history hist and the
// history_dropped member as read.
func jobStatusOf(path string, w *jobStatusJSON, hist []*v1.JobStateChange, dropped json.RawMessage) (*v1.JobStatus, error) {
	st, err := ParseJobState(w.Status)
	if err != nil {
		return nil, &CorruptError{Path: path, Err: err}
	}
	out := &v1.JobStatus{Status: st, LastModified: parseTime(w.LastModified), Message: w.Message, RetryCount: w.RetryCount, Traceparent: w.Traceparent,
		History: hist}
	if n, err := strconv.ParseInt(string(dropped), 10, 32); err == nil && n > 0 {
		out.HistoryDropped = int32(n)
	}
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

func EncodeBatchStatus(s *v1.BatchStatus) []byte {
	return marshal(batchStatusJSON{
		Status:       BatchStateName(s.GetStatus()),
		LastModified: formatTime(s.GetLastModified()),
		Message:      s.GetMessage(),
	})
}

func DecodeBatchStatus(path string, data []byte) (*v1.BatchStatus, error) {
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
// it (FitStatusReport): failed_jobs is kept whole if it fits, since the
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

// FitStatusReport returns r as the node keeps it within limit bytes, and
// its JSON: the lists trimmed as described above and both totals filled.
// It returns r's lists unchanged (not copied) when they fit.
func FitStatusReport(r *v1.StatusReport, limit int) (*v1.StatusReport, []byte) {
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
	_, data := FitStatusReport(r, MaxNodeBytes)
	return data
}

func DecodeStatusReport(path string, data []byte) (*v1.StatusReport, error) {
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

// --- reading what every writer writes ---

// fields is a JSON object's members, undecoded: the submission and the
// configuration are read member by member, since Merritt's writers name
// and type some of them differently from ingestq.
type fields map[string]json.RawMessage

func decodeFields(path string, data []byte) (fields, error) {
	var f fields
	if err := unmarshal(path, data, &f); err != nil {
		return nil, err
	}
	return f, nil
}

// text reads the first of keys that is present and not empty, as text: a
// JSON string's value, a number's digits, a boolean's word (writers differ
// in what they quote). Absent and null read as "". An object or an array
// is an error naming the key.
func (f fields) text(path string, keys ...string) (string, error) {
	for _, k := range keys {
		raw, ok := f[k]
		if !ok {
			continue
		}
		raw = bytes.TrimSpace(raw)
		var s string
		switch {
		case len(raw) == 0 || string(raw) == "null":
		case raw[0] == '"':
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", &CorruptError{Path: path, Err: fmt.Errorf("%s: %w", k, err)}
			}
		case raw[0] == '{' || raw[0] == '[':
			return "", &CorruptError{Path: path, Err: fmt.Errorf("%s is not text: %s", k, Truncate(string(raw), 40))}
		default:
			s = string(raw) // a number or a boolean, as written
		}
		if s != "" {
			return s, nil
		}
	}
	return "", nil
}

// reader reads many members, keeping the first error.
type reader struct {
	path string
	f    fields
	err  error
}

func (r *reader) text(keys ...string) string {
	s, err := r.f.text(r.path, keys...)
	if r.err == nil {
		r.err = err
	}
	return s
}

// mode is the submission mode: submission_mode, or Merritt's boolean
// "update" (true: update, false: add).
func (r *reader) mode() string {
	if m := r.text("submission_mode"); m != "" {
		return m
	}
	switch strings.ToLower(r.text("update")) {
	case "true":
		return "update"
	case "false":
		return "add"
	}
	return ""
}

// jsonKeys are the JSON member names of a wire struct.
func jsonKeys(v any) map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
}

// withKeysOf returns written, a node as ingestq encodes it, with the
// members of old (the node as it was) appended that ingestq does not know
// (known): a node ingestq rewrites keeps what another writer put there.
// Keys ingestq knows are its own to write or leave out. An old node that
// is not a JSON object adds nothing.
func withKeysOf(old, written []byte, known map[string]bool) []byte {
	if len(old) == 0 || len(written) < 2 || written[len(written)-1] != '}' || !hasOtherKeys(old, known) {
		return written
	}
	return carryKeys(old, written, known)
}

// hasOtherKeys reports whether old may hold a member whose key is not in
// known, with one scan of its top level: false only for an object whose
// every key is known, which is what ingestq reads back of what it wrote,
// so that a rewrite of it costs no decoding. An escaped key, or anything
// the scan cannot follow, answers true (carryKeys decides).
func hasOtherKeys(old []byte, known map[string]bool) bool {
	i := skipSpace(old, 0)
	if i >= len(old) || old[i] != '{' {
		return true
	}
	i = skipSpace(old, i+1)
	if i < len(old) && old[i] == '}' {
		return false
	}
	for {
		if i >= len(old) || old[i] != '"' {
			return true
		}
		end := i + 1
		for end < len(old) && old[end] != '"' && old[end] != '\\' {
			end++
		}
		if end >= len(old) || old[end] != '"' || !known[string(old[i+1:end])] {
			return true
		}
		i = skipSpace(old, end+1)
		if i >= len(old) || old[i] != ':' {
			return true
		}
		if i = skipValue(old, skipSpace(old, i+1)); i < 0 {
			return true
		}
		switch i = skipSpace(old, i); {
		case i >= len(old):
			return true
		case old[i] == '}':
			return false
		case old[i] == ',':
			i = skipSpace(old, i+1)
		default:
			return true
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(b) && !strings.ContainsRune(",}] \t\n\r", rune(b[i])) {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// skipString returns the index just past the JSON string at b[i], or -1.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// RewriteJobStatus is next as the status node it replaces (old, as read)
// becomes: the keys of old that ingestq does not know carried forward,
// and kept, the bytes of the history entries next kept of old as they were
// read (KeptHistory.Entries; nil to encode them anew).
func RewriteJobStatus(old []byte, next *v1.JobStatus, kept [][]byte) []byte {
	return withKeysOf(old, encodeJobStatusReusing(next, kept), jobStatusKeys)
}

// RewriteBatchStatus is RewriteJobStatus for a batch's status.
func RewriteBatchStatus(old []byte, next *v1.BatchStatus) []byte {
	return withKeysOf(old, EncodeBatchStatus(next), batchStatusKeys)
}

// RewriteStatusReport is a batch's status-report data as the node it
// replaces (old) becomes: old's keys ingestq does not know carried forward.
func RewriteStatusReport(old, data []byte) []byte {
	return withKeysOf(old, data, statusReportKeys)
}

// RewriteData is a job's data node (identifiers, metadata, store,
// inventory) as written over old: old's keys ingestq does not know carried
// forward. Other nodes are data as it is.
func RewriteData(node string, old, data []byte) []byte {
	if known := carriedKeys[node]; known != nil {
		return withKeysOf(old, data, known)
	}
	return data
}

// CarriesKeys reports whether a rewrite of node keeps the keys other
// writers put there (RewriteData): its data as read is worth keeping.
func CarriesKeys(node string) bool { return carriedKeys[node] != nil }

// carryKeys is withKeysOf for an old node that may hold keys not in known.
func carryKeys(old, written []byte, known map[string]bool) []byte {
	dec := json.NewDecoder(bytes.NewReader(old))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return written
	}
	out := written
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return written
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return written
		}
		k, _ := tok.(string)
		if known[k] || seen[k] {
			continue
		}
		seen[k] = true
		var compact bytes.Buffer
		if err := json.Compact(&compact, v); err != nil {
			return written
		}
		if len(out) == len(written) {
			out = append([]byte(nil), written[:len(written)-1]...)
		} else {
			out = out[:len(out)-1]
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, marshal(k)...)
		out = append(out, ':')
		out = append(append(out, compact.Bytes()...), '}')
	}
	return out
}

// The keys ingestq writes in each node it rewrites: any other key a node
// holds was put there by another writer and is carried forward
// (withKeysOf).
var (
	jobStatusKeys    = jsonKeys(jobStatusJSON{})
	batchStatusKeys  = jsonKeys(batchStatusJSON{})
	statusReportKeys = jsonKeys(statusReportJSON{})
	carriedKeys      = map[string]map[string]bool{
		NodeIdentifiers: jsonKeys(identifiersJSON{}),
		NodeMetadata:    jsonKeys(metadataJSON{}),
		NodeStore:       jsonKeys(storeJSON{}),
		NodeInventory:   jsonKeys(inventoryJSON{}),
	}
)

// --- submission ---

// A submission is read in every form its writers use: ingestq's keys,
// batch_id for the uuid, and Merritt's ingest service's (profile, type with its
// package type words, update, title, creator, date, submissionDate,
// filename, objectID, localID, digestType, digestValue, size). It is
// written with ingestq's keys and the submitter's uuid as batchID, the key
// the peer library reads (docs/queue-contract.md).

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
	BatchID        string `json:"batchID,omitempty"`
	SubmissionDate string `json:"submission_date,omitempty"`
	Traceparent    string `json:"traceparent,omitempty"`
	Collection     string `json:"collection,omitempty"`
}

func EncodeSubmission(s *v1.Submission) []byte {
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

// DecodeSubmission reads a submission. When a word in it is unknown (a
// payload type, a submission mode) it returns the error and, beside it,
// everything else it read: enough for a batcher to fail the batch with a
// message and report it.
func DecodeSubmission(path string, data []byte) (*v1.Submission, error) {
	f, err := decodeFields(path, data)
	if err != nil {
		return nil, err
	}
	r := &reader{path: path, f: f}
	out := &v1.Submission{
		ProfileName: r.text("profile_name", "profile"),
		Submitter:   r.text("submitter"),
		PayloadUrl:  r.text("payload_url"),
		Metadata: &v1.Metadata{Who: r.text("erc_who", "creator"), What: r.text("erc_what", "title"),
			When: r.text("erc_when", "date"), Where: r.text("erc_where")},
		BatchId: r.text("batchID", "batch_id"),
		// Peers may omit the date; a missing one reads as unknown.
		SubmissionDate: parseTime(r.text("submission_date", "submissionDate")),
		Traceparent:    r.text("traceparent"),
		Collection:     r.text("collection"),
	}
	typ, mode := r.text("type"), r.mode()
	if r.err != nil {
		return out, r.err
	}
	out.Type, out.SubmissionMode, err = decodeKinds(path, typ, mode)
	return out, err
}

// MerrittSubmission is what a batch submitted through Merritt's ingest
// service says beyond a Submission: that service keeps the payload itself,
// a file in its queue folder (<queue>/<batchID>/<filename>), and gives the
// object's identifiers and the file's digest with it.
type MerrittSubmission struct {
	Filename    string   // "filename"
	PrimaryID   string   // "objectID"
	LocalIDs    []string // "localID", split at ';' as the peer library splits local ids
	DigestType  string   // "digestType"
	DigestValue string   // "digestValue"
	Size        int64    // "size"; -1 when not given
	// ResponseForm is the form the depositor asked responses in
	// ("responseForm"); each job carries it as its response_type.
	ResponseForm string
}

// DecodeMerrittSubmission reads Merritt's own keys of a submission; nil
// when it has none of them.
func DecodeMerrittSubmission(path string, data []byte) *MerrittSubmission {
	f, err := decodeFields(path, data)
	if err != nil {
		return nil
	}
	r := &reader{path: path, f: f}
	m := &MerrittSubmission{Filename: r.text("filename"), PrimaryID: r.text("objectID"),
		DigestType: r.text("digestType"), DigestValue: r.text("digestValue"), Size: -1,
		ResponseForm: r.text("responseForm")}
	for id := range strings.SplitSeq(r.text("localID"), ";") {
		if id = strings.TrimSpace(id); id != "" {
			m.LocalIDs = append(m.LocalIDs, id)
		}
	}
	if n, err := strconv.ParseInt(r.text("size"), 10, 64); err == nil && n >= 0 {
		m.Size = n
	}
	if m.Filename == "" && m.PrimaryID == "" && len(m.LocalIDs) == 0 && m.ResponseForm == "" {
		return nil
	}
	return m
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

// A configuration is read in the forms of ingestq, of the peer library's
// createJobConfiguration (no working_dir: see Claim.WorkingDir) and of
// Merritt's ingest service (profile, type, update, responseForm). It is
// written with ingestq's keys and jobID, the jid, where the peer library
// reads a job's id.

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
	JobID          string `json:"jobID,omitempty"`
}

func encodeConfiguration(c *v1.JobConfiguration) []byte { return EncodeJobConfiguration("", c) }

// EncodeJobConfiguration is job jid's configuration node.
func EncodeJobConfiguration(jid string, c *v1.JobConfiguration) []byte {
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
		JobID:          jid,
	})
}

// DecodeConfiguration reads a configuration; like DecodeSubmission it
// returns what it read beside the error of an unknown word.
func DecodeConfiguration(path string, data []byte) (*v1.JobConfiguration, error) {
	f, err := decodeFields(path, data)
	if err != nil {
		return nil, err
	}
	r := &reader{path: path, f: f}
	out := &v1.JobConfiguration{
		ProfileName:  r.text("profile_name", "profile"),
		Submitter:    r.text("submitter"),
		PayloadUrl:   r.text("payload_url"),
		ResponseType: r.text("response_type", "responseForm"),
		WorkingDir:   r.text("working_dir"),
		BatchId:      r.text("batch_id"),
		Traceparent:  r.text("traceparent"),
		Collection:   r.text("collection"),
	}
	if e := r.text("batch_entry"); e != "" {
		n, err := strconv.ParseInt(e, 10, 32)
		if err != nil {
			return out, &CorruptError{Path: path, Err: fmt.Errorf("batch_entry %q is not a number", Truncate(e, 40))}
		}
		out.BatchEntry = int32(n)
	}
	typ, mode := r.text("payload_type", "type"), r.mode()
	if r.err != nil {
		return out, r.err
	}
	out.PayloadType, out.SubmissionMode, err = decodeKinds(path, typ, mode)
	return out, err
}

type identifiersJSON struct {
	PrimaryID string   `json:"primary_id"`
	LocalID   []string `json:"local_id"`
}

func EncodeIdentifiers(i *v1.Identifiers) []byte {
	return marshal(identifiersJSON{PrimaryID: i.GetPrimaryId(), LocalID: append([]string{}, i.GetLocalId()...)})
}

func DecodeIdentifiers(path string, data []byte) (*v1.Identifiers, error) {
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

func EncodeMetadata(m *v1.Metadata) []byte {
	return marshal(metadataJSON{ErcWho: m.GetWho(), ErcWhat: m.GetWhat(), ErcWhen: m.GetWhen(), ErcWhere: m.GetWhere()})
}

func DecodeMetadata(path string, data []byte) (*v1.Metadata, error) {
	var w metadataJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	return &v1.Metadata{Who: w.ErcWho, What: w.ErcWhat, When: w.ErcWhen, Where: w.ErcWhere}, nil
}

// storeJSON and inventoryJSON carry "version", ingestq's own key: written
// only when known, so a node without it reads as it did before (version 0).
// The store's "delete" is a string, as the peer library writes and reads it
// (setStore, storeDelete()): the file ids an update removes, one a line,
// each ended by a newline, as Merritt's ingest service writes them and its
// storage service reads them; "" for none. A lone "true" or "false", and a
// JSON boolean, which other writers put there, list none (a "true" is kept
// in Store.delete and written back).
type storeJSON struct {
	ManifestURL string `json:"manifest_url"`
	Mode        string `json:"mode"`
	Delete      string `json:"delete"`
	Version     int32  `json:"version,omitempty"`
}

func EncodeStore(s *v1.Store) []byte {
	var del strings.Builder
	for _, f := range s.GetDeletions() {
		del.WriteString(f + "\n")
	}
	//lint:ignore SA1019 a "true" another writer put there is carried forward
	if del.Len() == 0 && s.GetDelete() {
		del.WriteString("true")
	}
	return marshal(storeJSON{ManifestURL: s.GetManifestUrl(), Mode: s.GetMode(), Delete: del.String(), Version: s.GetVersion()})
}

func DecodeStore(path string, data []byte) (*v1.Store, error) {
	var w struct {
		ManifestURL string          `json:"manifest_url"`
		Mode        string          `json:"mode"`
		Delete      json.RawMessage `json:"delete"`
		Version     int32           `json:"version"`
	}
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	s := &v1.Store{ManifestUrl: w.ManifestURL, Mode: w.Mode, Version: w.Version}
	var del string
	if json.Unmarshal(w.Delete, &del) != nil {
		del = string(w.Delete) // a JSON boolean, or nothing
	}
	word := strings.EqualFold(del, "true")
	//lint:ignore SA1019 the word "true" reads as it always did
	s.Delete = word
	if !word && !strings.EqualFold(del, "false") {
		for line := range strings.SplitSeq(strings.ReplaceAll(del, "\r\n", "\n"), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				s.Deletions = append(s.Deletions, line)
			}
		}
	}
	return s, nil
}

type inventoryJSON struct {
	ManifestURL string `json:"manifest_url"`
	Mode        string `json:"mode"`
	Version     int32  `json:"version,omitempty"`
}

func EncodeInventory(i *v1.Inventory) []byte {
	return marshal(inventoryJSON{ManifestURL: i.GetManifestUrl(), Mode: i.GetMode(), Version: i.GetVersion()})
}

func DecodeInventory(path string, data []byte) (*v1.Inventory, error) {
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

// MaxInlineFileListBytes bounds a file list kept in the job's manifest
// node. A longer one is kept in a file of the job's working folder, the
// node naming it (v1.Manifest.Kept): ZooKeeper holds every node in its
// heap, and an object of 100,000 files would list ~20 MB there, past what a
// node holds. At 8 KiB (some 40 files) a job still costs the server about
// what docs/sizing.md sizes it for.
const MaxInlineFileListBytes = 8 << 10

// FileListFitsNode says whether m's files may be kept in the job's
// manifest node (MaxInlineFileListBytes). It encodes no more of the list
// than the bound: a list of 100,000 files is refused after some 40.
func FileListFitsNode(m *v1.Manifest) bool {
	n := len(`{"files":[]}`)
	for _, f := range m.GetFiles() {
		if n += len(encodeManifestFile(f)) + 1; n > MaxInlineFileListBytes {
			return false
		}
	}
	return true
}

func encodeManifestFile(f *v1.ManifestFile) []byte {
	return marshal(manifestFileJSON{URL: f.GetUrl(), HashAlgorithm: f.GetHashAlgorithm(),
		HashValue: f.GetHashValue(), Size: f.GetSize(), LastModified: f.GetLastModified(), Name: f.GetName()})
}

// WriteFileList writes files as a kept file list holds them: the bytes
// EncodeManifest makes of a manifest of these files, written file by file,
// so that a list of 100,000 files is never in memory as one document.
func WriteFileList(w io.Writer, files []*v1.ManifestFile) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(`{"files":[`)
	for i, f := range files {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(encodeManifestFile(f))
	}
	bw.WriteString(`]}`)
	return bw.Flush()
}

// ReadFileList reads a kept file list (WriteFileList) from r, file by file:
// the document is never in memory whole. Reading stops at the list's end;
// path names it in errors.
func ReadFileList(path string, r io.Reader) (*v1.Manifest, error) {
	corrupt := func(err error) error { return &CorruptError{Path: path, Err: fmt.Errorf("invalid file list: %w", err)} }
	d := json.NewDecoder(r)
	expect := func(want json.Delim) error {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		if tok != want {
			return fmt.Errorf("%v where %v was expected", tok, want)
		}
		return nil
	}
	if err := expect('{'); err != nil {
		return nil, corrupt(err)
	}
	out := &v1.Manifest{}
	listed := false
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, corrupt(err)
		}
		switch tok {
		case "files":
			if err := expect('['); err != nil {
				return nil, corrupt(err)
			}
			for d.More() {
				var f manifestFileJSON
				if err := d.Decode(&f); err != nil {
					return nil, corrupt(err)
				}
				out.Files = append(out.Files, &v1.ManifestFile{Url: f.URL, HashAlgorithm: f.HashAlgorithm,
					HashValue: f.HashValue, Size: f.Size, LastModified: f.LastModified, Name: f.Name})
			}
			if err := expect(']'); err != nil {
				return nil, corrupt(err)
			}
			listed = true
		case "kept":
			return nil, corrupt(errors.New("a kept file list names another"))
		default:
			var skip json.RawMessage
			if err := d.Decode(&skip); err != nil {
				return nil, corrupt(err)
			}
		}
	}
	if err := expect('}'); err != nil {
		return nil, corrupt(err)
	}
	if !listed {
		return nil, corrupt(errors.New("no files key"))
	}
	return out, nil
}

type keptFileListJSON struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	Files  int64  `json:"files"`
}

type manifestJSON struct {
	Files []manifestFileJSON `json:"files"`
	Kept  *keptFileListJSON  `json:"kept,omitempty"`
}

// EncodeManifest is a job's manifest node: its files, or (m.Kept) the file
// of its working folder that lists them (WriteFileList).
func EncodeManifest(m *v1.Manifest) []byte {
	w := manifestJSON{Files: make([]manifestFileJSON, 0, len(m.GetFiles()))}
	for _, f := range m.GetFiles() {
		w.Files = append(w.Files, manifestFileJSON{URL: f.GetUrl(), HashAlgorithm: f.GetHashAlgorithm(),
			HashValue: f.GetHashValue(), Size: f.GetSize(), LastModified: f.GetLastModified(), Name: f.GetName()})
	}
	if k := m.GetKept(); k != nil {
		w.Kept = &keptFileListJSON{Name: k.GetName(), SHA256: k.GetSha256(), Bytes: k.GetBytes(), Files: k.GetFiles()}
	}
	return marshal(w)
}

// DecodeManifest reads a manifest node.
func DecodeManifest(path string, data []byte) (*v1.Manifest, error) {
	var w manifestJSON
	if err := unmarshal(path, data, &w); err != nil {
		return nil, err
	}
	out := &v1.Manifest{Files: make([]*v1.ManifestFile, 0, len(w.Files))}
	for _, f := range w.Files {
		out.Files = append(out.Files, &v1.ManifestFile{Url: f.URL, HashAlgorithm: f.HashAlgorithm,
			HashValue: f.HashValue, Size: f.Size, LastModified: f.LastModified, Name: f.Name})
	}
	if k := w.Kept; k != nil {
		if len(w.Files) > 0 {
			return nil, &CorruptError{Path: path, Err: errors.New("lists files and names a kept file list too")}
		}
		out.Kept = &v1.KeptFileList{Name: k.Name, Sha256: k.SHA256, Bytes: k.Bytes, Files: k.Files}
	}
	return out, nil
}

// --- decimal text ---

func EncodeInt(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

func DecodeInt(path string, data []byte) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, &CorruptError{Path: path, Err: fmt.Errorf("not a decimal integer: %q", Truncate(string(data), 40))}
	}
	return n, nil
}

func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
