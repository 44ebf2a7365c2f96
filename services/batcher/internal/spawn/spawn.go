// Package spawn turns a batch's payload into its jobs: one job for a file
// or a container, one for an object manifest (its files kept with the job;
// a list too long for the job's manifest node is fetched again and kept by
// the estimator, as a manifest of manifests' rows are), one per row of a manifest of manifests or of containers. It fetches and
// parses what it needs and says precisely what is wrong with a payload that
// cannot be used.
//
// A batch's jobs are all made from one reading of its payload: the
// document as first fetched is kept in the batch's folder in the work root
// (Keep) and its digest recorded with the batch, and a batcher finishing a
// half-spawned batch plans it again from that copy (Replan), never from
// what the depositor's server answers now.
package spawn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"strings"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/durable"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/profile"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/workdir"
	"google.golang.org/protobuf/proto"
)

// Fetcher fetches small documents (manifests); *fetch.Client is one.
type Fetcher interface {
	Fetch(ctx context.Context, url string, maxBytes int64) ([]byte, error)
}

// Planner builds the jobs of batches.
type Planner struct {
	Fetcher Fetcher
	// Policy is the fetch policy the URLs listed in a batch manifest must
	// pass (schemes, denied addresses), checked before any job exists.
	Policy fetch.Policy
	// Limits bound a fetched manifest (its MaxBytes bounds the download).
	Limits checkm.Limits
	Root   workdir.Root
	// Retry says how often a payload is fetched before the batch fails
	// (only failures that may pass are retried) and how long the fetches
	// wait between them; the zero policy is DefaultRetry.
	Retry retry.Policy
	// Durable makes a kept payload durable before the batch's jobs exist.
	Durable durable.Syncer
	// MerrittQueueURL is where Merritt's ingest service's queue folder
	// (<ingest home>/queue) is served over HTTP: a batch that service
	// submitted names its payload only by its batchID and filename, fetched
	// from <MerrittQueueURL>/<batchID>/<filename>. Empty: such a batch
	// fails, saying so.
	MerrittQueueURL string
}

// PayloadError is a payload that cannot become jobs: the batch fails with
// its message, which names the URL and, for a manifest, the line.
type PayloadError struct {
	Msg string
	Err error
}

func (e *PayloadError) Error() string { return e.Msg }
func (e *PayloadError) Unwrap() error { return e.Err }

func payloadErrorf(err error, format string, args ...any) *PayloadError {
	return &PayloadError{Msg: fmt.Sprintf(format, args...), Err: err}
}

// Reading is one reading of a batch's payload document, the one its jobs
// are made from.
type Reading struct {
	URL  string
	Data []byte
}

