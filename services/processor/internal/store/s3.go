package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/s3store"
)

// S3 is a versioned object store in a bucket of an S3-compatible store,
// laid out as Local is:
//
//	<object>/v1/producer/…       the files of version 1
//	<object>/v1/system/…
//	<object>/v1/manifest.checkm  written last: the version is complete
//
// but for version.json: which job stored a version, and how, is the
// manifest object's own metadata (x-amz-meta-ingestq-jid and
// x-amz-meta-ingestq-mode), which costs no request of its own. A
// version.json beside a manifest without that metadata is read instead.
//
// Every upload carries a SHA-256 checksum that the server checks. A file
// below MultipartThreshold goes up in one request streamed from the
// working file, its SHA-256 the storage manifest's own (as checksum and as
// the signed payload hash: the server refuses other bytes), so the
// processor does not digest it again. A larger one goes up in a multipart
// upload, in parts of PartSize (larger for a file of more than 10,000 of
// them), Concurrency at a time, each part read once from the file, digested
// (its own SHA-256 is its checksum) and sent: memory stays at about
// PartSize×(Concurrency+1) whatever the file's size, and what is read is
// checked against the manifest's size and digest before the upload is
// completed.
//
// A Store that fails aborts its multipart uploads and removes what it
// wrote. One that a crash cut short leaves a version without a manifest and
// perhaps an unfinished multipart upload: the object's next Store removes
// that version's objects and takes the same number, and an upload it finds
// at a key it writes again is resumed: its parts (ListParts) are read back
// from the working file, each kept if its size and SHA-256 are the file's,
// and only the others are sent. Uploads under the object it does not resume
// are aborted before its version is complete; one no Store comes back for
// is aborted by the janitor's cleanup (s3store.AbortStaleUploads).
type S3 struct {
	Client *s3.Client
	Bucket string
	// MultipartThreshold is the size from which a file is sent in parts
	// (0: DefaultMultipartThreshold); a smaller one goes in one request,
	// streamed from the file.
	MultipartThreshold int64
	// PartSize is the size of a multipart upload's parts (0:
	// DefaultPartSize).
	PartSize int64
	// Concurrency is how many parts of one file are sent at once (0:
	// DefaultConcurrency).
	Concurrency int
}

// Defaults of an S3 store's uploads. A file goes up in one request below
// 64 MiB: streamed from the file, it takes no more memory than a part, and
// one request costs the store less than several (on a gateway on the same
// machine, a 16 MiB file went up at 1.5 times the rate in one request as
// in two parts); a retried request sends it again whole.
const (
	DefaultMultipartThreshold = 64 << 20
	DefaultPartSize           = 8 << 20
	DefaultConcurrency        = 4
)

// maxParts is the most parts S3 takes in one upload: a file larger than
// maxParts times the part size goes up in larger parts.
const maxParts = 10_000

// Store implements Storage.
func (s S3) Store(ctx context.Context, req Request) (Version, error) {
	v, err := s.store(ctx, req)
	if err != nil {
		return Version{}, fmt.Errorf("storing %s in s3://%s: %w", req.ARK, s.Bucket, err)
	}
	return v, nil
}

func (s S3) store(ctx context.Context, req Request) (Version, error) {
	entries, err := readManifest(req.ManifestURL)
	if err != nil {
		return Version{}, err
	}
	prefix, err := objectPrefix(req.ARK)
	if err != nil {
		return Version{}, err
	}
	number, existing, err := s.nextVersion(ctx, prefix, req.JobID)
	if err != nil {
		return Version{}, err
	}
	vprefix := prefix + versionDir(number) + "/"
	manifestKey := vprefix + VersionManifest
	if existing {
		return Version{Number: number, ManifestURL: s3store.URL(s.Bucket, manifestKey)}, nil
	}
	expectBytes(ctx, entries)
	if err := s.write(ctx, req, entries, vprefix); err != nil {
		// Removed at once so that no half version lingers until the
		// object's next Store; a crash here leaves it to that Store.
		cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if cerr := s.removeIncomplete(cleanCtx, vprefix); cerr != nil {
			err = errors.Join(err, fmt.Errorf("removing what was written of version %d: %w", number, cerr))
		}
		return Version{}, err
	}
	return Version{Number: number, ManifestURL: s3store.URL(s.Bucket, manifestKey)}, nil
}

