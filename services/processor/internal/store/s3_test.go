package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
)

// s3Store is an S3 store on a fresh bucket of a real gateway, with the
// smallest parts S3 allows so that a file of a few MiB goes up in parts.
func s3Store(t *testing.T, srv *s3test.Server, endpoint string) S3 {
	t.Helper()
	bucket := srv.CreateBucket(t)
	set := srv.Settings(bucket)
	if endpoint != "" {
		set.Endpoint = endpoint
	}
	c, err := s3store.Client(context.Background(), set)
	if err != nil {
		t.Fatal(err)
	}
	return S3{Client: c, Bucket: bucket, MultipartThreshold: 5 << 20, PartSize: 5 << 20, Concurrency: 2}
}

func keys(t *testing.T, s S3, prefix string) []string {
	t.Helper()
	var out []string
	p := s3.NewListObjectsV2Paginator(s.Client, &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			out = append(out, aws.ToString(o.Key))
		}
	}
	slices.Sort(out)
	return out
}

func uploads(t *testing.T, s S3) []string {
	t.Helper()
	out, err := s.Client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, u := range out.Uploads {
		ks = append(ks, aws.ToString(u.Key))
	}
	return ks
}

func getObject(t *testing.T, s S3, key string) []byte {
	t.Helper()
	out, err := s.Client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("getting %s: %v", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// bigContent is n bytes that differ from part to part.
func bigContent(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/4093)
	}
	return string(b)
}

func TestS3StoresVersionsLaidOutAsLocalAndARetriedJobGetsItsOwnBack(t *testing.T) {
	srv := s3test.Start(t)
	s := s3Store(t, srv, "")
	ctx := context.Background()
	const ark = "ark:/99999/fk4x"
	big := bigContent(12<<20 + 17) // three parts
	v2 := storeTwiceAndRetry(ctx, t, s, ark, map[string]string{"producer/a.txt": "second", "producer/sub/big.bin": big})
	want := []string{"ark_99999_fk4x/v1/manifest.checkm", "ark_99999_fk4x/v1/producer/a.txt", "ark_99999_fk4x/v1/system/mrt-erc.txt",
		"ark_99999_fk4x/v2/manifest.checkm", "ark_99999_fk4x/v2/producer/a.txt", "ark_99999_fk4x/v2/producer/sub/big.bin"}
	if got := keys(t, s, ""); !slices.Equal(got, want) {
		t.Errorf("bucket holds\n%v\nwant\n%v", got, want)
	}
	if want := "s3://" + s.Bucket + "/ark_99999_fk4x/v2/manifest.checkm"; v2.ManifestURL != want {
		t.Errorf("manifest URL %s, want %s", v2.ManifestURL, want)
	}
	m, err := checkm.Parse(bytes.NewReader(getObject(t, s, "ark_99999_fk4x/v2/manifest.checkm")), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Entries) != 2 {
		t.Fatalf("version 2 lists %d files, want 2", len(m.Entries))
	}
	for _, e := range m.Entries {
		bucket, key, err := s3store.ParseURL(e.FileURL)
		if err != nil || bucket != s.Bucket || key != "ark_99999_fk4x/v2/"+e.FileName {
			t.Errorf("%s is stored at %s", e.FileName, e.FileURL)
			continue
		}
		data := getObject(t, s, key)
		sum := sha256.Sum256(data)
		if int64(len(data)) != e.FileSize || hex.EncodeToString(sum[:]) != e.HashValue {
			t.Errorf("%s: stored %d bytes sha256 %x, manifest says %d bytes %s", e.FileName, len(data), sum, e.FileSize, e.HashValue)
		}
	}
	if got := uploads(t, s); len(got) != 0 {
		t.Errorf("unfinished multipart uploads left: %v", got)
	}
}

