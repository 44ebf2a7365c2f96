package queue

import (
	"bytes"
	"strings"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The reference encoding of a job status: through its wire struct and the
// JSON encoder, as the spec's keys and types say. EncodeJobStatus, which
// writes without reflection, must write the same bytes.

// encodeJobStatusWire is EncodeJobStatus through the wire struct and the
// JSON encoder: what EncodeJobStatus must write, byte for byte.
func encodeJobStatusWire(s *v1.JobStatus) []byte {
	w := jobStatusJSON{
		Status:         JobStateName(s.GetStatus()),
		LastModified:   formatTime(s.GetLastModified()),
		Message:        s.GetMessage(),
		RetryCount:     s.GetRetryCount(),
		Traceparent:    s.GetTraceparent(),
		HistoryDropped: s.GetHistoryDropped(),
	}
	if h := encodeHistory(s.GetHistory()); h != nil {
		w.History = h
	}
	if ls := s.GetLastSuccessfulStatus(); ls != v1.JobState_JOB_STATE_UNSPECIFIED {
		n := JobStateName(ls)
		w.LastSuccessfulStatus = &n
	}
	return marshal(w)
}

func encodeHistory(hs []*v1.JobStateChange) []historyJSON {
	if len(hs) == 0 {
		return nil
	}
	out := make([]historyJSON, len(hs))
	for i, h := range hs {
		w := historyJSON{To: JobStateName(h.GetTo()), Worker: h.GetWorker(), Message: h.GetMessage(),
			InStateMs: h.GetInState().AsDuration().Milliseconds()}
		if h.GetAt() != nil {
			w.At = h.GetAt().AsTime().UTC().Format(historyTimeLayout)
		}
		if h.GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
			w.From = JobStateName(h.GetFrom())
		}
		out[i] = w
	}
	return out
}

// TestJobStatusEncodingMatchesTheWireStruct: statuses with every field set
// or left out, and text that needs escaping, are written byte for byte as
// the wire struct writes them.
func TestJobStatusEncodingMatchesTheWireStruct(t *testing.T) {
	at := time.Date(2026, 11, 27, 2, 6, 47, 509e6, time.UTC)
	texts := []string{"", "plain", `quote " and \ backslash`, "tab\tnew\nline\rcr\bbs\fff", "\x00\x01\x1f\x7f",
		"<html> & 'amp'", "line\u2028para\u2029", "bad \xff\xfe utf-8 \xe2\x82", "ünïcødé ✓ 𝄞", strings.Repeat("é", 300)}
	var statuses []*v1.JobStatus
	for _, text := range texts {
		statuses = append(statuses,
			&v1.JobStatus{Status: Pending, Message: text},
			&v1.JobStatus{Status: Failed, LastModified: timestamppb.New(at), Message: text, LastSuccessfulStatus: Downloading,
				RetryCount: -3, Traceparent: text, HistoryDropped: 7, History: []*v1.JobStateChange{
					{At: timestamppb.New(at), To: Pending, Worker: text},
					{To: Estimating, From: Pending, Message: text, InState: durationpb.New(1500 * time.Millisecond)},
					{At: timestamppb.New(at.Add(-time.Hour)), To: Failed, From: Downloading, Worker: "w", Message: text,
						InState: durationpb.New(-2 * time.Second)},
					{At: timestamppb.New(time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)), To: JobState(99)},
				}},
			&v1.JobStatus{Status: JobState(42), LastSuccessfulStatus: JobState(43), RetryCount: 1 << 30, HistoryDropped: -1})
	}
	st := &v1.JobStatus{Status: Pending}
	RecordChange(nil, st, "w", at)
	for _, to := range []JobState{Estimating, Provisioning, Downloading, Processing, Storing, Recording, Notify, Completed} {
		next := &v1.JobStatus{Status: to, LastModified: NowStamp(), LastSuccessfulStatus: st.GetStatus()}
		at = at.Add(7 * time.Millisecond)
		RecordChange(st, next, "stage-w1", at)
		st = next
	}
	statuses = append(statuses, st)
	for _, s := range statuses {
		if got, want := EncodeJobStatus(s), encodeJobStatusWire(s); !bytes.Equal(got, want) {
			t.Errorf("status %v\nwritten as %s\nwant       %s", s, got, want)
		}
	}
}

