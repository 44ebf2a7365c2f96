package s3store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// UploadsClient is what listing and aborting unfinished multipart uploads
// takes; *s3.Client is one.
type UploadsClient interface {
	ListMultipartUploads(ctx context.Context, in *s3.ListMultipartUploadsInput, opts ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, opts ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

// ListUploads yields every unfinished multipart upload under prefix in the
// bucket, or the error that ended the listing (one that would never end,
// its next page asked from where the last began, is ErrListingLoops).
func ListUploads(ctx context.Context, c UploadsClient, bucket, prefix string) iter.Seq2[types.MultipartUpload, error] {
	return func(yield func(types.MultipartUpload, error) bool) {
		in := &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(prefix)}
		for {
			page, err := c.ListMultipartUploads(ctx, in)
			if err != nil {
				yield(types.MultipartUpload{}, err)
				return
			}
			for _, u := range page.Uploads {
				if !yield(u, nil) {
					return
				}
			}
			if !aws.ToBool(page.IsTruncated) {
				return
			}
			key, id := page.NextKeyMarker, page.NextUploadIdMarker
			if aws.ToString(key) == aws.ToString(in.KeyMarker) && aws.ToString(id) == aws.ToString(in.UploadIdMarker) {
				yield(types.MultipartUpload{}, fmt.Errorf("listing the unfinished uploads of s3://%s/%s: %w", bucket, prefix, ErrListingLoops))
				return
			}
			in.KeyMarker, in.UploadIdMarker = key, id
		}
	}
}

// AbortStaleUploads aborts the unfinished multipart uploads of the bucket
// begun before before, and returns how many. A processor that stores a
// version aborts what it does not finish, and one that comes back to a
// version a crash cut short resumes or aborts what it finds there; an
// upload older than any storing step takes is one nothing will come back
// for (its job failed and was deleted, say), which a store keeps, and
// bills, until it is aborted. keep, if not nil, spares the uploads at keys
// it reports true for (an object being stored now).
func AbortStaleUploads(ctx context.Context, c UploadsClient, bucket string, before time.Time, keep func(key string) bool) (int, error) {
	n := 0
	var errs []error
	for u, err := range ListUploads(ctx, c, bucket, "") {
		if err != nil {
			return n, errors.Join(append(errs, err)...)
		}
		key := aws.ToString(u.Key)
		if !aws.ToTime(u.Initiated).Before(before) || (keep != nil && keep(key)) {
			continue
		}
		_, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: u.Key, UploadId: u.UploadId})
		var api smithy.APIError
		switch {
		case err == nil:
			n++
		case errors.As(err, &api) && strings.EqualFold(api.ErrorCode(), "NoSuchUpload"):
		default:
			errs = append(errs, fmt.Errorf("aborting the unfinished upload of %s: %w", key, err))
		}
	}
	return n, errors.Join(errs...)
}