// write uploads the files, and last the manifest, which carries the
// version's record.
func (s S3) write(ctx context.Context, req Request, entries []checkm.Entry, vprefix string) error {
	left, err := s.uploadsUnder(ctx, vprefix)
	if err != nil {
		return err
	}
	// The files go up Concurrency at once (a large one's parts are sent
	// that many at once besides): a version of 100,000 small files is that
	// many requests, each waiting for its answer. The version manifest
	// lists the entries at their stored keys (rewritten in place: a
	// version of 100,000 files keeps one list).
	stored := entries
	sending, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, s.concurrency())
	var wg sync.WaitGroup
	for i, e := range entries {
		select {
		case sem <- struct{}{}:
		case <-sending.Done():
		}
		if sending.Err() != nil {
			break
		}
		key := vprefix + e.FileName
		begun := left[key]
		delete(left, key)
		stored[i].FileURL = s3store.URL(s.Bucket, key)
		stored[i].Line = 0
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.upload(sending, e, key, begun); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(sending); err != nil {
		return err
	}
	// Uploads a crashed Store began under the version for files this one
	// does not have: none may outlive the version.
	for key, ups := range left {
		for _, id := range ups {
			if err := s.abort(ctx, key, id); err != nil {
				return err
			}
		}
	}
	var m bytes.Buffer
	if err := checkm.Write(&m, checkm.ProfileObject, ManifestFields(), stored); err != nil {
		return err
	}
	// This upload completes the version.
	key := vprefix + VersionManifest
	sum := sha256.Sum256(m.Bytes())
	_, err = s.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
		Body: bytes.NewReader(m.Bytes()), ContentLength: aws.Int64(int64(m.Len())),
		ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
		Metadata:       map[string]string{metaJobID: req.JobID, metaMode: req.Mode}},
		signedPayload(hex.EncodeToString(sum[:])))
	if err != nil {
		return fmt.Errorf("writing %s: %w", key, err)
	}
	return nil
}

// The manifest object's metadata that records which job stored the
// version, and how (version.json's jid and mode).
const (
	metaJobID = "ingestq-jid"
	metaMode  = "ingestq-mode"
)

// upload sends one file of the storage manifest to key, streaming it from
// the working file and checking it against the manifest's size and digest.
// begun are the multipart uploads at key a crashed Store left, the newest
// last: a large file resumes the newest, the others are aborted.
func (s S3) upload(ctx context.Context, e checkm.Entry, key string, begun []string) error {
	in, size, err := openSource(e)
	if err != nil {
		return err
	}
	defer in.Close()
	if size != e.FileSize {
		return fmt.Errorf("%s: the working file has %d bytes, the storage manifest says %d", e.FileName, size, e.FileSize)
	}
	if digest, ok := sha256Of(e); ok && size < s.multipartThreshold() {
		for _, id := range begun {
			if err := s.abort(ctx, key, id); err != nil {
				return err
			}
		}
		if err := s.putFile(ctx, in, size, digest, e.FileName, key); err != nil {
			return err
		}
		meter(ctx).Add(size)
		return nil
	}
	var resume string
	if len(begun) > 0 {
		resume = begun[len(begun)-1]
		for _, id := range begun[:len(begun)-1] {
			if err := s.abort(ctx, key, id); err != nil {
				return err
			}
		}
	}
	return s.multipart(ctx, in, size, e, key, resume)
}

// part is one part of a multipart upload, as sent or as found.
type part struct {
	number int32
	size   int64
	etag   string
	sha256 string // base64, as S3 gives checksums
}