// FuzzJobStatusCodecMatchesTheWireStruct: whatever a status node holds,
// the one-pass reading of a well-formed status reads what the lenient one
// does (or both refuse it), and what it read is written as the wire struct
// writes it.
func FuzzJobStatusCodecMatchesTheWireStruct(f *testing.F) {
	for _, seed := range []string{
		`{"status":"Pending","last_modified":"2026-11-22 03:51:07 +0000","message":"","last_successful_status":null,"retry_count":0}`,
		`{"status":"Notify","last_modified":"2026-11-27 02:06:47 +0000","message":"","last_successful_status":"Recording","retry_count":0,"history":[{"at":"2026-11-27T02:06:47.509Z","to":"Pending","worker":"vm-1"},{"at":"2026-11-27T02:06:47.523Z","from":"Pending","to":"Estimating","worker":"vm-1","in_state_ms":14}],"history_dropped":3}`,
		`{"status":"Notify","history":[{"at":"2026-11-27T02:06:47.509Z","to":"Frozen"},{"to":"Pending","from":"nowhere"},null,{"to":"held"}]}`,
		`{"status":"Notify","history":[{"at":5,"to":"Pending"},{"to":"Estimating","in_state_ms":1.5},"x",{"to":"Failed","message":"m"}]}`,
		`{"status":"Notify","history":{"to":"Pending"},"history_dropped":"4"}`,
		`{"status":"Notify","history":null,"history_dropped":null}`,
		`{"status":"Notify","history":[],"history_dropped":-2}`,
		`{"status":"Notify","Status":"Pending","STATUS":"Failed","retry_count":"1"}`,
		`{"status":"Pending","last_modified":"2026-11-22 03:51:07 +0000","mess`,
		`{"status":"Pending"} trailing`,
		`{"status":"Pending","peer_key":{"a":[1,2,"]"]},"history":[{"to":"Pending","x":"y"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, err := DecodeJobStatus("/n", data)
		lenient, lerr := decodeJobStatusLenient("/n", data)
		if (err == nil) != (lerr == nil) || (err != nil && err.Error() != lerr.Error()) {
			t.Fatalf("%q: read with error %v, leniently with %v", data, err, lerr)
		}
		if err != nil {
			return
		}
		if !proto.Equal(fast, lenient) {
			t.Fatalf("%q: read as %v, leniently as %v", data, fast, lenient)
		}
		if typed, err := decodeJobStatusTyped("/n", data); err != nil || !proto.Equal(typed, lenient) {
			t.Fatalf("%q: decoded as %v (%v), leniently as %v", data, typed, err, lenient)
		}
		if got, want := EncodeJobStatus(fast), encodeJobStatusWire(fast); !bytes.Equal(got, want) {
			t.Fatalf("%v: written as %s, want %s", fast, got, want)
		}
	})
}

// FuzzJSONStringMatchesTheEncoder: any text is escaped as the JSON
// encoder escapes it (without HTML escaping).
func FuzzJSONStringMatchesTheEncoder(f *testing.F) {
	for _, seed := range []string{"", "a\"b\\c", "\x00\t\n\x1f\x7f", "\u2028\u2029", "\xff\xe2\x82", "<&>", "𝄞é"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := appendJSONString(nil, s), marshal(s); !bytes.Equal(got, want) {
			t.Fatalf("%q written as %s, want %s", s, got, want)
		}
	})
}

// FuzzARewriteSkipsOnlyNodesWithNothingToCarry: the scan that spares a
// rewrite the decoding of the node it replaces (hasOtherKeys) never skips
// a node from which carryKeys would carry a key.
func FuzzARewriteSkipsOnlyNodesWithNothingToCarry(f *testing.F) {
	for _, seed := range []string{
		`{"status":"Pending","last_modified":"","message":"m","last_successful_status":null,"retry_count":0}`,
		`{"status":"Pending","history":[{"to":"Pending","x":"}"}],"node":9501}`,
		` { "status" : "a\"}" , "message" : {"k":["]",{"x":1}]} , "peer" : true } `,
		`{"st\u0061tus":"Pending"}`,
		`{"status":"Pending","Status":"Failed"}`,
		`{"status":tru,"peer":1}`,
		`{"status":"Pending"}{"peer":1}`,
		`{"retry_count":1e5,"history_dropped":-0.5,"message":null}`,
		`{}`, `[]`, `"x"`, `{"status"`, `{"a":1}`,
	} {
		f.Add([]byte(seed))
	}
	written := EncodeJobStatus(&v1.JobStatus{Status: Estimating, Message: "m"})
	f.Fuzz(func(t *testing.T, old []byte) {
		if !hasOtherKeys(old, jobStatusKeys) {
			if got := carryKeys(old, written, jobStatusKeys); !bytes.Equal(got, written) {
				t.Fatalf("%q: nothing to carry, said the scan, but carryKeys wrote %s", old, got)
			}
		}
		if got, want := withKeysOf(old, written, jobStatusKeys), carryKeys(old, written, jobStatusKeys); !bytes.Equal(got, want) {
			t.Fatalf("%q: rewritten as %s, want %s", old, got, want)
		}
	})
}

// FuzzJobStatusScanReadsWhatTheDecoderReads: what the scan of a status
// reads, the lenient decoder reads the same, and the entries it keeps as
// read are what encoding them writes, so that a commit that writes them
// back writes the bytes it would have encoded.
func FuzzJobStatusScanReadsWhatTheDecoderReads(f *testing.F) {
	for _, seed := range []string{
		string(benchStatus()),
		`{"status":"Notify","history":[{"at":"2026-11-27T02:06:47.509Z","to":"Pending","worker":"vm-1"},{"at":"2026-11-27T02:06:47.523Z","from":"Pending","to":"Estimating","worker":"vm-1","in_state_ms":14,"message":"m"}],"history_dropped":3}`,
		`{"status":"Notify","history":[{"at":"2026-11-27T02:06:47.509+01:00","to":"pending"},{"at":"2026-11-27T02:06:47Z","to":"Pending"},{ "at":"","to":"Pending"}]}`,
		`{"status":"Notify","history":[{"to":"Pending","at":""},{"at":"","from":"","to":"Held"},{"at":"","to":"Held","in_state_ms":0},{"at":"","to":"Held","worker":""}]}`,
		`{"status":"Notify","history":[{"at":"","to":"Held","in_state_ms":-5},{"at":"","to":"Held","in_state_ms":99999999999999999},{"at":"","to":"Held","message":"a b"}]}`,
		`{"status":"Notify","history":[null,{},{"at":null,"to":"Held"},{"at":"","to":"Held","to":"Failed"}],"history_dropped":null}`,
		`{"status":"Notify","history":[{"at":"","to":"Held"}],"history":null,"retry_count":-0,"last_successful_status":"Held","last_successful_status":null}`,
		`{"status":"Notify","history":[{"at":"","to":"Held"},{"at": "","to":"Held"},{"at":"","to":"Held" }]}`,
		`{"status":"Notify","retry_count":2147483648}`, `{"status":"Notify","retry_count":1.0}`, `{"status":"Notify","history_dropped":99999999999}`,
		`{"status":"Notify","message":"tab\tin"}`, `{"status":"Notify","message":"bad \xff"}`, `{"status":"Notify"} x`, ` {"status" : "Notify" } `,
		`{"status":"Notify","history":[{"at":"0000-01-01T00:00:00.000Z","to":"Held"},{"at":"2026-02-30T00:00:00.000Z","to":"Held"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, ok := scanStatus(data)
		if !ok {
			return
		}
		scanned, err := jobStatusOf("/n", &st.w, st.hist, st.dropped)
		lenient, lerr := decodeJobStatusLenient("/n", data)
		if (err == nil) != (lerr == nil) || (err != nil && err.Error() != lerr.Error()) {
			t.Fatalf("%q: scanned with error %v, decoded with %v", data, err, lerr)
		}
		if err != nil {
			return
		}
		if !proto.Equal(scanned, lenient) {
			t.Fatalf("%q: scanned as %v, decoded as %v", data, scanned, lenient)
		}
		if st.raw == nil {
			return
		}
		if len(st.raw) != len(st.hist) {
			t.Fatalf("%q: %d entries kept as read of %d", data, len(st.raw), len(st.hist))
		}
		for i, h := range st.hist {
			if want := appendHistoryEntry(nil, h); !bytes.Equal(st.raw[i], want) {
				t.Fatalf("%q: entry %d kept as %s, encodes as %s", data, i, st.raw[i], want)
			}
		}
		if got, want := encodeJobStatusReusing(scanned, st.raw), EncodeJobStatus(scanned); !bytes.Equal(got, want) {
			t.Fatalf("%q: written as %s, want %s", data, got, want)
		}
	})
}
