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
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
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
// processor does not digest it again. A larger one goes up in parts of
// PartSize, Concurrency at a time, read from the file as they are sent:
// memory stays at about PartSize×(Concurrency+1) whatever the file's size,
// and what is read is checked against the manifest's size and digest. A Store that fails
// aborts its multipart uploads and removes what it wrote; one that a crash
// cut short leaves a version without a manifest and perhaps an unfinished
// multipart upload, which the object's next Store removes and aborts.
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
	tm := transfermanager.New(s.Client, func(o *transfermanager.Options) {
		o.PartSizeBytes = s.partSize()
		o.MultipartUploadThreshold = s.multipartThreshold()
		o.Concurrency = s.concurrency()
		o.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmSha256
		o.FailTimeout = time.Minute // to abort a failed multipart upload after ctx ended
	})
	stored := make([]checkm.Entry, 0, len(entries))
	for _, e := range entries {
		key := vprefix + e.FileName
		if err := s.upload(ctx, tm, e, key); err != nil {
			return err
		}
		e.FileURL = s3store.URL(s.Bucket, key)
		e.Line = 0
		stored = append(stored, e)
	}
	var m bytes.Buffer
	if err := checkm.Write(&m, checkm.ProfileObject, ManifestFields(), stored); err != nil {
		return err
	}
	// This upload completes the version.
	key := vprefix + VersionManifest
	sum := sha256.Sum256(m.Bytes())
	_, err := s.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
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
func (s S3) upload(ctx context.Context, tm *transfermanager.Client, e checkm.Entry, key string) error {
	in, size, err := openSource(e)
	if err != nil {
		return err
	}
	defer in.Close()
	if size != e.FileSize {
		return fmt.Errorf("%s: the working file has %d bytes, the storage manifest says %d", e.FileName, size, e.FileSize)
	}
	if digest, ok := sha256Of(e); ok && size < s.multipartThreshold() {
		if err := s.putFile(ctx, in, size, digest, e.FileName, key); err != nil {
			return err
		}
		meter(ctx).Add(size)
		return nil
	}
	h, err := checkm.NewHash(e.HashAlgorithm)
	if err != nil {
		return fmt.Errorf("%s: %w", e.FileName, err)
	}
	counted := &countingReader{r: meter(ctx).Reader(io.TeeReader(in, h))}
	input := &transfermanager.UploadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
		Body: counted, ContentLength: aws.Int64(size), ChecksumAlgorithm: tmtypes.ChecksumAlgorithmSha256}
	if _, err := tm.UploadObject(ctx, input); err != nil {
		return fmt.Errorf("uploading %s: %w", e.FileName, err)
	}
	switch sum := hex.EncodeToString(h.Sum(nil)); {
	case counted.n != e.FileSize:
		return fmt.Errorf("%s: stored %d bytes, the storage manifest says %d", e.FileName, counted.n, e.FileSize)
	case sum != e.HashValue:
		return fmt.Errorf("%s: %s of the stored file is %s, the storage manifest says %s", e.FileName, e.HashAlgorithm, sum, e.HashValue)
	}
	return nil
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

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
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
	if err := s.abortUploads(ctx, prefix); err != nil {
		return 0, false, err
	}
	for _, vprefix := range incomplete {
		if err := s.removeIncomplete(ctx, vprefix); err != nil {
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

// abortUploads aborts the multipart uploads under prefix.
func (s S3) abortUploads(ctx context.Context, prefix string) error {
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket), Prefix: aws.String(prefix)}
	for {
		page, err := s.Client.ListMultipartUploads(ctx, in)
		if err != nil {
			return fmt.Errorf("listing unfinished multipart uploads: %w", err)
		}
		for _, u := range page.Uploads {
			_, err := s.Client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: u.Key, UploadId: u.UploadId})
			if err != nil && !notFound(err) {
				return fmt.Errorf("aborting the unfinished upload of %s: %w", aws.ToString(u.Key), err)
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			return nil
		}
		// A next page from where this one began would be listed for ever.
		key, id := page.NextKeyMarker, page.NextUploadIdMarker
		if aws.ToString(key) == aws.ToString(in.KeyMarker) && aws.ToString(id) == aws.ToString(in.UploadIdMarker) {
			return fmt.Errorf("listing unfinished multipart uploads under %s: %w", prefix, s3store.ErrListingLoops)
		}
		in.KeyMarker, in.UploadIdMarker = key, id
	}
}

// removeIncomplete removes a version that has no manifest: its unfinished
// uploads, then its objects. The manifest, if one was written after all,
// goes first, so the version is never complete with files missing.
func (s S3) removeIncomplete(ctx context.Context, vprefix string) error {
	if err := s.abortUploads(ctx, vprefix); err != nil {
		return err
	}
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