// multipart sends a large file in parts, resuming the upload resume ("":
// a new one). The file is read once, in order, part by part: each part's
// SHA-256 is its checksum, the whole file's is checked against the
// manifest's before the upload is completed. A part the resumed upload
// holds already, of the same size and SHA-256, is not sent again.
func (s S3) multipart(ctx context.Context, in io.Reader, size int64, e checkm.Entry, key, resume string) error {
	partSize := s.partSizeFor(size)
	var have map[int32]part
	if resume != "" {
		var err error
		if have, err = s.listParts(ctx, key, resume); err != nil {
			return fmt.Errorf("uploading %s: resuming the upload a crashed store began: %w", e.FileName, err)
		}
	}
	upload := resume
	if upload == "" {
		out, err := s.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
		if err != nil {
			return fmt.Errorf("uploading %s: %w", e.FileName, err)
		}
		upload = aws.ToString(out.UploadId)
	}
	whole, err := checkm.NewHash(e.HashAlgorithm)
	if err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	n := int((size + partSize - 1) / partSize)
	done := make([]part, n)
	free := make(chan []byte, s.concurrency()+1)
	for range cap(free) {
		free <- make([]byte, partSize)
	}
	var wg sync.WaitGroup
	var read int64
	resent := 0
	for i := range n {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		k, err := io.ReadFull(in, buf[:min(partSize, size-read)])
		read += int64(k)
		if err != nil {
			cancel(fmt.Errorf("reading %s: %w", e.FileName, err))
			break
		}
		whole.Write(buf[:k])
		sum := sha256.Sum256(buf[:k])
		p := part{number: int32(i + 1), size: int64(k), sha256: base64.StdEncoding.EncodeToString(sum[:])}
		if old, ok := have[p.number]; ok && old.size == p.size && old.sha256 == p.sha256 {
			done[i] = old
			meter(ctx).Advance(p.size)
			free <- buf
			continue
		}
		resent++
		wg.Add(1)
		go func() {
			defer func() { free <- buf; wg.Done() }()
			out, err := s.Client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: aws.String(upload),
				PartNumber: aws.Int32(p.number), Body: bytes.NewReader(buf[:p.size]), ContentLength: aws.Int64(p.size),
				ChecksumSHA256: aws.String(p.sha256)}, signedPayload(hex.EncodeToString(sum[:])))
			if err != nil {
				cancel(fmt.Errorf("uploading %s: part %d: %w", e.FileName, p.number, err))
				return
			}
			p.etag = aws.ToString(out.ETag)
			done[i] = p
			meter(ctx).Add(p.size)
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	switch sum := hex.EncodeToString(whole.Sum(nil)); {
	case read != e.FileSize:
		return fmt.Errorf("%s: stored %d bytes, the storage manifest says %d", e.FileName, read, e.FileSize)
	case sum != e.HashValue:
		return fmt.Errorf("%s: %s of the stored file is %s, the storage manifest says %s", e.FileName, e.HashAlgorithm, sum, e.HashValue)
	}
	completed := make([]types.CompletedPart, n)
	for i, p := range done {
		completed[i] = types.CompletedPart{PartNumber: aws.Int32(p.number), ETag: aws.String(p.etag), ChecksumSHA256: aws.String(p.sha256)}
	}
	if _, err := s.Client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
		UploadId: aws.String(upload), MultipartUpload: &types.CompletedMultipartUpload{Parts: completed}}); err != nil {
		return fmt.Errorf("uploading %s: completing the upload: %w", e.FileName, err)
	}
	if resume != "" {
		// The log says what the resumption saved.
		slog.InfoContext(ctx, "multipart upload resumed", "key", key, "parts", n, "parts_sent_again", resent)
	}
	return nil
}

// listParts lists the parts an unfinished upload holds, by number.
func (s S3) listParts(ctx context.Context, key, upload string) (map[int32]part, error) {
	have := map[int32]part{}
	in := &s3.ListPartsInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: aws.String(upload)}
	for {
		page, err := s.Client.ListParts(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, p := range page.Parts {
			n := aws.ToInt32(p.PartNumber)
			have[n] = part{number: n, size: aws.ToInt64(p.Size), etag: aws.ToString(p.ETag), sha256: aws.ToString(p.ChecksumSHA256)}
		}
		if !aws.ToBool(page.IsTruncated) {
			return have, nil
		}
		if aws.ToString(page.NextPartNumberMarker) == aws.ToString(in.PartNumberMarker) {
			return nil, fmt.Errorf("listing the parts of %s: %w", key, s3store.ErrListingLoops)
		}
		in.PartNumberMarker = page.NextPartNumberMarker
	}
}

// partSizeFor is the part size of a file of size bytes: PartSize, or as
// much more as keeps it within maxParts parts (a whole MiB).
func (s S3) partSizeFor(size int64) int64 {
	p := s.partSize()
	if least := (size + maxParts - 1) / maxParts; least > p {
		p = (least + 1<<20 - 1) &^ (1<<20 - 1)
	}
	return p
}

