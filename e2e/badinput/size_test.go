package badinput

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/queue"
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

// hugeObjectManifest lists rows files, each with a long name, so that the
// job's file list would take more than a ZooKeeper node holds.
func hugeObjectManifest(rows int) string {
	var b strings.Builder
	b.WriteString(objectHead)
	for i := range rows {
		fmt.Fprintf(&b, "{{base}}/good/report.txt | | | | | folder-%06d/%s.txt\n", i, strings.Repeat("n", 120))
	}
	return b.String()
}

// TestFileListsTooLargeForAZooKeeperNodeFailNamingTheLimit: an object
// manifest whose file list would not fit the job's node fails its batch
// (or, listed in a manifest of manifests, its job) saying how many files,
// how many bytes and what the limit is, instead of a write ZooKeeper would
// refuse half-way.
func TestFileListsTooLargeForAZooKeeperNodeFailNamingTheLimit(t *testing.T) {
	t.Parallel()
	const rows = 8000
	object := serve("/huge/object.checkm", hugeObjectManifest(rows))
	want := fmt.Sprintf("lists %d files: kept with the job they take", rows)
	limit := fmt.Sprintf("more than the %d a ZooKeeper node holds; split the object or submit a container", queue.MaxNodeBytes)

	t.Run("object manifest", func(t *testing.T) {
		t.Parallel()
		shared.main.expectFailure(t, shared.main.submit(t, object, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST),
			outcome{batch: []string{"object manifest " + object + " " + want, limit}})
	})
	t.Run("object manifest of a manifest of manifests", func(t *testing.T) {
		t.Parallel()
		u := serve("/huge/batch.checkm", batchHead+object+" | | | | | object.checkm | | | \n")
		shared.main.expectFailure(t, shared.main.submit(t, u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS),
			outcome{failed: 1, job: []string{"manifest " + object + " " + want, limit}})
	})
}
