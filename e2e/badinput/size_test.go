package badinput

import (
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"google.golang.org/grpc/codes"
)

// TestOversizedSubmissionsAndUnknownProfilesAreRefused: a submission that
// would not fit a ZooKeeper node is refused by Submit (by its validation,
// or by gRPC's message limit for one larger still), and so is a profile
// the batcher does not know; no batch is written for any of them.
func TestOversizedSubmissionsAndUnknownProfilesAreRefused(t *testing.T) {
	t.Parallel()
	u := shared.deposits.URL + "/good/report.txt"
	cases := []struct {
		name string
		req  *v1.SubmitRequest
		code codes.Code
		want []string
	}{
		{"submission bigger than a ZooKeeper node",
			&v1.SubmitRequest{Profile: demoProfile, PayloadUrl: u, PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE,
				Metadata: &v1.Metadata{What: strings.Repeat("w", 1<<20)}},
			codes.InvalidArgument, []string{"bytes encoded, at most 65536 allowed"}},
		{"submission bigger than gRPC's message limit",
			&v1.SubmitRequest{Profile: demoProfile, PayloadUrl: u, PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE,
				Metadata: &v1.Metadata{What: strings.Repeat("w", 5<<20)}},
			codes.ResourceExhausted, []string{"received message larger than max"}},
		{"metadata field over its limit",
			&v1.SubmitRequest{Profile: demoProfile, PayloadUrl: u, PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE,
				Metadata: &v1.Metadata{Who: strings.Repeat("w", 4097)}},
			codes.InvalidArgument, []string{"metadata.who is 4097 bytes, at most 4096 allowed"}},
		{"unknown profile",
			&v1.SubmitRequest{Profile: "nosuch", PayloadUrl: u, PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE},
			codes.InvalidArgument, []string{`profile "nosuch" is not configured; known profiles: demo, held`}},
		{"profile name that is a path",
			&v1.SubmitRequest{Profile: "../demo", PayloadUrl: u, PayloadType: v1.PayloadType_PAYLOAD_TYPE_FILE},
			codes.InvalidArgument, []string{`profile "../demo" must not contain '/'`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			shared.main.refuseSubmission(t, tc.req, tc.code, tc.want...)
		})
	}
}