// Record is what the batch records of the reading: its digest and size.
func (r *Reading) Record() *queue.PayloadRecord {
	return &queue.PayloadRecord{SHA256: digest(r.Data), Size: int64(len(r.Data))}
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// fetched says whether a payload type is a document the batcher fetches.
func fetched(t v1.PayloadType) bool {
	switch t {
	case v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS,
		v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS:
		return true
	}
	return false
}

// Plan reads the payload of batch bid (fetching it) and returns its jobs, in
// payload order, with the reading they were made from (nil for a file or a
// container, which nothing fetches). Job i has batch_entry i: its row in
// that reading, so that a batcher finishing a half-spawned batch, planning
// it again from the same reading (Replan), can tell which jobs exist
// already. merritt is what a submission Merritt's ingest service wrote
// says beyond sub (nil for others). A *PayloadError means the payload is
// unusable; any other error (the context ended, say) leaves the batch to
// be tried again.
func (p *Planner) Plan(ctx context.Context, bid string, sub *v1.Submission, merritt *queue.MerrittSubmission, prof *profile.Profile) ([]batches.NewJob, *Reading, error) {
	sub, err := p.payloadOf(sub, merritt)
	if err != nil {
		return nil, nil, err
	}
	var rd *Reading
	if fetched(sub.GetType()) {
		data, err := p.fetch(ctx, sub.GetPayloadUrl())
		if err != nil {
			return nil, nil, err
		}
		rd = &Reading{URL: sub.GetPayloadUrl(), Data: data}
	}
	jobs, err := p.planReading(bid, sub, merritt, prof, rd)
	if err != nil {
		return nil, nil, err
	}
	return jobs, rd, nil
}

// Keep keeps the reading in batch bid's folder in the work root, durably:
// done before the batch records it and before any of its jobs exists.
func (p *Planner) Keep(ctx context.Context, bid string, rd *Reading) error {
	return p.Root.KeepPayload(ctx, &p.Durable, bid, rd.Data)
}

// Replan plans a half-spawned batch again from the reading its jobs were
// first made from, recorded as rec: the copy kept in the work root when its
// digest is rec's; when that copy is missing or damaged, the payload
// fetched again, which must be the same bytes (it is then kept again). A
// payload that changed, or cannot be fetched again, is a *PayloadError
// naming the URL (and both digests): the rows not yet created cannot be
// known. A batch taken without a record (rec nil) is planned from a new
// fetch; the caller checks the jobs it has against that plan.
func (p *Planner) Replan(ctx context.Context, bid string, sub *v1.Submission, merritt *queue.MerrittSubmission, prof *profile.Profile, rec *queue.PayloadRecord) ([]batches.NewJob, error) {
	if rec == nil || rec.SHA256 == "" {
		jobs, _, err := p.Plan(ctx, bid, sub, merritt, prof)
		return jobs, err
	}
	sub, err := p.payloadOf(sub, merritt)
	if err != nil {
		return nil, err
	}
	if !fetched(sub.GetType()) {
		return p.planReading(bid, sub, merritt, prof, nil)
	}
	raw := sub.GetPayloadUrl()
	kept, err := p.Root.ReadPayload(bid, rec.Size)
	var copyState string
	switch {
	case err == nil && int64(len(kept)) == rec.Size && digest(kept) == rec.SHA256:
		return p.planReading(bid, sub, merritt, prof, &Reading{URL: raw, Data: kept})
	case errors.Is(err, fs.ErrNotExist):
		copyState = "is missing"
	case err != nil:
		copyState = fmt.Sprintf("cannot be read (%v)", err)
	default:
		copyState = fmt.Sprintf("is damaged (sha256 %s, %d bytes)", digest(kept), len(kept))
	}
	data, err := p.fetch(ctx, raw)
	var perr *PayloadError
	if errors.As(err, &perr) {
		return nil, payloadErrorf(err, "the copy of payload %s kept in the work root %s (first read: sha256 %s, %d bytes), and fetching it again failed: %s",
			raw, copyState, rec.SHA256, rec.Size, perr.Msg)
	}
	if err != nil {
		return nil, err
	}
	if now := digest(data); now != rec.SHA256 || int64(len(data)) != rec.Size {
		return nil, payloadErrorf(nil, "payload %s changed after the batch's jobs began to be created: sha256 %s (%d bytes) when first read, sha256 %s (%d bytes) now, and the copy kept in the work root %s",
			raw, rec.SHA256, rec.Size, now, len(data), copyState)
	}
	rd := &Reading{URL: raw, Data: data}
	if err := p.Keep(ctx, bid, rd); err != nil {
		return nil, err
	}
	return p.planReading(bid, sub, merritt, prof, rd)
}

// planReading makes the jobs of batch bid from rd (nil for a file or a
// container).
func (p *Planner) planReading(bid string, sub *v1.Submission, merritt *queue.MerrittSubmission, prof *profile.Profile, rd *Reading) ([]batches.NewJob, error) {
	b := &builder{p: p, bid: bid, sub: sub, merritt: merritt, prof: prof, rd: rd}
	switch t := sub.GetType(); t {
	case v1.PayloadType_PAYLOAD_TYPE_FILE, v1.PayloadType_PAYLOAD_TYPE_CONTAINER:
		return b.single(t)
	case v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST:
		return b.objectManifest()
	case v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS, v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS:
		return b.batchManifest(t)
	case v1.PayloadType_PAYLOAD_TYPE_UNSPECIFIED:
		return nil, payloadErrorf(nil, "the submission names no payload type (accepted: %s); no job was created", queue.AcceptedPayloadTypes)
	default:
		return nil, payloadErrorf(nil, "payload type %q is not one the batcher knows", queue.PayloadTypeName(t))
	}
}

// payloadOf returns sub with its payload URL: its own, or, for a batch
// Merritt's ingest service submitted, the URL of the file that service
// keeps for it.
func (p *Planner) payloadOf(sub *v1.Submission, merritt *queue.MerrittSubmission) (*v1.Submission, error) {
	if sub.GetPayloadUrl() != "" {
		return sub, nil
	}
	if merritt == nil || merritt.Filename == "" {
		return nil, payloadErrorf(nil, "the submission names no payload: neither a payload_url nor, as Merritt's ingest service writes it, a filename; no job was created")
	}
	if p.MerrittQueueURL == "" {
		return nil, payloadErrorf(nil, "the submission names its payload only as %q, a file Merritt's ingest service keeps in its queue folder under batch %q: "+
			"set INGESTQ_MERRITT_QUEUE_URL to the URL that folder is served from; no job was created", merritt.Filename, sub.GetBatchId())
	}
	if sub.GetBatchId() == "" {
		return nil, payloadErrorf(nil, "the submission names its payload only as %q, a file in Merritt's ingest queue folder, but has no batchID to find it by; no job was created", merritt.Filename)
	}
	out := proto.Clone(sub).(*v1.Submission)
	out.PayloadUrl = strings.TrimSuffix(p.MerrittQueueURL, "/") + "/" + url.PathEscape(sub.GetBatchId()) + "/" + url.PathEscape(merritt.Filename)
	return out, nil
}

type builder struct {
	p       *Planner
	bid     string
	sub     *v1.Submission
	merritt *queue.MerrittSubmission
	prof    *profile.Profile
	rd      *Reading
}

// job is the common part of every job of the batch.
func (b *builder) job(entry int, payloadURL string, t v1.PayloadType) batches.NewJob {
	prio := int32(b.prof.Priority)
	prio = max(0, min(prio, queue.MaxPriority))
	mode := b.sub.GetSubmissionMode()
	if mode == v1.SubmissionMode_SUBMISSION_MODE_UNSPECIFIED {
		mode = v1.SubmissionMode_SUBMISSION_MODE_ADD
	}
	var responseType string
	if b.merritt != nil {
		responseType = b.merritt.ResponseForm
	}
	return batches.NewJob{
		Priority: prio,
		WorkRoot: b.p.Root.Dir(),
		Configuration: &v1.JobConfiguration{
			ResponseType:   responseType,
			ProfileName:    b.sub.GetProfileName(),
			Submitter:      b.sub.GetSubmitter(),
			PayloadUrl:     payloadURL,
			PayloadType:    t,
			SubmissionMode: mode,
			BatchEntry:     int32(entry),
			Traceparent:    b.sub.GetTraceparent(),
			Collection:     b.prof.Collection,
		},
	}
}

// single is a file or a container: one job whose manifest is the one file.
func (b *builder) single(t v1.PayloadType) ([]batches.NewJob, error) {
	raw := b.sub.GetPayloadUrl()
	name, err := fileNameOf(raw)
	if err != nil {
		return nil, payloadErrorf(err, "payload %s: %v", raw, err)
	}
	j := b.job(0, raw, t)
	j.Metadata = nonEmptyMetadata(b.sub.GetMetadata())
	file := &v1.ManifestFile{Url: raw, Size: -1, Name: name}
	if m := b.merritt; m != nil {
		j.Identifiers = merrittIdentifiers(m)
		file.Size = m.Size
		if m.DigestValue != "" {
			alg, err := checkm.HashAlgorithm(m.DigestType)
			if err != nil {
				return nil, payloadErrorf(err, "payload %s: digestType: %v", raw, err)
			}
			file.HashAlgorithm, file.HashValue = alg, strings.ToLower(m.DigestValue)
		}
	}
	j.Manifest = &v1.Manifest{Files: []*v1.ManifestFile{file}}
	return []batches.NewJob{j}, nil
}

// merrittIdentifiers are the object's identifiers a submission of
// Merritt's ingest service gives (nil: none).
func merrittIdentifiers(m *queue.MerrittSubmission) *v1.Identifiers {
	if m.PrimaryID == "" && len(m.LocalIDs) == 0 {
		return nil
	}
	return &v1.Identifiers{PrimaryId: m.PrimaryID, LocalId: m.LocalIDs}
}

// fileNameOf is the base name of a URL's path: the name a single-file
// payload gets in the object.
func fileNameOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	name := path.Base(u.Path)
	if name == "/" || name == "." || name == ".." || name == "" {
		return "", errors.New("the URL's path ends in no file name")
	}
	if err := checkm.CheckFileName(name); err != nil {
		return "", err
	}
	return name, nil
}