// putFile sends a file whose SHA-256 the storage manifest gives in one
// request, streamed from the open file (read once, as it is sent; a retry
// reads it again from the start). The manifest's digest is the request's
// payload hash, which its signature covers, and its checksum: the server
// refuses the request unless the bytes it received have that digest, and
// keeps the checksum with the object. Nothing here reads the file to
// digest it again.
func (s S3) putFile(ctx context.Context, f *os.File, size int64, digest []byte, name, key string) error {
	_, err := s.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
		Body: f, ContentLength: aws.Int64(size), ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(digest))},
		signedPayload(hex.EncodeToString(digest)))
	if err != nil {
		return fmt.Errorf("uploading %s: %w", name, err)
	}
	return nil
}

// sha256Of is the SHA-256 the storage manifest gives for e, if it gives
// one.
func sha256Of(e checkm.Entry) ([]byte, bool) {
	if e.HashAlgorithm != "sha256" {
		return nil, false
	}
	raw, err := hex.DecodeString(e.HashValue)
	return raw, err == nil && len(raw) == sha256.Size
}

// signedPayload makes a request's signature cover a payload whose SHA-256
// (hex) is known already, instead of the SDK reading the body to compute
// it (as it does over plain HTTP) or leaving it unsigned (over HTTPS).
func signedPayload(sum string) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("ingestqKnownPayloadHash",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					return next.HandleFinalize(v4.SetPayloadHash(ctx, sum), in)
				}), computePayloadHashID, middleware.Before)
		})
	}
}

// computePayloadHashID is the SDK's step that hashes a request's body for
// its signature (aws/signer/v4's middleware of that ID).
const computePayloadHashID = "ComputePayloadHash"

func (s S3) multipartThreshold() int64 {
	if s.MultipartThreshold > 0 {
		return s.MultipartThreshold
	}
	return DefaultMultipartThreshold
}

func (s S3) partSize() int64 {
	if s.PartSize > 0 {
		return s.PartSize
	}
	return DefaultPartSize
}

func (s S3) concurrency() int {
	if s.Concurrency > 0 {
		return s.Concurrency
	}
	return DefaultConcurrency
}

// objectPrefix is the object's key prefix, named as its lock is.
func objectPrefix(ark string) (string, error) {
	name := queue.LockName(ark)
	if ark == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\") {
		return "", fmt.Errorf("ARK %q cannot name an object prefix", ark)
	}
	return name + "/", nil
}

// nextVersion looks at the object's versions: it returns the version jid
// stored already (existing), or else the number of the next version after
// removing what a crash left: versions without a manifest and multipart
// uploads never finished. The caller holds the object's storage lock, so
// no upload under the object is another's in progress.
func (s S3) nextVersion(ctx context.Context, prefix, jid string) (number int, existing bool, err error) {
	last := 0
	var incomplete []string
	for page, err := range s3store.ListObjects(ctx, s.Client, s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket),
		Prefix: aws.String(prefix), Delimiter: aws.String("/")}) {
		if err != nil {
			return 0, false, fmt.Errorf("listing versions: %w", err)
		}
		for _, cp := range page.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(aws.ToString(cp.Prefix), prefix), "/")
			n, err := strconv.Atoi(strings.TrimPrefix(name, "v"))
			if err != nil || n < 1 || versionDir(n) != name {
				continue
			}
			vprefix := prefix + name + "/"
			rec, complete, err := s.readVersion(ctx, vprefix)
			if err != nil {
				return 0, false, fmt.Errorf("reading version %d: %w", n, err)
			}
			if !complete {
				incomplete = append(incomplete, vprefix)
				continue
			}
			if rec.JobID == jid {
				return n, true, nil
			}
			last = max(last, n)
		}
	}
	// The version this Store writes keeps its unfinished uploads, for it to
	// resume (or abort): it takes the number of the incomplete one.
	next := prefix + versionDir(last+1) + "/"
	if err := s.abortUploads(ctx, prefix, next); err != nil {
		return 0, false, err
	}
	for _, vprefix := range incomplete {
		if err := s.removeObjects(ctx, vprefix); err != nil {
			return 0, false, fmt.Errorf("removing incomplete version %s: %w", vprefix, err)
		}
	}
	return last + 1, false, nil
}

// readVersion reads a version's record if its manifest exists: the
// manifest's metadata, or else its version.json.
func (s S3) readVersion(ctx context.Context, vprefix string) (versionRecord, bool, error) {
	var rec versionRecord
	head, err := s.Client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(vprefix + VersionManifest)})
	if notFound(err) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if jid, ok := head.Metadata[metaJobID]; ok {
		return versionRecord{JobID: jid, Mode: head.Metadata[metaMode]}, true, nil
	}
	out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(vprefix + versionInfo)})
	if err != nil {
		return rec, false, err
	}
	defer out.Body.Close()
	data, err := io.ReadAll(io.LimitReader(out.Body, 1<<20))
	if err != nil {
		return rec, false, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, false, fmt.Errorf("%s: %w", versionInfo, err)
	}
	return rec, true, nil
}

