package badinput

import (
	"fmt"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
)

// TestServersThatStallOrNeverEndFailTheJobNamingTheFile: a body without
// end is cut at the declared size or at the download limit; a server that
// never answers, or stops sending, is cut by the header and idle timeouts
// after the configured retries; a file that is not what its manifest
// declares fails with what was expected and what came. Each fails its job
// naming the file and its URL, and leaves no partial file.
func TestServersThatStallOrNeverEndFailTheJobNamingTheFile(t *testing.T) {
	t.Parallel()
	serve("/good/report.txt", goodFile)
	attempts := fmt.Sprintf("(after %d attempts)", downloadAttempts)
	cases := []struct {
		name string
		typ  v1.PayloadType
		// url is the payload's URL; for an object manifest, its row is
		// served at path.
		url  func(path string) string
		want []string
	}{
		{"endless body of a file without a declared size", v1.PayloadType_PAYLOAD_TYPE_FILE,
			hostile("/endless/zeros.bin"),
			[]string{fmt.Sprintf("zeros.bin (%s/endless/zeros.bin): larger than allowed: more than %d bytes", shared.hostile.URL, maxFileBytes)}},
		{"endless body of a file whose manifest declares its size", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			body(objectHead + shared.hostile.URL + "/endless/data.bin | | | 1024 | | data.bin\n"),
			[]string{"data.bin (" + shared.hostile.URL + "/endless/data.bin): size expected 1024 bytes, got more"}},
		{"server that never answers", v1.PayloadType_PAYLOAD_TYPE_FILE,
			hostile("/silent/never.txt"),
			[]string{"never.txt (" + shared.hostile.URL + "/silent/never.txt)", "timed out", attempts}},
		{"server that stops sending in the middle of the body", v1.PayloadType_PAYLOAD_TYPE_FILE,
			hostile("/stall/half.bin"),
			[]string{"half.bin (" + shared.hostile.URL + "/stall/half.bin)", fmt.Sprintf("no body data for %s (IdleTimeout)", idleTimeout), attempts}},
		{"server that drops the connection", v1.PayloadType_PAYLOAD_TYPE_FILE,
			hostile("/truncated/cut.bin"),
			[]string{"cut.bin (" + shared.hostile.URL + "/truncated/cut.bin)", "unexpected EOF", attempts}},
		{"digest other than the declared one", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			body(objectHead + "{{base}}/good/report.txt | sha256 | " + strings.Repeat("0", 64) + " | | | report.txt\n"),
			[]string{"report.txt (" + shared.deposits.URL + "/good/report.txt): sha256 expected " + strings.Repeat("0", 64) + ", got " + sha256Hex(goodFile)}},
		{"size other than the declared one", v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
			body(objectHead + "{{base}}/good/report.txt | | | 5 | | report.txt\n"),
			[]string{fmt.Sprintf("report.txt (%s/good/report.txt): size expected 5 bytes, got %d", shared.deposits.URL, len(goodFile))}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := tc.url(fmt.Sprintf("/stall-%d/object.checkm", i))
			shared.main.expectFailure(t, shared.main.submit(t, u, tc.typ), outcome{failed: 1, job: tc.want})
		})
	}

	t.Run("object manifest of a manifest of manifests on a server that never answers", func(t *testing.T) {
		t.Parallel()
		object := shared.hostile.URL + "/silent/object.checkm"
		u := serve("/stall-mom/batch.checkm", batchHead+object+" | | | | | object.checkm | | | \n")
		shared.main.expectFailure(t, shared.main.submit(t, u, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS),
			outcome{failed: 1, job: []string{"fetching the manifest failed: ", object, "timed out", "(attempt 2 of 2)"}})
	})
}
