package badinput

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
)

// Manifest heads: line 1 the header, line 2 the profile, line 3 the fields,
// so the first row is line 4.
const (
	objectFields = "#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName\n"
	objectHead   = checkm.Header + "\n#%profile | " + checkm.ProfileObject + "\n" + objectFields
	batchHead    = checkm.Header + "\n#%profile | " + checkm.ProfileBatch + "\n" +
		"#%fields | nfo:fileUrl | nfo:hashAlgorithm | nfo:hashValue | nfo:fileSize | nfo:fileLastModified | nfo:fileName | mrt:creator | mrt:title | mrt:date\n"
)

// goodFile is a file every manifest of the suite may list: the depositor
// serves it under /good/.
const goodFile = "Annual report 1955.\n"

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// goodRow is a well-formed row listing the good file as name.
func goodRow(name string) string {
	return fmt.Sprintf("{{base}}/good/report.txt | sha256 | %s | %d | | %s\n", sha256Hex(goodFile), len(goodFile), name)
}

// serve makes the depositor serve body at path and returns its URL.
func serve(path, body string) string {
	shared.deposits.Set(path, []byte(body))
	return shared.deposits.URL + path
}

// TestCorruptManifestsFailTheirBatchNamingTheLine submits broken object
// manifests: the batcher refuses each before any job exists, and the
// batch's message names the manifest's URL and says what is wrong where.
func TestCorruptManifestsFailTheirBatchNamingTheLine(t *testing.T) {
	t.Parallel()
	serve("/good/report.txt", goodFile)
	cases := []struct {
		name string
		url  func(path string) string // the payload URL, given a path for it
		want []string
	}{
		{"not a checkm manifest", body("<html>Service unavailable</html>\n"),
			[]string{"line 1: first line must be #%checkm_0.7"}},
		{"empty body", body(""),
			[]string{"line 1: empty input"}},
		{"truncated after its header lines", body(objectHead),
			[]string{"line 3: manifest has no entries"}},
		{"truncated in the middle of a digest", body(objectHead + "{{base}}/good/report.txt | sha256 | 5ac5ff1c0e2d"),
			[]string{"line 4: sha256 digest \"5ac5ff1c0e2d\" has 12 hex digits, want 64"}},
		{"truncated in transfer", hostile("/truncated/cut.checkm"),
			[]string{"cut.checkm", "unexpected EOF"}},
		{"row with more columns than its fields", body(objectHead + goodRow("a.txt") + "{{base}}/good/report.txt | | | | | b.txt | extra\n"),
			[]string{"line 5: row has 7 columns but #%fields (line 3) declares 6"}},
		{"one million rows", hostile("/million/big.checkm"),
			[]string{"big.checkm", "line 1000001: manifest has more than 1000000 lines (MaxLines)"}},
		{"rows without end", hostile("/endless/big.checkm"),
			[]string{"big.checkm", "body too large: more than 67108864 bytes"}},
		{"line too long", body(objectHead + goodRow(strings.Repeat("n", 70_000))),
			[]string{"line 4: line longer than 65536 bytes (MaxLineBytes)"}},
		{"unknown hash algorithm", body(objectHead + "{{base}}/good/report.txt | crc32 | 1c291ca3 | | | a.txt\n"),
			[]string{"line 4: unknown hash algorithm \"crc32\" (want md5, sha1, sha256 or sha512)"}},
		{"file name with a .. segment", body(objectHead + goodRow("a.txt") + goodRow("../../etc/cron.d/evil")),
			[]string{"line 5: file name \"../../etc/cron.d/evil\" has a \"..\" segment"}},
		{"file name that is an absolute path", body(objectHead + goodRow("/etc/passwd")),
			[]string{"line 4: file name \"/etc/passwd\" is an absolute path"}},
		{"file name with a NUL byte", body(objectHead + goodRow("a\x00.txt")),
			[]string{"line 4: file name \"a\\x00.txt\" contains a control character"}},
		{"file size that is not a number", body(objectHead + "{{base}}/good/report.txt | | | 12x | | a.txt\n"),
			[]string{"line 4: nfo:fileSize \"12x\" is not a non-negative integer"}},
		{"file URL that is not absolute", body(objectHead + "good/report.txt | | | | | a.txt\n"),
			[]string{"line 4: nfo:fileUrl \"good/report.txt\" is not an absolute URL"}},
		{"batch manifest submitted as an object manifest", body(batchHead + "{{base}}/good/report.txt | | | | | a.txt | | | \n"),
			[]string{"declares profile " + checkm.ProfileBatch, "submitted as object_manifest"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url(fmt.Sprintf("/corrupt-%d/object.checkm", i))
			bid := shared.main.submit(t, url, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
			shared.main.expectFailure(t, bid, outcome{batch: append([]string{url}, tc.want...)})
		})
	}
}

// TestCorruptObjectManifestsOfAManifestOfManifestsFailOnlyTheirJob: a
// manifest of manifests whose rows are fine spawns its jobs; the estimator
// fetches each object manifest, and a broken one fails its own job (its
// message naming the manifest and the line) while the other job completes.
func TestCorruptObjectManifestsOfAManifestOfManifestsFailOnlyTheirJob(t *testing.T) {
	t.Parallel()
	serve("/good/report.txt", goodFile)
	cases := []struct {
		name string
		url  func(path string) string // the broken object manifest's URL
		want []string
	}{
		{"unknown hash algorithm", body(objectHead + "{{base}}/good/report.txt | whirlpool | 00ff | | | a.txt\n"),
			[]string{"line 4: unknown hash algorithm \"whirlpool\""}},
		{"file name with a .. segment", body(objectHead + goodRow("../escape.txt")),
			[]string{"line 4: file name \"../escape.txt\" has a \"..\" segment"}},
		{"one million rows", hostile("/million/listed.checkm"),
			[]string{"line 1000001: manifest has more than 1000000 lines (MaxLines)"}},
		{"not found", func(string) string { return shared.deposits.URL + "/missing/object.checkm" },
			[]string{"HTTP 404"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := fmt.Sprintf("/mom-%d", i)
			good := serve(dir+"/good.checkm", objectHead+goodRow("report.txt"))
			bad := tc.url(dir + "/broken.checkm")
			url := serve(dir+"/batch.checkm", batchHead+
				good+" | | | | | good.checkm | Hale | Good object | 1955\n"+
				bad+" | | | | | broken.checkm | Hale | Broken object | 1955\n")
			bid := shared.main.submit(t, url, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
			shared.main.expectFailure(t, bid, outcome{failed: 1, completed: 1, job: append([]string{bad}, tc.want...)})
		})
	}
}

// TestCorruptManifestOfManifestsFailsBeforeAnyJob: a bad row in the batch
// manifest itself refuses the whole batch, even after good rows: no job
// is created for the rows before it.
func TestCorruptManifestOfManifestsFailsBeforeAnyJob(t *testing.T) {
	t.Parallel()
	good := serve("/mom-corrupt/good.checkm", objectHead+goodRow("report.txt"))
	url := serve("/mom-corrupt/batch.checkm", batchHead+
		good+" | | | | | one.checkm | Hale | One | 1955\n"+
		good+" | md4 | 00 | | | two.checkm | Hale | Two | 1955\n")
	bid := shared.main.submit(t, url, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS)
	shared.main.expectFailure(t, bid, outcome{batch: []string{url, "line 5: unknown hash algorithm \"md4\""}})
}

// body serves a fixed body at the case's path.
func body(s string) func(path string) string {
	return func(path string) string { return serve(path, s) }
}

// hostile points at a path of the hostile server instead.
func hostile(path string) func(string) string {
	return func(string) string { return shared.hostile.URL + path }
}
