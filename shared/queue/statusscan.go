package queue

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A job status is read by every claim and rewritten by every commit, with
// its history (up to MaxHistory entries, most of a status's bytes). What
// ingestq writes is read here without the JSON decoder, and the entries a
// commit keeps are written back as they were read, not encoded anew, when
// encoding them would write those very bytes. Anything this scan does not
// follow (another writer's keys, escapes in a string, a number in another
// form) is left to the decoder (decodeJobStatusTyped), which reads the same;
// FuzzJobStatusScanReadsWhatTheDecoderReads holds the two together.

// scannedStatus is a job status as scanStatus read it.
type scannedStatus struct {
	w       jobStatusJSON
	dropped json.RawMessage // the history_dropped member as read
	hist    []*v1.JobStateChange
	// raw are the bytes of each entry of hist as read, when encoding it
	// (appendHistoryEntry) would write them exactly; nil when some entry
	// read is not in hist (skipped as unreadable) or is not so written.
	raw [][]byte
}

// scanStatus reads data as ingestq writes a job status. ok is false for
// anything it does not follow: the decoder must read it.
func scanStatus(data []byte) (st scannedStatus, ok bool) {
	return statusScanner{b: data}.scan()
}

func (s statusScanner) scan() (st scannedStatus, ok bool) {
	data := s.b
	s.space()
	if !s.byte('{') {
		return st, false
	}
	s.space()
	if !s.byte('}') {
		for {
			key, ok := s.str()
			if !ok || !s.colon() {
				return st, false
			}
			switch string(key) {
			case "status":
				ok = s.strField(&st.w.Status)
			case "last_modified":
				ok = s.strField(&st.w.LastModified)
			case "message":
				ok = s.strField(&st.w.Message)
			case "traceparent":
				ok = s.strField(&st.w.Traceparent)
			case "last_successful_status":
				if s.null() {
					st.w.LastSuccessfulStatus = nil
				} else {
					var v []byte
					if v, ok = s.str(); ok {
						ls := string(v)
						st.w.LastSuccessfulStatus = &ls
					}
				}
			case "retry_count":
				if !s.null() {
					var n int64
					if n, ok = s.int(); ok && int64(int32(n)) == n {
						st.w.RetryCount = int32(n)
					} else {
						ok = false
					}
				}
			case "history_dropped":
				start := s.i
				if !s.null() {
					_, ok = s.int()
				}
				st.dropped = data[start:s.i]
			case "history":
				ok = s.history(&st)
			default:
				ok = false
			}
			if !ok {
				return st, false
			}
			s.space()
			if s.byte('}') {
				break
			}
			if !s.byte(',') {
				return st, false
			}
			s.space()
		}
	}
	s.space()
	return st, s.i == len(s.b)
}

// history reads the history member's value into st; with spansOnly it
// builds no entry, only st.raw.
func (s *statusScanner) history(st *scannedStatus) bool {
	st.hist, st.raw = nil, nil
	if s.null() {
		return true
	}
	if !s.byte('[') {
		return false
	}
	if !s.spansOnly {
		st.hist = []*v1.JobStateChange{}
	}
	reuse, n := true, 0
	var raw [][]byte
	var worker string // the last entry's, shared by the next that names it too
	s.space()
	if s.byte(']') {
		return true
	}
	for {
		n++
		start := s.i
		if s.null() {
			reuse = false // read as no entry
		} else {
			var e rawEntry
			if !s.entry(&e) {
				return false
			}
			canonical := e.canonical()
			if !s.spansOnly {
				h, read := e.change(&worker)
				if read {
					st.hist = append(st.hist, h)
				}
				canonical = canonical && read
			}
			reuse = reuse && canonical
			if reuse {
				raw = append(raw, s.b[start:s.i])
			}
		}
		s.space()
		if s.byte(']') {
			break
		}
		if !s.byte(',') {
			return false
		}
		s.space()
	}
	if reuse && len(raw) == n {
		st.raw = raw
	}
	return true
}

// rawEntry is one history entry as scanned: each member's bytes (nil when
// absent; a null leaves a member as it was, as the decoder does), and
// whether its members are in the order and form appendHistoryEntry writes.
type rawEntry struct {
	at, from, to, worker, message []byte
	inStateMs                     int64
	seen                          [7]bool // by rank: at, from, to, worker, in_state_ms, message
	ordered                       bool    // each member once, in order, none null, no space between
}

