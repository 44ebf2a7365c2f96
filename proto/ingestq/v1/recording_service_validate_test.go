package ingestqv1

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

func TestRecordingRequestsValidation(t *testing.T) {
	long := strings.Repeat("x", MaxLeaseIDBytes+1)
	for _, tc := range []struct {
		name string
		req  interface{ Validate() error }
		want string // "" when valid
	}{
		{"lease with defaults", &LeaseRequest{}, ""},
		{"lease without waiting", &LeaseRequest{Wait: durationpb.New(0), LeaseDuration: durationpb.New(time.Minute)}, ""},
		{"lease waiting too long", &LeaseRequest{Wait: durationpb.New(MaxLeaseWait + time.Second)}, "wait 10m1s is outside 0..10m0s"},
		{"lease waiting a negative time", &LeaseRequest{Wait: durationpb.New(-time.Second)}, "wait -1s is outside"},
		{"lease shorter than a second", &LeaseRequest{LeaseDuration: durationpb.New(500 * time.Millisecond)}, "lease_duration 500ms is outside 1s..1h0m0s"},
		{"lease with a broken duration", &LeaseRequest{LeaseDuration: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "lease_duration: "},
		{"renew", &RenewRequest{LeaseId: "abc"}, ""},
		{"renew without an id", &RenewRequest{}, "lease_id is required"},
		{"renew for too long", &RenewRequest{LeaseId: "abc", LeaseDuration: durationpb.New(2 * time.Hour)}, "lease_duration 2h0m0s is outside"},
		{"complete with an overlong id", &CompleteRequest{LeaseId: long}, "lease_id is 65 bytes, at most 64 allowed"},
		{"fail", &FailRequest{LeaseId: "abc", Message: "db down"}, ""},
		{"fail without a message", &FailRequest{LeaseId: "abc"}, "message is required"},
		{"fail with an overlong message", &FailRequest{LeaseId: "abc", Message: strings.Repeat("m", MaxRecordingMessageBytes+1)}, "message is 4097 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
