// Package fixity reads stored versions back, wherever the processor stored
// them (file:// URLs of the local store, s3:// URLs of a bucket), and
// checks every file against its version manifest's size and digest.
package fixity

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/s3store"
)

// Reader opens stored files and manifests by URL.
type Reader struct {
	// S3 reads s3:// URLs (nil: they cannot be read).
	S3 *s3.Client
}

// Open opens a file:// or s3:// URL for reading.
func (r Reader) Open(ctx context.Context, raw string) (io.ReadCloser, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch {
	case u.Scheme == "file":
		path, err := checkm.FilePath(raw)
		if err != nil {
			return nil, err
		}
		return os.Open(path)
	case u.Scheme == "s3":
		if r.S3 == nil {
			return nil, fmt.Errorf("%s: no S3 store is configured (INGESTQ_S3_*) to read it from", raw)
		}
		bucket, key, err := s3store.ParseURL(raw)
		if err != nil {
			return nil, err
		}
		out, err := r.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		var missing *types.NoSuchKey
		if errors.As(err, &missing) {
			return nil, fmt.Errorf("%s: %w", raw, fs.ErrNotExist)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", raw, err)
		}
		return out.Body, nil
	}
	return nil, fmt.Errorf("%s is not a file:// or s3:// URL", raw)
}

// Manifest reads a version manifest.
func (r Reader) Manifest(ctx context.Context, manifestURL string) (*checkm.Manifest, error) {
	f, err := r.Open(ctx, manifestURL)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", manifestURL, err)
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", manifestURL, err)
	}
	return m, nil
}

// Mismatch is a file that does not match its manifest.
type Mismatch struct {
	File    string
	Problem string
}

// Report is what Verify found.
type Report struct {
	Files      int
	Bytes      int64
	Mismatches []Mismatch
}

// Verify reads every file a version manifest lists and checks its size and
// digest. A file that cannot be read is a mismatch; only a manifest that
// cannot be read, or a context that ends, is an error.
func (r Reader) Verify(ctx context.Context, manifestURL string) (Report, error) {
	m, err := r.Manifest(ctx, manifestURL)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	for _, e := range m.Entries {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Files++
		n, sum, err := r.digest(ctx, e)
		rep.Bytes += n
		switch {
		case err != nil:
			rep.Mismatches = append(rep.Mismatches, Mismatch{File: e.FileName, Problem: fmt.Sprintf("unreadable: %v", err)})
		case e.FileSize >= 0 && n != e.FileSize:
			rep.Mismatches = append(rep.Mismatches, Mismatch{File: e.FileName, Problem: fmt.Sprintf("size: %d bytes stored, the manifest says %d", n, e.FileSize)})
		case sum != e.HashValue:
			rep.Mismatches = append(rep.Mismatches, Mismatch{File: e.FileName,
				Problem: fmt.Sprintf("digest: %s of the stored file is %s, the manifest says %s", e.HashAlgorithm, sum, e.HashValue)})
		}
	}
	return rep, nil
}