// abortUploads aborts the multipart uploads under prefix, but those under
// keep ("": none kept).
func (s S3) abortUploads(ctx context.Context, prefix, keep string) error {
	for u, err := range s3store.ListUploads(ctx, s.Client, s.Bucket, prefix) {
		if err != nil {
			return fmt.Errorf("listing unfinished multipart uploads: %w", err)
		}
		if keep != "" && strings.HasPrefix(aws.ToString(u.Key), keep) {
			continue
		}
		if err := s.abort(ctx, aws.ToString(u.Key), aws.ToString(u.UploadId)); err != nil {
			return err
		}
	}
	return nil
}

// uploadsUnder lists the unfinished uploads under prefix by key, the ids
// at each key oldest first.
func (s S3) uploadsUnder(ctx context.Context, prefix string) (map[string][]string, error) {
	type begun struct {
		id string
		at time.Time
	}
	found := map[string][]begun{}
	for u, err := range s3store.ListUploads(ctx, s.Client, s.Bucket, prefix) {
		if err != nil {
			return nil, fmt.Errorf("listing unfinished multipart uploads: %w", err)
		}
		found[aws.ToString(u.Key)] = append(found[aws.ToString(u.Key)], begun{aws.ToString(u.UploadId), aws.ToTime(u.Initiated)})
	}
	out := make(map[string][]string, len(found))
	for key, bs := range found {
		slices.SortStableFunc(bs, func(a, b begun) int { return a.at.Compare(b.at) })
		for _, b := range bs {
			out[key] = append(out[key], b.id)
		}
	}
	return out, nil
}

// abort aborts one unfinished upload (one gone already is no error).
func (s S3) abort(ctx context.Context, key, id string) error {
	_, err := s.Client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: aws.String(id)})
	if err != nil && !notFound(err) {
		return fmt.Errorf("aborting the unfinished upload of %s: %w", key, err)
	}
	return nil
}

// removeIncomplete removes a version that has no manifest: its unfinished
// uploads, then its objects. The manifest, if one was written after all,
// goes first, so the version is never complete with files missing.
func (s S3) removeIncomplete(ctx context.Context, vprefix string) error {
	if err := s.abortUploads(ctx, vprefix, ""); err != nil {
		return err
	}
	return s.removeObjects(ctx, vprefix)
}

// removeObjects removes the objects of a version that has no manifest (its
// manifest first, should one have been written after all).
func (s S3) removeObjects(ctx context.Context, vprefix string) error {
	if _, err := s.Client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(vprefix + VersionManifest)}); err != nil && !notFound(err) {
		return err
	}
	for page, err := range s3store.ListObjects(ctx, s.Client, s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(vprefix)}) {
		if err != nil {
			return err
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		out, err := s.Client.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(s.Bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return err
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("deleting %s: %s", aws.ToString(e.Key), aws.ToString(e.Message))
		}
	}
	return nil
}

// notFound reports an S3 error saying the key or upload does not exist.
func notFound(err error) bool {
	var nf *types.NotFound
	var nk *types.NoSuchKey
	var nu *types.NoSuchUpload
	if errors.As(err, &nf) || errors.As(err, &nk) || errors.As(err, &nu) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "NotFound" || api.ErrorCode() == "NoSuchKey")
}

// openSource opens a working file the storage manifest lists, refusing a
// symbolic link (it could lead out of the working folder) and anything but
// a regular file; it returns the file's size.
func openSource(e checkm.Entry) (*os.File, int64, error) {
	src, err := checkm.FilePath(e.FileURL)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", e.FileName, err)
	}
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, 0, fmt.Errorf("%s is a symbolic link (%s)", e.FileName, src)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", e.FileName, err)
	}
	fi, err := in.Stat()
	if err != nil {
		in.Close()
		return nil, 0, fmt.Errorf("%s: %w", e.FileName, err)
	}
	if !fi.Mode().IsRegular() {
		in.Close()
		return nil, 0, fmt.Errorf("%s: %s is not a regular file (%s)", e.FileName, src, fi.Mode().Type())
	}
	return in, fi.Size(), nil
}
