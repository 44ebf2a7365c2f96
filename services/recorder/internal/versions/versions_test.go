package versions

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
)

const token = "versions-test-token"

var fields = []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}

// localVersion writes version 1 of an object into a local store folder as
// the processor lays it out, and returns its manifest's file:// URL.
func localVersion(t *testing.T, root string, files map[string]string) string {
	t.Helper()
	vdir := filepath.Join(root, "ark_99999_fk4x", "v1")
	var entries []checkm.Entry
	for name, content := range files {
		p := filepath.Join(vdir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, checkm.Entry{FileURL: checkm.FileURL(p), HashAlgorithm: "sha256", HashValue: strings.Repeat("0", 64),
			FileSize: int64(len(content)), FileName: name})
	}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, checkm.ProfileObject, fields, entries); err != nil {
		t.Fatal(err)
	}
	m := filepath.Join(vdir, "manifest.checkm")
	if err := os.WriteFile(m, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return checkm.FileURL(m)
}

func get(t *testing.T, url, bearer string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

func TestTheLocalStoreIsServedBehindTheAdminTokenWithFileURLsOnTheEndpoint(t *testing.T) {
	root := t.TempDir()
	manifestURL := localVersion(t, root, map[string]string{"producer/a b.txt": "alpha", "producer/c|d.txt": "pipe", "system/mrt-erc.txt": "erc:\n"})
	mux := http.NewServeMux()
	store := Store{Root: root}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	store.PublicURL = srv.URL
	mux.Handle(Prefix, store.Handler(token))

	info, err := store.Describe(context.Background(), manifestURL, 1, "jid1")
	if err != nil {
		t.Fatal(err)
	}
	if want := srv.URL + "/versions/ark_99999_fk4x/v1/manifest.checkm"; info.FetchURL != want || info.TotalSize != 14 || info.FileCount != 3 {
		t.Errorf("info %+v, want %s, 14 bytes, 3 files", info, want)
	}
	if code, _ := get(t, info.FetchURL, ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, _ := get(t, info.FetchURL, "wrong"); code != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d, want 401", code)
	}
	code, body := get(t, info.FetchURL, token)
	if code != http.StatusOK {
		t.Fatalf("manifest: %d %s", code, body)
	}
	m, err := checkm.Parse(strings.NewReader(body), checkm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Entries) != 3 || !slices.ContainsFunc(m.Entries, func(e checkm.Entry) bool { return e.FileName == "producer/c|d.txt" }) ||
		!strings.Contains(body, "\n#%encoded | %7c\n") {
		t.Fatalf("served manifest, not 3 files with producer/c|d.txt, marked:\n%s", body)
	}
	for _, e := range m.Entries {
		if !strings.HasPrefix(e.FileURL, srv.URL+"/versions/ark_99999_fk4x/v1/") {
			t.Errorf("%s is listed at %s, not on the endpoint", e.FileName, e.FileURL)
			continue
		}
		code, data := get(t, e.FileURL, token)
		if code != http.StatusOK || int64(len(data)) != e.FileSize {
			t.Errorf("%s: %d, %q", e.FileName, code, data)
		}
	}
	// A version a crash left without its manifest, and paths out of the
	// store, are not served.
	os.MkdirAll(filepath.Join(root, "ark_99999_fk4x", "v2", "producer"), 0o755)
	os.WriteFile(filepath.Join(root, "ark_99999_fk4x", "v2", "producer", "half"), []byte("hal"), 0o644)
	os.WriteFile(filepath.Join(filepath.Dir(root), "secret"), []byte("s"), 0o644)
	for _, p := range []string{"/versions/ark_99999_fk4x/v2/producer/half", "/versions/ark_99999_fk4x/v1/../../../secret",
		"/versions/ark_99999_fk4x/v1/%2e%2e/%2e%2e/%2e%2e/secret", "/versions/ark_99999_fk4x/v1/producer"} {
		if code, body := get(t, srv.URL+p, token); code != http.StatusNotFound {
			t.Errorf("%s: %d %q, want 404", p, code, body)
		}
	}
}

func TestAnS3VersionIsDescribedWithAPresignedURLAnyHostCanFetch(t *testing.T) {
	gw := s3test.Start(t)
	bucket := gw.CreateBucket(t)
	c, err := s3store.Client(context.Background(), gw.Settings(bucket))
	if err != nil {
		t.Fatal(err)
	}
	entries := []checkm.Entry{{FileURL: s3store.URL(bucket, "ark_99999_fk4x/v1/producer/a"), HashAlgorithm: "sha256",
		HashValue: strings.Repeat("0", 64), FileSize: 5, FileName: "producer/a"},
		{FileURL: s3store.URL(bucket, "ark_99999_fk4x/v1/system/b"), HashAlgorithm: "sha256",
			HashValue: strings.Repeat("0", 64), FileSize: 7, FileName: "system/b"}}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, checkm.ProfileObject, fields, entries); err != nil {
		t.Fatal(err)
	}
	const key = "ark_99999_fk4x/v1/manifest.checkm"
	if _, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key),
		Body: bytes.NewReader(buf.Bytes())}); err != nil {
		t.Fatal(err)
	}
	store := Store{S3: c}
	info, err := store.Describe(context.Background(), s3store.URL(bucket, key), 1, "jid1")
	if err != nil {
		t.Fatal(err)
	}
	if info.TotalSize != 12 || info.FileCount != 2 || info.FetchExpires.IsZero() {
		t.Errorf("info %+v, want 12 bytes, 2 files, an expiry", info)
	}
	if !strings.HasPrefix(info.FetchURL, gw.Endpoint+"/"+bucket+"/"+key+"?") || !strings.Contains(info.FetchURL, "X-Amz-Signature=") {
		t.Errorf("fetch URL %s is not a presigned URL of the manifest", info.FetchURL)
	}
	// No credentials: the URL alone fetches it.
	if code, body := get(t, info.FetchURL, ""); code != http.StatusOK || body != buf.String() {
		t.Errorf("fetching the presigned URL: %d %q", code, body)
	}
	if code, _ := get(t, gw.Endpoint+"/"+bucket+"/"+key, ""); code == http.StatusOK {
		t.Error("the manifest is readable without the signature: the test shows nothing")
	}
}
