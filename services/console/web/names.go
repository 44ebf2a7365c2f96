package web

import (
	"fmt"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// The names the console shows are those of the proto enums, spelt as the
// queue spells them: JOB_STATE_PENDING is "Pending",
// BATCH_STATE_UPDATE_REPORTING "UpdateReporting", PAYLOAD_TYPE_FILE "file".

// camel joins the words of an enum value's name after prefix, each
// capitalised: "UPDATE_REPORTING" is "UpdateReporting".
func camel(name, prefix string) string {
	var b strings.Builder
	for w := range strings.SplitSeq(strings.TrimPrefix(name, prefix), "_") {
		if w != "" {
			b.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
	}
	return b.String()
}

// jobStates are the job states in pipeline order (the enum's).
func jobStates() []v1.JobState {
	var out []v1.JobState
	for n := int32(1); ; n++ {
		if _, ok := v1.JobState_name[n]; !ok {
			return out
		}
		out = append(out, v1.JobState(n))
	}
}

// batchStates are the batch states in the enum's order.
func batchStates() []v1.BatchState {
	var out []v1.BatchState
	for n := int32(1); ; n++ {
		if _, ok := v1.BatchState_name[n]; !ok {
			return out
		}
		out = append(out, v1.BatchState(n))
	}
}

// jobStateName is a job state's name ("Pending").
func jobStateName(s v1.JobState) string { return camel(s.String(), "JOB_STATE_") }

// batchStateName is a batch state's name ("UpdateReporting").
func batchStateName(s v1.BatchState) string { return camel(s.String(), "BATCH_STATE_") }

// payloadTypeName is a payload type as depositors write it
// ("manifest_of_manifests"); "" when unset.
func payloadTypeName(t v1.PayloadType) string {
	if t == v1.PayloadType_PAYLOAD_TYPE_UNSPECIFIED {
		return ""
	}
	return strings.ToLower(strings.TrimPrefix(t.String(), "PAYLOAD_TYPE_"))
}

// parseJobState reads a job state as shown or as typed: "Pending",
// "pending" and "JOB_STATE_PENDING" all work.
func parseJobState(s string) (v1.JobState, error) {
	for _, st := range jobStates() {
		if strings.EqualFold(s, jobStateName(st)) || s == st.String() {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown job state %q", s)
}

// parseBatchState reads a batch state: "UpdateReporting",
// "update-reporting" and "BATCH_STATE_UPDATE_REPORTING" all work.
func parseBatchState(s string) (v1.BatchState, error) {
	norm := strings.ReplaceAll(s, "-", "")
	for _, st := range batchStates() {
		if strings.EqualFold(norm, batchStateName(st)) || s == st.String() {
			return st, nil
		}
	}
	return 0, fmt.Errorf("unknown batch state %q", s)
}