// manifest parses the manifest read, at raw.
func (b *builder) manifest(raw, what string) (*checkm.Manifest, error) {
	m, err := checkm.Parse(bytes.NewReader(b.rd.Data), b.p.Limits)
	if err != nil {
		return nil, payloadErrorf(err, "%s %s: %v", what, raw, err)
	}
	return m, nil
}

// fetch gets a payload document, retrying what may pass.
func (p *Planner) fetch(ctx context.Context, raw string) ([]byte, error) {
	policy := p.Retry
	if policy == (retry.Policy{}) {
		policy = DefaultRetry()
	}
	maxBytes := p.Limits.MaxBytes
	if maxBytes <= 0 {
		maxBytes = checkm.DefaultMaxBytes
	}
	var data []byte
	_, err := policy.Do(ctx, fetch.Retryable, func(int) error {
		var err error
		data, err = p.Fetcher.Fetch(ctx, raw, maxBytes)
		return err
	})
	switch {
	case err == nil:
		return data, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, payloadErrorf(err, "fetching payload %s: %v", raw, err)
}

// DefaultRetry is how a payload is fetched again when no policy is given.
func DefaultRetry() retry.Policy { return retry.Policy{Attempts: 3, Backoff: time.Second} }

// manifestProfile maps each payload type to the #%profile its manifest has.
var manifestProfile = map[v1.PayloadType]string{
	v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST:        checkm.ProfileObject,
	v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_MANIFESTS:  checkm.ProfileBatch,
	v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS: checkm.ProfileContainerBatch,
}

// checkProfile refuses a manifest that declares itself as another kind of
// manifest than the payload type says: its rows would mean something else.
// A manifest without a profile, or with one ingestq does not know, passes.
func checkProfile(m *checkm.Manifest, t v1.PayloadType, raw string) error {
	want := manifestProfile[t]
	if m.Profile == "" || m.Profile == want {
		return nil
	}
	for other, p := range manifestProfile {
		if m.Profile == p {
			return payloadErrorf(nil, "manifest %s declares profile %s, the profile of a %s, but was submitted as %s (profile %s)",
				raw, m.Profile, queue.PayloadTypeName(other), queue.PayloadTypeName(t), want)
		}
	}
	return nil
}

// objectManifest is one job whose files are the manifest's rows.
func (b *builder) objectManifest() ([]batches.NewJob, error) {
	raw := b.sub.GetPayloadUrl()
	m, err := b.manifest(raw, "object manifest")
	if err != nil {
		return nil, err
	}
	if err := checkProfile(m, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST, raw); err != nil {
		return nil, err
	}
	if err := m.CheckFileNames(); err != nil {
		return nil, payloadErrorf(err, "object manifest %s: %v", raw, err)
	}
	files := make([]*v1.ManifestFile, len(m.Entries))
	for i, e := range m.Entries {
		if _, err := fetch.CheckURL(e.FileURL, b.p.Policy); err != nil {
			return nil, payloadErrorf(err, "object manifest %s: line %d: %v", raw, e.Line, err)
		}
		files[i] = manifestFile(e)
	}
	j := b.job(0, raw, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
	// A list too long for the job's manifest node is left to the
	// estimator, which fetches it again and keeps it in the job's working
	// folder (its files were checked here all the same).
	if manifest := (&v1.Manifest{Files: files}); queue.FileListFitsNode(manifest) {
		j.Manifest = manifest
	}
	j.Identifiers = objectIdentifiers(m.Entries)
	if b.merritt != nil && j.Identifiers == nil {
		j.Identifiers = merrittIdentifiers(b.merritt)
	}
	j.Metadata = nonEmptyMetadata(b.sub.GetMetadata())
	if j.Metadata == nil {
		for _, e := range m.Entries {
			if j.Metadata = entryMetadata(e); j.Metadata != nil {
				break
			}
		}
	}
	return []batches.NewJob{j}, nil
}

// batchManifest is one job per row: an object manifest (fetched later by
// the Pending stage) or a container.
func (b *builder) batchManifest(t v1.PayloadType) ([]batches.NewJob, error) {
	raw := b.sub.GetPayloadUrl()
	what := "manifest of manifests"
	if t == v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS {
		what = "manifest of containers"
	}
	m, err := b.manifest(raw, what)
	if err != nil {
		return nil, err
	}
	if err := checkProfile(m, t, raw); err != nil {
		return nil, err
	}
	jobs := make([]batches.NewJob, len(m.Entries))
	for i, e := range m.Entries {
		if _, err := fetch.CheckURL(e.FileURL, b.p.Policy); err != nil {
			return nil, payloadErrorf(err, "%s %s: line %d: %v", what, raw, e.Line, err)
		}
		j := b.job(i, e.FileURL, v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST)
		if t == v1.PayloadType_PAYLOAD_TYPE_MANIFEST_OF_CONTAINERS {
			j = b.job(i, e.FileURL, v1.PayloadType_PAYLOAD_TYPE_CONTAINER)
			j.Manifest = &v1.Manifest{Files: []*v1.ManifestFile{manifestFile(e)}}
		}
		j.Identifiers = entryIdentifiers(e)
		j.Metadata = entryMetadata(e)
		jobs[i] = j
	}
	return jobs, nil
}

func manifestFile(e checkm.Entry) *v1.ManifestFile {
	return &v1.ManifestFile{
		Url:           e.FileURL,
		HashAlgorithm: e.HashAlgorithm,
		HashValue:     e.HashValue,
		Size:          e.FileSize,
		LastModified:  e.FileLastModified,
		Name:          e.FileName,
	}
}

func entryIdentifiers(e checkm.Entry) *v1.Identifiers {
	if e.PrimaryIdentifier == "" && e.LocalIdentifier == "" {
		return nil
	}
	ids := &v1.Identifiers{PrimaryId: e.PrimaryIdentifier}
	if e.LocalIdentifier != "" {
		ids.LocalId = []string{e.LocalIdentifier}
	}
	return ids
}

// objectIdentifiers are the identifiers an object manifest gives its
// object: the first primary and local identifier found in its rows.
func objectIdentifiers(entries []checkm.Entry) *v1.Identifiers {
	var merged checkm.Entry
	for _, e := range entries {
		if merged.PrimaryIdentifier == "" {
			merged.PrimaryIdentifier = e.PrimaryIdentifier
		}
		if merged.LocalIdentifier == "" {
			merged.LocalIdentifier = e.LocalIdentifier
		}
	}
	return entryIdentifiers(merged)
}

func entryMetadata(e checkm.Entry) *v1.Metadata {
	return nonEmptyMetadata(&v1.Metadata{Who: e.Creator, What: e.Title, When: e.Date, Where: e.Where})
}

func nonEmptyMetadata(m *v1.Metadata) *v1.Metadata {
	if m.GetWho() == "" && m.GetWhat() == "" && m.GetWhen() == "" && m.GetWhere() == "" {
		return nil
	}
	return m
}