func TestS3ReadsWhichJobStoredAVersionFromItsVersionJSON(t *testing.T) {
	srv := s3test.Start(t)
	s := s3Store(t, srv, "")
	ctx := context.Background()
	// Version 1 as recorded by a version.json beside a manifest without
	// the record in its metadata.
	for key, body := range map[string]string{
		"ark_99999_fk4x/v1/producer/a":      "1",
		"ark_99999_fk4x/v1/version.json":    `{"ark":"ark:/99999/fk4x","jid":"jid0000000001","mode":"add"}`,
		"ark_99999_fk4x/v1/manifest.checkm": "#%checkm_0.7\n#%eof\n",
	} {
		if _, err := s.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
			Body: strings.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	again, err := s.Store(ctx, Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000001", Mode: "add", ManifestURL: stage(t, map[string]string{"producer/a": "1"})})
	if err != nil || again.Number != 1 {
		t.Fatalf("the job that stored version 1 stored again: %+v, %v; want version 1 back", again, err)
	}
	next, err := s.Store(ctx, Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000002", Mode: "update", ManifestURL: stage(t, map[string]string{"producer/a": "2"})})
	if err != nil || next.Number != 2 {
		t.Fatalf("another job stored: %+v, %v; want version 2", next, err)
	}
	head, err := s.Client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("ark_99999_fk4x/v2/manifest.checkm")})
	if err != nil {
		t.Fatal(err)
	}
	if head.Metadata[metaJobID] != "jid0000000002" || head.Metadata[metaMode] != "update" {
		t.Errorf("version 2's manifest records %v, want job jid0000000002 and mode update", head.Metadata)
	}
}

func TestS3RemovesWhatACrashLeftAndAbortsItsMultipartUpload(t *testing.T) {
	srv := s3test.Start(t)
	s := s3Store(t, srv, "")
	ctx := context.Background()
	const ark = "ark:/99999/fk4x"
	if _, err := s.Store(ctx, Request{ARK: ark, JobID: "jid0000000001", Mode: "add", ManifestURL: stage(t, map[string]string{"producer/a": "1"})}); err != nil {
		t.Fatal(err)
	}
	// A crash while version 2 went up: one file written, one large file's
	// multipart upload begun, no manifest.
	if _, err := s.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("ark_99999_fk4x/v2/producer/half"),
		Body: strings.NewReader("hal")}); err != nil {
		t.Fatal(err)
	}
	mp, err := s.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String("ark_99999_fk4x/v2/producer/big")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s.Bucket), Key: aws.String("ark_99999_fk4x/v2/producer/big"),
		UploadId: mp.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader(bigContent(5 << 20))}); err != nil {
		t.Fatal(err)
	}
	if got := uploads(t, s); len(got) != 1 {
		t.Fatalf("the crashed upload is not listed: %v", got)
	}
	v, err := s.Store(ctx, Request{ARK: ark, JobID: "jid0000000007", Mode: "update", ManifestURL: stage(t, map[string]string{"producer/b": "2"})})
	if err != nil {
		t.Fatal(err)
	}
	if v.Number != 2 {
		t.Errorf("stored as version %d, want 2 (the incomplete one replaced)", v.Number)
	}
	want := []string{"ark_99999_fk4x/v2/manifest.checkm", "ark_99999_fk4x/v2/producer/b"}
	if got := keys(t, s, "ark_99999_fk4x/v2/"); !slices.Equal(got, want) {
		t.Errorf("version 2 holds %v, want %v", got, want)
	}
	if got := uploads(t, s); len(got) != 0 {
		t.Errorf("the crashed multipart upload is still there: %v", got)
	}
}

// faulty sits between the store and the gateway and answers some requests
// itself with an error status, as an overloaded or broken store would.
type faulty struct {
	proxy *httputil.ReverseProxy
	// fail decides, for each request, the status to answer with (0: pass
	// it on).
	fail     func(r *http.Request) int
	answered atomic.Int64
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if code := f.fail(r); code != 0 {
		f.answered.Add(1)
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(code)
		return
	}
	f.proxy.ServeHTTP(w, r)
}

