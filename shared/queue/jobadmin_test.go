package queue

import (
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

func TestRequeueStatesFollowLastSuccessfulAndNodes(t *testing.T) {
	names := func(ss []JobState) string {
		var out []string
		for _, s := range ss {
			out = append(out, JobStateName(s))
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		last       JobState
		store, inv bool
		want       string
	}{
		{v1.JobState_JOB_STATE_UNSPECIFIED, false, false, "Pending Estimating"},
		{Estimating, false, false, "Pending Estimating Provisioning"},
		{Processing, true, false, "Pending Estimating Provisioning Downloading Processing Storing"},
		{Recording, true, true, "Pending Estimating Provisioning Downloading Processing Storing Recording Notify"},
		{Recording, true, false, "Pending Estimating Provisioning Downloading Processing Storing"},
	} {
		if got := names(RequeueStates(tt.last, tt.store, tt.inv)); got != tt.want {
			t.Errorf("last %s, store %v, inventory %v: %q, want %q", JobStateName(tt.last), tt.store, tt.inv, got, tt.want)
		}
	}
}
