package queue

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A job's history rides in its status node (keys "history" and
// "history_dropped", ingestq's own; peers carry keys they do not know): the
// commit that moves the job already rewrites that node, so keeping the
// history costs bytes, not requests.

// MaxHistory is how many state changes a job's status keeps; older ones
// are dropped and counted in history_dropped.
const MaxHistory = 64

// maxHistoryMessage bounds the message an entry keeps: the whole message
// is the status's own while the job is in that state.
const maxHistoryMessage = 256

// historyTimeLayout keeps milliseconds: the time a job spends in a state is
// often less than a second.
const historyTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Worker names of changes made by no stage replica.
const (
	// WorkerOperator marks a change an operator asked for (AdminService).
	WorkerOperator = "operator"
	// WorkerFsck marks a change fsck made mending a job.
	WorkerFsck = "fsck"
)

type historyJSON struct {
	At        string `json:"at"`
	From      string `json:"from,omitempty"`
	To        string `json:"to"`
	Worker    string `json:"worker,omitempty"`
	InStateMs int64  `json:"in_state_ms,omitempty"`
	Message   string `json:"message,omitempty"`
}

// appendHistoryEntry appends h as its historyJSON reads, as marshal
// writes it (EncodeJobStatus).
func appendHistoryEntry(b []byte, h *v1.JobStateChange) []byte {
	b = append(b, `{"at":"`...)
	if h.GetAt() != nil {
		b = h.GetAt().AsTime().UTC().AppendFormat(b, historyTimeLayout)
	}
	b = append(b, '"')
	if h.GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
		b = append(b, `,"from":`...)
		b = appendJSONString(b, JobStateName(h.GetFrom()))
	}
	b = append(b, `,"to":`...)
	b = appendJSONString(b, JobStateName(h.GetTo()))
	if w := h.GetWorker(); w != "" {
		b = append(b, `,"worker":`...)
		b = appendJSONString(b, w)
	}
	if ms := h.GetInState().AsDuration().Milliseconds(); ms != 0 {
		b = append(b, `,"in_state_ms":`...)
		b = strconv.AppendInt(b, ms, 10)
	}
	if m := h.GetMessage(); m != "" {
		b = append(b, `,"message":`...)
		b = appendJSONString(b, m)
	}
	return append(b, '}')
}

// decodeHistory reads a status's history leniently: an entry another
// writer garbled is skipped, a history that is not a list reads as none.
// A job's history never makes its status unreadable.
func decodeHistory(raw json.RawMessage) []*v1.JobStateChange {
	if len(raw) == 0 {
		return nil
	}
	var ws []json.RawMessage
	if json.Unmarshal(raw, &ws) != nil {
		return nil
	}
	out := make([]*v1.JobStateChange, 0, len(ws))
	for _, r := range ws {
		var w historyJSON
		if json.Unmarshal(r, &w) != nil {
			continue
		}
		if h, ok := historyEntry(&w); ok {
			out = append(out, h)
		}
	}
	return out
}

// historyEntry is the change an entry read says, if its states read.
func historyEntry(w *historyJSON) (*v1.JobStateChange, bool) {
	to, err := ParseJobState(w.To)
	if err != nil {
		return nil, false
	}
	h := &v1.JobStateChange{At: parseTime(w.At), To: to, Worker: w.Worker, Message: w.Message}
	if w.From != "" {
		if h.From, err = ParseJobState(w.From); err != nil {
			return nil, false
		}
	}
	if w.InStateMs > 0 {
		h.InState = durationpb.New(time.Duration(w.InStateMs) * time.Millisecond)
	}
	return h, true
}

// RecordChange appends to next (the status about to be written) the change
// from old (the status read; nil for a new job) to next, made by worker at
// now, and drops what passes MaxHistory. The time in the state left counts
// from the last entry when it says the job entered that state, else from
// old's last_modified (a peer moved the job meanwhile). A rewrite that
// leaves the job in its state with the message of the last entry (a step
// retried again and again) adds nothing: it would push out what matters.
// It returns the entry added, nil if none.
func RecordChange(old, next *v1.JobStatus, worker string, now time.Time) *v1.JobStateChange {
	hist := old.GetHistory()
	next.HistoryDropped = old.GetHistoryDropped()
	from := old.GetStatus()
	msg := truncateUTF8(next.GetMessage(), maxHistoryMessage)
	var last *v1.JobStateChange
	if len(hist) > 0 {
		last = hist[len(hist)-1]
	}
	if old != nil && from == next.GetStatus() && last != nil && last.GetTo() == from && last.GetMessage() == msg {
		next.History = hist
		return nil
	}
	h := &v1.JobStateChange{At: timestamppb.New(now), From: from, To: next.GetStatus(), Worker: worker, Message: msg}
	if old != nil {
		since := old.GetLastModified()
		if last != nil && last.GetTo() == from && last.GetAt() != nil {
			since = last.GetAt()
		}
		if since != nil {
			// Clocks of two writers may disagree: never less than nothing.
			h.InState = durationpb.New(max(now.Sub(since.AsTime()), 0).Truncate(time.Millisecond))
		}
	}
	out := make([]*v1.JobStateChange, 0, min(len(hist)+1, MaxHistory))
	if drop := len(hist) + 1 - MaxHistory; drop > 0 {
		hist = hist[drop:]
		next.HistoryDropped += int32(drop)
	}
	// The entries kept are shared with old, not copied: the queue never
	// changes an entry once made, and a claim's old status is replaced by
	// next once written.
	out = append(out, hist...)
	next.History = append(out, h)
	return h
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// FailedStage is the stage a failed job failed in: the state it left for
// Failed in its last such change, or its last successful state's next one
// when its history does not say (UNSPECIFIED when neither does).
func FailedStage(st *v1.JobStatus) JobState {
	hs := st.GetHistory()
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].GetTo() == Failed && hs[i].GetFrom() != v1.JobState_JOB_STATE_UNSPECIFIED {
			return hs[i].GetFrom()
		}
	}
	if ls := st.GetLastSuccessfulStatus(); ls != v1.JobState_JOB_STATE_UNSPECIFIED {
		return ResumeState(ls)
	}
	return v1.JobState_JOB_STATE_UNSPECIFIED
}

// StateChange is a job's state change a session committed.
type StateChange struct {
	JobID string
	// Change is the history entry written.
	Change *v1.JobStateChange
	// Created is when the job was created, zero when its history no longer
	// says (or never did: a peer created it).
	Created time.Time
}

// NewStateChange is the change h to job jid, whose status is now st.
func NewStateChange(jid string, st *v1.JobStatus, h *v1.JobStateChange) StateChange {
	sc := StateChange{JobID: jid, Change: h}
	if hs := st.GetHistory(); st.GetHistoryDropped() == 0 && len(hs) > 0 && hs[0].GetFrom() == v1.JobState_JOB_STATE_UNSPECIFIED && hs[0].GetAt() != nil {
		sc.Created = hs[0].GetAt().AsTime()
	}
	return sc
}