func (r Reader) digest(ctx context.Context, e checkm.Entry) (int64, string, error) {
	h, err := checkm.NewHash(e.HashAlgorithm)
	if err != nil {
		return 0, "", err
	}
	f, err := r.Open(ctx, e.FileURL)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	n, err := io.Copy(h, f)
	if err != nil {
		return n, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Location says where a deployment's versions are stored.
type Location struct {
	// Root is the local store's folder, or Bucket the S3 store's bucket.
	Root   string
	Bucket string
}

// ManifestURL is the URL of a version's manifest, laid out as the
// processor's stores lay it out: <object>/v<N>/manifest.checkm.
func (l Location) ManifestURL(ark string, version int) (string, error) {
	name, err := objectName(ark)
	if err != nil {
		return "", err
	}
	rel := name + "/v" + strconv.Itoa(version) + "/manifest.checkm"
	if l.Bucket != "" {
		return s3store.URL(l.Bucket, rel), nil
	}
	return checkm.FileURL(filepath.Join(l.Root, filepath.FromSlash(rel))), nil
}

// objectName is the folder (or key prefix) of an object in the store.
func objectName(ark string) (string, error) {
	name := queue.LockName(ark)
	if ark == "" || name == "." || name == ".." || !filepath.IsLocal(name) || filepath.Base(name) != name {
		return "", fmt.Errorf("ARK %q cannot name an object in the store", ark)
	}
	return name, nil
}

// LatestVersion is the number of the latest complete version of the
// object ark names (its highest v<N> that has a manifest); an error
// wrapping fs.ErrNotExist when the store holds none.
func (l Location) LatestVersion(ctx context.Context, r Reader, ark string) (int, error) {
	name, err := objectName(ark)
	if err != nil {
		return 0, err
	}
	latest := 0
	if l.Bucket != "" {
		if r.S3 == nil {
			return 0, fmt.Errorf("no S3 store is configured (INGESTQ_S3_*) to read %s from", ark)
		}
		in := s3.ListObjectsV2Input{Bucket: aws.String(l.Bucket), Prefix: aws.String(name + "/")}
		for page, err := range s3store.ListObjects(ctx, r.S3, in) {
			if err != nil {
				return 0, fmt.Errorf("listing the versions of %s: %w", ark, err)
			}
			for _, o := range page.Contents {
				parts := strings.Split(aws.ToString(o.Key), "/")
				if len(parts) == 3 && parts[2] == "manifest.checkm" && isVersion(parts[1]) {
					n, _ := strconv.Atoi(parts[1][1:])
					latest = max(latest, n)
				}
			}
		}
	} else {
		vs, err := os.ReadDir(filepath.Join(l.Root, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("listing the versions of %s: %w", ark, err)
		}
		for _, v := range vs {
			if !v.IsDir() || !isVersion(v.Name()) {
				continue
			}
			if _, err := os.Stat(filepath.Join(l.Root, name, v.Name(), "manifest.checkm")); err == nil {
				n, _ := strconv.Atoi(v.Name()[1:])
				latest = max(latest, n)
			}
		}
	}
	if latest == 0 {
		return 0, fmt.Errorf("%s: no version in the store: %w", ark, fs.ErrNotExist)
	}
	return latest, nil
}

// Sample picks up to n complete versions of the store at random (each
// version equally likely), as manifest URLs. It walks the whole store but
// holds only n URLs at a time.
func (l Location) Sample(ctx context.Context, r Reader, n int, intn func(int) int) ([]string, error) {
	var picked []string
	seen := 0
	keep := func(u string) {
		seen++
		if len(picked) < n {
			picked = append(picked, u)
		} else if j := intn(seen); j < n {
			picked[j] = u
		}
	}
	if l.Bucket != "" {
		if r.S3 == nil {
			return nil, fmt.Errorf("no S3 store is configured (INGESTQ_S3_*) to sample")
		}
		for page, err := range s3store.ListObjects(ctx, r.S3, s3.ListObjectsV2Input{Bucket: aws.String(l.Bucket)}) {
			if err != nil {
				return nil, fmt.Errorf("listing s3://%s: %w", l.Bucket, err)
			}
			for _, o := range page.Contents {
				parts := strings.Split(aws.ToString(o.Key), "/")
				if len(parts) == 3 && parts[2] == "manifest.checkm" && isVersion(parts[1]) {
					keep(s3store.URL(l.Bucket, aws.ToString(o.Key)))
				}
			}
		}
		return picked, nil
	}
	objects, err := os.ReadDir(l.Root)
	if err != nil {
		return nil, fmt.Errorf("listing the store: %w", err)
	}
	for _, obj := range objects {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !obj.IsDir() {
			continue
		}
		vs, err := os.ReadDir(filepath.Join(l.Root, obj.Name()))
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", obj.Name(), err)
		}
		for _, v := range vs {
			m := filepath.Join(l.Root, obj.Name(), v.Name(), "manifest.checkm")
			if !v.IsDir() || !isVersion(v.Name()) {
				continue
			}
			if _, err := os.Stat(m); err == nil {
				keep(checkm.FileURL(m))
			}
		}
	}
	return picked, nil
}

// isVersion reports a version folder's name: v1, v2, …
func isVersion(name string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "v"))
	return err == nil && n > 0 && "v"+strconv.Itoa(n) == name
}