// entry reads one history entry (an object) into e.
func (s *statusScanner) entry(e *rawEntry) bool {
	if !s.byte('{') {
		return false
	}
	s.spaced = false
	order := 0
	s.space()
	if s.byte('}') {
		return true
	}
	e.ordered = true
	for {
		key, ok := s.str()
		if !ok || !s.colon() {
			return false
		}
		rank := 0
		switch string(key) {
		case "at":
			rank = 1
		case "from":
			rank = 2
		case "to":
			rank = 3
		case "worker":
			rank = 4
		case "in_state_ms":
			rank = 5
		case "message":
			rank = 6
		default:
			return false
		}
		if s.null() {
			e.ordered = false
		} else {
			var v []byte
			switch rank {
			case 5:
				e.inStateMs, ok = s.int()
			default:
				v, ok = s.str()
			}
			if !ok {
				return false
			}
			switch rank {
			case 1:
				e.at = v
			case 2:
				e.from = v
			case 3:
				e.to = v
			case 4:
				e.worker = v
			case 6:
				e.message = v
			}
			e.ordered = e.ordered && rank > order
			order = rank
			e.seen[rank] = true
		}
		s.space()
		if s.byte('}') {
			break
		}
		if !s.byte(',') {
			return false
		}
		s.space()
	}
	e.ordered = e.ordered && !s.spaced
	return true
}

// change is the change e says, if its states read (historyEntry). worker
// is the worker of the entry before, whose string e shares if it names
// the same.
func (e *rawEntry) change(worker *string) (*v1.JobStateChange, bool) {
	to, err := stateNamed(e.to)
	if err != nil {
		return nil, false
	}
	h := &v1.JobStateChange{To: to, Message: string(e.message)}
	if t, ok := historyTime(e.at); ok {
		h.At = timestamppb.New(t)
	} else {
		h.At = parseTime(string(e.at))
	}
	if len(e.from) > 0 {
		if h.From, err = stateNamed(e.from); err != nil {
			return nil, false
		}
	}
	if string(e.worker) != *worker {
		*worker = string(e.worker)
	}
	h.Worker = *worker
	if e.inStateMs > 0 {
		h.InState = durationpb.New(time.Duration(e.inStateMs) * time.Millisecond)
	}
	return h, true
}

// stateNamed is ParseJobState of b.
func stateNamed(b []byte) (JobState, error) {
	if st, ok := jobStatesByName[string(b)]; ok {
		return st, nil
	}
	return ParseJobState(string(b))
}

// canonical reports whether appendHistoryEntry writes e's change as e
// reads: at and to always there, from, worker, in_state_ms and message
// only when not empty (or zero), in its order, states in their spelling,
// the time in its layout, text with nothing it escapes.
func (e *rawEntry) canonical() bool {
	if !e.ordered || !e.seen[1] || !e.seen[3] || e.seen[2] != (len(e.from) > 0) || e.seen[4] != (len(e.worker) > 0) ||
		e.seen[5] != (e.inStateMs != 0) || e.seen[6] != (len(e.message) > 0) {
		return false
	}
	if _, ok := jobStatesByName[string(e.to)]; !ok {
		return false
	}
	if _, ok := jobStatesByName[string(e.from)]; len(e.from) > 0 && !ok {
		return false
	}
	if e.inStateMs < 0 || e.inStateMs > math.MaxInt64/int64(time.Millisecond) {
		return false // read as none, or past what a duration holds
	}
	if _, ok := historyTime(e.at); !ok && len(e.at) > 0 {
		return false
	}
	return plainJSONText(e.worker) && plainJSONText(e.message)
}

// historyTime reads a time in historyTimeLayout in UTC
// ("2026-11-27T02:06:47.509Z"), as time.Parse reads it: the form every
// history entry ingestq writes has, which it writes again as it was.
func historyTime(b []byte) (time.Time, bool) {
	if len(b) != len("2006-01-02T15:04:05.000Z") || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' ||
		b[16] != ':' || b[19] != '.' || b[23] != 'Z' {
		return time.Time{}, false
	}
	num := func(from, to int) int {
		n := 0
		for _, c := range b[from:to] {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, mo, d, h, mi, sec, ms := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19), num(20, 23)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 || ms < 0 {
		return time.Time{}, false
	}
	if d > time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day() {
		return time.Time{}, false
	}
	return time.Date(y, time.Month(mo), d, h, mi, sec, ms*int(time.Millisecond), time.UTC), true
}

// plainJSONText reports whether appendJSONString writes s as it is,
// between quotes (scanned strings hold no quote, backslash or control
// character, and are valid UTF-8): it escapes U+2028 and U+2029.
func plainJSONText(s []byte) bool {
	return !bytes.Contains(s, []byte("\u2028")) && !bytes.Contains(s, []byte("\u2029"))
}

// statusScanner reads the JSON of a job status, a byte at a time.
type statusScanner struct {
	b         []byte
	i         int
	spaced    bool // space was skipped (since the caller cleared it)
	spansOnly bool // history: find the entries' bytes, build no change
}

func (s *statusScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
		s.spaced = true
	}
}