func startFaulty(t *testing.T, srv *s3test.Server, fail func(r *http.Request) int) (*faulty, string) {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	f := &faulty{proxy: httputil.NewSingleHostReverseProxy(target), fail: fail}
	hs := httptest.NewServer(f)
	t.Cleanup(hs.Close)
	return f, hs.URL
}

func TestS3RetriesServerErrorsAndThrottling(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	// Every third request is refused, alternately as throttled and as a
	// server error.
	f, endpoint := startFaulty(t, srv, func(r *http.Request) int {
		switch n.Add(1) % 6 {
		case 0:
			return http.StatusServiceUnavailable
		case 3:
			return http.StatusInternalServerError
		}
		return 0
	})
	s := s3Store(t, srv, endpoint)
	big := bigContent(11 << 20)
	v, err := s.Store(context.Background(), Request{ARK: "ark:/99999/fk4r", JobID: "jid0000000001", Mode: "add",
		ManifestURL: stage(t, map[string]string{"producer/a": "1", "producer/big": big, "system/x": "x"})})
	if err != nil {
		t.Fatal(err)
	}
	if f.answered.Load() == 0 {
		t.Fatal("no request was refused: the test tested nothing")
	}
	if v.Number != 1 || len(keys(t, s, "ark_99999_fk4r/v1/")) != 4 {
		t.Errorf("version %d holds %v", v.Number, keys(t, s, ""))
	}
	if data := getObject(t, s, "ark_99999_fk4r/v1/producer/big"); string(data) != big {
		t.Errorf("big file stored as %d bytes, want %d", len(data), len(big))
	}
}

func TestS3FailuresAbortTheMultipartUploadAndLeaveNoVersion(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		fail    func(r *http.Request) int
		prepare func(t *testing.T, manifestURL string)
		want    string
	}{
		{name: "a part the store keeps refusing", fail: func(r *http.Request) int {
			if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == "2" {
				return http.StatusInternalServerError
			}
			return 0
		}, want: "uploading producer/big"},
		{name: "a large source with other bytes than the manifest says", prepare: func(t *testing.T, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			f, err := os.OpenFile(filepath.Join(filepath.Dir(p), "producer", "big"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("TAMPERED"), 6<<20); err != nil {
				t.Fatal(err)
			}
		}, want: "producer/big: sha256 of the stored file is"},
		{name: "a small source with other bytes than the manifest says", prepare: func(t *testing.T, manifestURL string) {
			p, _ := checkm.FilePath(manifestURL)
			os.WriteFile(filepath.Join(filepath.Dir(p), "producer", "a"), []byte("B"), 0o644)
		}, want: "uploading producer/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint := ""
			if tc.fail != nil {
				_, endpoint = startFaulty(t, srv, tc.fail)
			}
			s := s3Store(t, srv, endpoint)
			s.Client = s3.New(s.Client.Options(), func(o *s3.Options) { o.RetryMaxAttempts = 2 })
			u := stage(t, map[string]string{"producer/a": "A", "producer/big": bigContent(12 << 20)})
			if tc.prepare != nil {
				tc.prepare(t, u)
			}
			_, err := s.Store(ctx, Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000001", Mode: "add", ManifestURL: u})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "storing ark:/99999/fk4x in s3://"+s.Bucket) {
				t.Fatalf("Store error %v; want one naming the ARK, the bucket and %q", err, tc.want)
			}
			if got := keys(t, s, ""); len(got) != 0 {
				t.Errorf("a failed Store left %v", got)
			}
			if got := uploads(t, s); len(got) != 0 {
				t.Errorf("a failed Store left unfinished multipart uploads: %v", got)
			}
		})
	}
}

