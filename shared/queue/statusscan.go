package queue

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
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
	s := statusScanner{b: data}
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

// history reads the history member's value into st.
func (s *statusScanner) history(st *scannedStatus) bool {
	st.hist, st.raw = nil, nil
	if s.null() {
		return true
	}
	if !s.byte('[') {
		return false
	}
	st.hist = []*v1.JobStateChange{}
	reuse, n := true, 0
	var raw [][]byte
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
			var w historyJSON
			canonical, ok := s.entry(&w)
			if !ok {
				return false
			}
			h, read := historyEntry(&w)
			if read {
				st.hist = append(st.hist, h)
				canonical = canonical && canonicalEntry(&w, h)
			}
			reuse = reuse && read && canonical
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

// entry reads one history entry (an object) into w. canonical says its
// members are as appendHistoryEntry writes them: in its order, each once,
// none null, with no space between (canonicalEntry checks their values).
func (s *statusScanner) entry(w *historyJSON) (canonical, ok bool) {
	if !s.byte('{') {
		return false, false
	}
	s.spaced = false
	var seen [7]bool
	order := 0
	s.space()
	if s.byte('}') {
		return false, true
	}
	canonical = true
	for {
		key, ok := s.str()
		if !ok || !s.colon() {
			return false, false
		}
		rank := 0
		if s.null() {
			canonical = false
			switch string(key) {
			case "at", "from", "to", "worker", "in_state_ms", "message":
			default:
				return false, false
			}
		} else {
			switch string(key) {
			case "at":
				rank, ok = 1, s.strField(&w.At)
			case "from":
				rank, ok = 2, s.strField(&w.From)
			case "to":
				rank, ok = 3, s.strField(&w.To)
			case "worker":
				rank, ok = 4, s.strField(&w.Worker)
			case "in_state_ms":
				rank = 5
				w.InStateMs, ok = s.int()
			case "message":
				rank, ok = 6, s.strField(&w.Message)
			default:
				return false, false
			}
			if !ok {
				return false, false
			}
		}
		canonical = canonical && rank > order
		order = rank
		seen[rank] = true
		s.space()
		if s.byte('}') {
			break
		}
		if !s.byte(',') {
			return false, false
		}
		s.space()
	}
	// Always written: at and to. Written when not empty (or zero): the
	// others, so one present must not be.
	canonical = canonical && !s.spaced && seen[1] && seen[3] &&
		seen[2] == (w.From != "") && seen[4] == (w.Worker != "") && seen[5] == (w.InStateMs != 0) && seen[6] == (w.Message != "")
	return canonical, true
}

// canonicalEntry reports whether appendHistoryEntry writes h with the
// values w read (its members being as entry checked).
func canonicalEntry(w *historyJSON, h *v1.JobStateChange) bool {
	if w.To != JobStateName(h.GetTo()) || (w.From != "" && w.From != JobStateName(h.GetFrom())) {
		return false // a state spelt otherwise ("pending")
	}
	if h.GetInState().AsDuration().Milliseconds() != w.InStateMs {
		return false // negative, or past what a duration holds
	}
	if !plainJSONText(w.Worker) || !plainJSONText(w.Message) {
		return false
	}
	if h.GetAt() == nil {
		return w.At == ""
	}
	var buf [40]byte
	return string(h.GetAt().AsTime().UTC().AppendFormat(buf[:0], historyTimeLayout)) == w.At
}

// plainJSONText reports whether appendJSONString writes s as it is,
// between quotes (scanned strings hold no quote, backslash or control
// character, and are valid UTF-8): it escapes U+2028 and U+2029.
func plainJSONText(s string) bool {
	return !bytes.Contains([]byte(s), []byte("\u2028")) && !bytes.Contains([]byte(s), []byte("\u2029"))
}

// statusScanner reads the JSON of a job status, a byte at a time.
type statusScanner struct {
	b      []byte
	i      int
	spaced bool // space was skipped (since the caller cleared it)
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

// keptEntries are the bytes, as read in data (the status old was read
// from), of the entries of next's history that recordChange kept of old's
// (the same entries, in a row): encodeJobStatusReusing writes them
// without encoding them anew. nil where they cannot be had.
func keptEntries(data []byte, old, next *v1.JobStatus) [][]byte {
	oh, nh := old.GetHistory(), next.GetHistory()
	if len(oh) == 0 || len(nh) == 0 {
		return nil
	}
	first := -1
	for i, h := range oh {
		if h == nh[0] {
			first = i
			break
		}
	}
	if first < 0 {
		return nil
	}
	st, ok := scanStatus(data)
	if !ok || len(st.raw) != len(oh) {
		return nil
	}
	n := 0
	for n < len(nh) && first+n < len(oh) && nh[n] == oh[first+n] {
		n++
	}
	return st.raw[first : first+n]
}
