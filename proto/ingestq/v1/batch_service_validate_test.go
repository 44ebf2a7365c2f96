package ingestqv1

import (
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// FuzzSubmitRequestValidate feeds arbitrary submissions to Validate and
// checks that whatever it accepts keeps every promise the batcher relies
// on: fields within their limits, single-line valid UTF-8 text, an http(s)
// payload URL with a host and no credentials, a usable batch uuid.
func FuzzSubmitRequestValidate(f *testing.F) {
	f.Add("jdoe", "demo", "https://example.org/batch.checkm", int32(4), int32(1), "Hale", "Letters", "1921", "", "7c9e6679-7425-40de-944b-e07fc1f90ae7")
	f.Add("", "demo", "ftp://example.org/a", int32(1), int32(0), "", "", "", "", "")
	f.Add("a\nb", "../x", "http://user:pw@127.0.0.1/", int32(9), int32(7), "\x00", "\xff", "", "", "a/b")
	f.Add("x", "p", "http:///nohost", int32(2), int32(2), "", "", "", "", "..")
	f.Add("x", "p", "HTTPS://EXAMPLE.ORG/%zz", int32(3), int32(1), "", "", "", "", "zookeeper")
	f.Fuzz(func(t *testing.T, submitter, profile, payloadURL string, payloadType, mode int32, who, what, when, where, uuid string) {
		r := &SubmitRequest{
			Submitter: submitter, Profile: profile, PayloadUrl: payloadURL,
			PayloadType: PayloadType(payloadType), SubmissionMode: SubmissionMode(mode),
			Metadata:  &Metadata{Who: who, What: what, When: when, Where: where},
			BatchUuid: uuid,
		}
		if r.Validate() != nil {
			return
		}
		if proto.Size(r) > MaxSubmitRequestBytes {
			t.Errorf("accepted a request of %d bytes", proto.Size(r))
		}
		for name, v := range map[string]string{"submitter": submitter, "profile": profile, "who": who, "what": what, "when": when, "where": where} {
			if !utf8.ValidString(v) || strings.IndexFunc(v, unicode.IsControl) >= 0 {
				t.Errorf("accepted %s %q: invalid UTF-8 or a control character", name, v)
			}
		}
		if submitter == "" || profile == "" || len(submitter) > MaxSubmitterBytes || len(profile) > MaxProfileNameBytes {
			t.Errorf("accepted submitter %q profile %q", submitter, profile)
		}
		if strings.ContainsAny(profile, `/\`) {
			t.Errorf("accepted profile %q, a path", profile)
		}
		u, err := url.Parse(payloadURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || len(payloadURL) > MaxPayloadURLBytes {
			t.Errorf("accepted payload_url %q", payloadURL)
		}
		if _, ok := PayloadType_name[payloadType]; !ok || payloadType == 0 {
			t.Errorf("accepted payload_type %d", payloadType)
		}
		if uuid != "" && (len(uuid) > MaxBatchUUIDBytes || strings.ContainsAny(uuid, "/ \t\n") || uuid == "." || uuid == ".." ||
			!utf8.ValidString(uuid) || strings.IndexFunc(uuid, ZooKeeperRefuses) >= 0) {
			t.Errorf("accepted batch_uuid %q", uuid)
		}
	})
}

func TestValidateNamesTheFieldItRefuses(t *testing.T) {
	ok := func() *SubmitRequest {
		return &SubmitRequest{Submitter: "jdoe", Profile: "demo", PayloadUrl: "https://example.org/a.zip", PayloadType: PayloadType_PAYLOAD_TYPE_CONTAINER}
	}
	if err := ok().Validate(); err != nil {
		t.Fatalf("a valid submission is refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*SubmitRequest)
		want string
	}{
		{"invalid UTF-8 in a metadata field", func(r *SubmitRequest) { r.Metadata = &Metadata{Where: "\xff"} }, "metadata.where is not valid UTF-8"},
		{"an oversized request", func(r *SubmitRequest) { r.Metadata = &Metadata{Who: strings.Repeat("a", MaxSubmitRequestBytes)} }, "the submission is"},
		{"a blank submitter", func(r *SubmitRequest) { r.Submitter = "   " }, "submitter is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.edit(r)
			if err := r.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if err := (&GetBatchStatusRequest{Batch: &GetBatchStatusRequest_BatchId{BatchId: "jid0000000001"}}).Validate(); err == nil {
		t.Error("a jid accepted as a batch_id")
	}
}

// TestNodeNameFieldsRefuseWhatZooKeeperRefuses: a batch uuid or collection
// becomes a node name; a character ZooKeeper refuses in one (its path
// check) or bytes that are not UTF-8 are refused by Validate, naming the
// field, the character and where it is.
func TestNodeNameFieldsRefuseWhatZooKeeperRefuses(t *testing.T) {
	submit := func(uuid string) error {
		return (&SubmitRequest{Submitter: "jdoe", Profile: "demo", PayloadUrl: "https://example.org/a.zip",
			PayloadType: PayloadType_PAYLOAD_TYPE_CONTAINER, BatchUuid: uuid}).Validate()
	}
	for _, tc := range []struct{ uuid, want string }{
		{"a\ufff0b", `batch_uuid "a\ufff0b": character U+FFF0 at byte 1 is not allowed (ZooKeeper refuses it in a node name)`},
		{"ab\uffff", "character U+FFFF at byte 2"},
		{"\ue000", "character U+E000 at byte 0"},
		{"\uf8ff-x", "character U+F8FF at byte 0"},
		{"batch-\U0001F600", "character U+1F600 at byte 6"},
		{"a\x00b", "character '\\x00' at byte 1 is not allowed"},
		{"a\u0085b", "character '\\u0085' at byte 1 is not allowed"},
		{"a\xffb", "batch_uuid is not valid UTF-8"},
		{"..", `batch_uuid ".." is not a usable batch uuid`},
	} {
		if err := submit(tc.uuid); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("batch_uuid %q: %v, want %q", tc.uuid, err, tc.want)
		}
		get := &GetBatchStatusRequest{Batch: &GetBatchStatusRequest_BatchUuid{BatchUuid: tc.uuid}}
		if err := get.Validate(); err == nil {
			t.Errorf("GetBatchStatus accepted batch_uuid %q", tc.uuid)
		}
	}
	for _, uuid := range []string{"7c9e6679-7425-40de-944b-e07fc1f90ae7", "lettres-été-1921", "日本語", "a.b_c~d", "\uffef"} {
		if err := submit(uuid); err != nil {
			t.Errorf("batch_uuid %q refused: %v", uuid, err)
		}
	}
	if err := (&HoldCollectionRequest{Collection: "coll\U0001F600"}).Validate(); err == nil || !strings.Contains(err.Error(), "character U+1F600 at byte 4") {
		t.Errorf("collection with U+1F600: %v", err)
	}
	if err := (&HoldCollectionRequest{Collection: "demo coll"}).Validate(); err != nil {
		t.Errorf("collection %q refused: %v", "demo coll", err)
	}
}