// TestS3ResumesTheMultipartUploadACrashLeftSendingOnlyThePartsItLacks: a
// Store cut short by a crash left version 1 without a manifest, a small
// file, and a large file's upload holding parts 1 and 2 of 5, its part 3
// holding other bytes. The Store that comes back takes version 1 again,
// finds the upload (ListParts), keeps the parts whose size and SHA-256 are
// the working file's and sends the others only: part 3 again, 4 and 5.
// The file stored is the working file, and no upload is left.
func TestS3ResumesTheMultipartUploadACrashLeftSendingOnlyThePartsItLacks(t *testing.T) {
	srv := s3test.Start(t)
	var mu sync.Mutex
	var sent []string // the part numbers sent through the proxy
	_, endpoint := startFaulty(t, srv, func(r *http.Request) int {
		if n := r.URL.Query().Get("partNumber"); r.Method == http.MethodPut && n != "" {
			mu.Lock()
			sent = append(sent, n)
			mu.Unlock()
		}
		return 0
	})
	s := s3Store(t, srv, endpoint)
	direct := s3Store(t, srv, "")
	direct.Bucket = s.Bucket
	ctx := context.Background()
	big := bigContent(23 << 20) // five parts of 5 MiB, the last of 3 MiB
	u := stage(t, map[string]string{"producer/a": "A", "producer/big": big})
	key := "ark_99999_fk4x/v1/producer/big"
	if _, err := direct.Client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("ark_99999_fk4x/v1/producer/a"),
		Body: strings.NewReader("A")}); err != nil {
		t.Fatal(err)
	}
	mp, err := direct.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{big[:5<<20], big[5<<20 : 10<<20], strings.Repeat("?", 5<<20)} {
		sum := sha256.Sum256([]byte(body))
		if _, err := direct.Client.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(s.Bucket), Key: aws.String(key), UploadId: mp.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: strings.NewReader(body), ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:]))}); err != nil {
			t.Fatal(err)
		}
	}

	v, err := s.Store(ctx, Request{ARK: "ark:/99999/fk4x", JobID: "jid0000000001", Mode: "add", ManifestURL: u})
	if err != nil {
		t.Fatal(err)
	}
	if v.Number != 1 {
		t.Errorf("stored as version %d, want 1 (the incomplete one taken again)", v.Number)
	}
	slices.Sort(sent) // parts go up at once, in any order
	if want := []string{"3", "4", "5"}; !slices.Equal(sent, want) {
		t.Errorf("parts sent %v, want %v: the two found whole are kept", sent, want)
	}
	if data := getObject(t, s, key); string(data) != big {
		t.Errorf("the large file stored is %d bytes, not the working file's %d", len(data), len(big))
	}
	if got := uploads(t, s); len(got) != 0 {
		t.Errorf("unfinished uploads left: %v", got)
	}
}

// TestStaleUploadsAreAbortedAndFreshOnesKept: the janitor's abort of
// uploads nothing came back for spares those begun since its bound and
// those at keys it is told are being stored.
func TestStaleUploadsAreAbortedAndFreshOnesKept(t *testing.T) {
	srv := s3test.Start(t)
	s := s3Store(t, srv, "")
	ctx := context.Background()
	for _, key := range []string{"ark_1/v1/producer/old", "ark_2/v1/producer/storing"} {
		if _, err := s.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s3store.AbortStaleUploads(ctx, s.Client, s.Bucket, time.Now().Add(-time.Hour), nil)
	if err != nil || n != 0 || len(uploads(t, s)) != 2 {
		t.Fatalf("uploads begun within the bound: %d aborted (%v), %v left; want none aborted", n, err, uploads(t, s))
	}
	n, err = s3store.AbortStaleUploads(ctx, s.Client, s.Bucket, time.Now().Add(time.Minute),
		func(key string) bool { return strings.HasPrefix(key, "ark_2/") })
	if err != nil || n != 1 {
		t.Fatalf("%d aborted, %v; want 1", n, err)
	}
	if got := uploads(t, s); !slices.Equal(got, []string{"ark_2/v1/producer/storing"}) {
		t.Errorf("left %v, want the one being stored", got)
	}
}