// byte consumes c if it comes next.
func (s *statusScanner) byte(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *statusScanner) colon() bool {
	s.space()
	if !s.byte(':') {
		return false
	}
	s.space()
	return true
}

// null consumes the literal null if it comes next.
func (s *statusScanner) null() bool {
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) && (s.i+4 == len(s.b) || !isLetterOrDigit(s.b[s.i+4])) {
		s.i += 4
		return true
	}
	return false
}

func isLetterOrDigit(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// str reads a string that holds no escape and no control character, and
// is valid UTF-8 (what the decoder would read as its very bytes).
func (s *statusScanner) str() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, utf8.Valid(v)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// strField reads a string or null (which leaves *dst as it was, as the
// decoder does) into *dst.
func (s *statusScanner) strField(dst *string) bool {
	if s.null() {
		return true
	}
	v, ok := s.str()
	if ok {
		*dst = string(v)
	}
	return ok
}

// int reads an integer in JSON's form, without fraction or exponent.
func (s *statusScanner) int() (int64, bool) {
	start := s.i
	s.byte('-')
	switch {
	case s.byte('0'):
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E' || (s.b[s.i] >= '0' && s.b[s.i] <= '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return n, err == nil
}

// DecodeJobStatusKeeping is DecodeJobStatus, and the bytes of its
// history's entries as read where scanStatus keeps them (scannedStatus.raw).
func DecodeJobStatusKeeping(path string, data []byte) (*v1.JobStatus, KeptHistory, error) {
	if st, ok := scanStatus(data); ok {
		out, err := jobStatusOf(path, &st.w, st.hist, st.dropped)
		return out, KeptHistory{of: out, raw: st.raw}, err
	}
	out, err := decodeJobStatusTyped(path, data)
	return out, KeptHistory{}, err
}

// KeptHistory is a claim's status's history entries as read: raw, the
// bytes of the entries of of (the status read), as scannedStatus.raw.
type KeptHistory struct {
	of  *v1.JobStatus
	raw [][]byte
}

// entries is keptEntries of the status old, read from data, with the
// entries scanned with the claim when old is the status they came with.
func (k KeptHistory) Entries(data []byte, old, next *v1.JobStatus) [][]byte {
	if k.of == nil || k.of != old || len(k.raw) != len(old.GetHistory()) {
		return keptEntries(data, old, next)
	}
	return keptOf(k.raw, old, next)
}

// keptEntries are the bytes, as read in data (the status old was read
// from), of the entries of next's history that RecordChange kept of old's
// (the same entries, in a row): encodeJobStatusReusing writes them
// without encoding them anew. nil where they cannot be had.
func keptEntries(data []byte, old, next *v1.JobStatus) [][]byte {
	// Scan only when next kept some of old's entries.
	if keptFrom(old, next) < 0 {
		return nil
	}
	st, ok := statusScanner{b: data, spansOnly: true}.scan()
	if !ok || len(st.raw) != len(old.GetHistory()) {
		return nil
	}
	return keptOf(st.raw, old, next)
}

// keptOf is keptEntries with raw the bytes of old's entries.
func keptOf(raw [][]byte, old, next *v1.JobStatus) [][]byte {
	oh, nh := old.GetHistory(), next.GetHistory()
	first := keptFrom(old, next)
	if first < 0 || len(raw) != len(oh) {
		return nil
	}
	n := 0
	for n < len(nh) && first+n < len(oh) && nh[n] == oh[first+n] {
		n++
	}
	return raw[first : first+n]
}

// keptFrom is where in old's history the entries next kept of it begin
// (next's first entry, the same one), or -1 when next kept none.
func keptFrom(old, next *v1.JobStatus) int {
	nh := next.GetHistory()
	if len(nh) == 0 {
		return -1
	}
	for i, h := range old.GetHistory() {
		if h == nh[0] {
			return i
		}
	}
	return -1
}
