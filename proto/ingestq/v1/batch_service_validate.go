package ingestqv1

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
)

// Limits of a submission, in bytes of UTF-8. The batch lands in one
// ZooKeeper node (which holds less than 1 MB); these keep the largest
// possible submission near 50 KB once JSON-escaped.
const (
	MaxSubmitterBytes     = 256
	MaxProfileNameBytes   = 128
	MaxPayloadURLBytes    = 8192
	MaxMetadataFieldBytes = 4096
	MaxBatchUUIDBytes     = 128
	MaxSubmitRequestBytes = 64 << 10
)

// Validate checks every field of a submission against its limit and form.
// What needs the running service (does the profile exist, does the URL's
// host pass the fetch policy) is checked by the batcher after this.
func (r *SubmitRequest) Validate() error {
	if n := proto.Size(r); n > MaxSubmitRequestBytes {
		return fmt.Errorf("the submission is %d bytes encoded, at most %d allowed", n, MaxSubmitRequestBytes)
	}
	if err := requiredText("submitter", r.GetSubmitter(), MaxSubmitterBytes); err != nil {
		return err
	}
	if err := requiredText("profile", r.GetProfile(), MaxProfileNameBytes); err != nil {
		return err
	}
	if strings.ContainsAny(r.GetProfile(), `/\`) || strings.HasPrefix(r.GetProfile(), ".") {
		return fmt.Errorf("profile %q must not contain '/' or '\\' nor start with '.'", r.GetProfile())
	}
	if err := validPayloadURL(r.GetPayloadUrl()); err != nil {
		return err
	}
	switch r.GetPayloadType() {
	case PayloadType_PAYLOAD_TYPE_FILE, PayloadType_PAYLOAD_TYPE_CONTAINER, PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST,
		PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS:
	case PayloadType_PAYLOAD_TYPE_UNSPECIFIED:
		return errors.New("payload_type is required: PAYLOAD_TYPE_FILE, PAYLOAD_TYPE_CONTAINER, PAYLOAD_TYPE_OBJECT_MANIFEST, PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS or PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS")
	default:
		return fmt.Errorf("payload_type %d is not a payload type: want PAYLOAD_TYPE_FILE, PAYLOAD_TYPE_CONTAINER, PAYLOAD_TYPE_OBJECT_MANIFEST, PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS or PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS", r.GetPayloadType())
	}
	switch r.GetSubmissionMode() {
	case SubmissionMode_SUBMISSION_MODE_UNSPECIFIED, SubmissionMode_SUBMISSION_MODE_ADD, SubmissionMode_SUBMISSION_MODE_UPDATE:
	default:
		return fmt.Errorf("submission_mode %d is not add or update", r.GetSubmissionMode())
	}
	if err := validMetadata("metadata", r.GetMetadata()); err != nil {
		return err
	}
	if id := r.GetBatchUuid(); id != "" {
		if err := validBatchUUID("batch_uuid", id); err != nil {
			return err
		}
	}
	return nil
}

// Validate requires exactly one well-formed selector.
func (r *GetBatchStatusRequest) Validate() error {
	if err := validBatchSelector(r.GetBatchId(), r.GetBatchUuid(), r.GetBatch() != nil); err != nil {
		return err
	}
	return validPaging(r.GetPageSize(), MaxJobPageSize, r.GetPageToken())
}

func validBatchSelector(bid, uuid string, set bool) error {
	switch {
	case !set:
		return errors.New("batch_id or batch_uuid is required")
	case bid != "" || uuid == "":
		return validBatchID("batch_id", bid)
	default:
		return validBatchUUID("batch_uuid", uuid)
	}
}

// requiredText is a non-empty single-line text of at most max bytes.
func requiredText(field, s string, max int) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("%s is required", field)
	}
	return optionalText(field, s, max)
}

// optionalText is a single-line text of at most max bytes: control
// characters (newlines among them) are refused, as they would let a value
// forge lines of the reports and mails it ends up in.
func optionalText(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes, at most %d allowed", field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s contains control character %U at byte %d", field, r, i)
		}
	}
	return nil
}

func validPayloadURL(raw string) error {
	if raw == "" {
		return errors.New("payload_url is required")
	}
	if len(raw) > MaxPayloadURLBytes {
		return fmt.Errorf("payload_url is %d bytes, at most %d allowed", len(raw), MaxPayloadURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("payload_url %q is not a URL: %v", clip(raw), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("payload_url %q: scheme %q is not allowed, only http and https", clip(raw), u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("payload_url %q has no host", clip(raw))
	}
	if u.User != nil {
		return fmt.Errorf("payload_url %q carries credentials; they would be stored in the queue in clear", clip(u.Redacted()))
	}
	return nil
}

func validMetadata(field string, m *Metadata) error {
	for _, f := range []struct{ name, v string }{
		{"who", m.GetWho()}, {"what", m.GetWhat()}, {"when", m.GetWhen()}, {"where", m.GetWhere()},
	} {
		if err := optionalText(field+"."+f.name, f.v, MaxMetadataFieldBytes); err != nil {
			return err
		}
	}
	return nil
}

// validBatchUUID follows the queue's rule for a node name under /batch-uuids.
func validBatchUUID(field, id string) error {
	if len(id) > MaxBatchUUIDBytes {
		return fmt.Errorf("%s is %d bytes, at most %d allowed", field, len(id), MaxBatchUUIDBytes)
	}
	if id == "" || id == "." || id == ".." || id == "zookeeper" {
		return fmt.Errorf("%s %q is not a usable batch uuid", field, id)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for i, r := range id {
		if r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%s %q: character %q at byte %d is not allowed ('/', spaces and control characters are not)", field, clip(id), r, i)
		}
		if ZooKeeperRefuses(r) {
			return fmt.Errorf("%s %q: character %U at byte %d is not allowed (ZooKeeper refuses it in a node name)", field, clip(id), r, i)
		}
	}
	return nil
}

// validBatchID and validJobID accept ZooKeeper sequential names
// ("bid0000000042", "jid0000000042").
func validBatchID(field, id string) error { return validSeqID(field, id, "bid") }

func validJobID(field, id string) error { return validSeqID(field, id, "jid") }

func validSeqID(field, id, prefix string) error {
	if id == "" {
		return fmt.Errorf("%s is required", field)
	}
	ok := strings.HasPrefix(id, prefix) && len(id) == len(prefix)+10
	for _, c := range strings.TrimPrefix(id, prefix) {
		ok = ok && c >= '0' && c <= '9'
	}
	if !ok {
		return fmt.Errorf("%s %q is not a %s id (%s followed by 10 digits, e.g. %s0000000042)", field, clip(id), prefix, prefix, prefix)
	}
	return nil
}

// clip keeps error messages short whatever the caller sent.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
