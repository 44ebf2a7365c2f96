package fixity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/s3store"
	"github.com/ingestq/ingestq/shared/s3test"
)

func TestVerifyReadsAnS3VersionBackAndReportsEachMismatch(t *testing.T) {
	gw := s3test.Start(t)
	bucket := gw.CreateBucket(t)
	c, err := s3store.Client(context.Background(), gw.Settings(bucket))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(key, content string) {
		t.Helper()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(content)}); err != nil {
			t.Fatal(err)
		}
	}
	loc := Location{Bucket: bucket}
	manifestURL, err := loc.ManifestURL("ark:/99999/fk4s", 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := "s3://" + bucket + "/ark_99999_fk4s/v2/manifest.checkm"; manifestURL != want {
		t.Fatalf("manifest URL %s, want %s", manifestURL, want)
	}
	var entries []checkm.Entry
	for _, f := range []struct{ name, content string }{{"producer/a", "alpha"}, {"producer/b", "bravo"}} {
		key := "ark_99999_fk4s/v2/" + f.name
		put(key, f.content)
		sum := sha256.Sum256([]byte(f.content))
		entries = append(entries, checkm.Entry{FileURL: s3store.URL(bucket, key), HashAlgorithm: "sha256",
			HashValue: hex.EncodeToString(sum[:]), FileSize: int64(len(f.content)), FileName: f.name})
	}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, checkm.ProfileObject, []string{"nfo:fileUrl", "nfo:hashAlgorithm", "nfo:hashValue", "nfo:fileSize", "nfo:fileName"}, entries); err != nil {
		t.Fatal(err)
	}
	put("ark_99999_fk4s/v2/manifest.checkm", buf.String())
	r := Reader{S3: c}
	rep, err := r.Verify(ctx, manifestURL)
	if err != nil || rep.Files != 2 || rep.Bytes != 10 || len(rep.Mismatches) != 0 {
		t.Fatalf("intact version: %+v, %v", rep, err)
	}
	put("ark_99999_fk4s/v2/producer/b", "BRAVO")
	rep, err = r.Verify(ctx, manifestURL)
	if err != nil || len(rep.Mismatches) != 1 || rep.Mismatches[0].File != "producer/b" || !strings.HasPrefix(rep.Mismatches[0].Problem, "digest: ") {
		t.Errorf("damaged version: %+v, %v", rep, err)
	}
	if _, err := (Reader{}).Verify(ctx, manifestURL); err == nil || !strings.Contains(err.Error(), "no S3 store is configured") {
		t.Errorf("without a client: %v", err)
	}

	// The latest version is the highest with a manifest; a version the
	// bucket lacks is fs.ErrNotExist, as in a local store.
	if v, err := loc.LatestVersion(ctx, r, "ark:/99999/fk4s"); err != nil || v != 2 {
		t.Errorf("latest version: %d, %v; want 2", v, err)
	}
	put("ark_99999_fk4s/v3/producer/a", "alpha") // no manifest yet: not complete
	if v, err := loc.LatestVersion(ctx, r, "ark:/99999/fk4s"); err != nil || v != 2 {
		t.Errorf("latest version beside an incomplete one: %d, %v; want 2", v, err)
	}
	if _, err := loc.LatestVersion(ctx, r, "ark:/99999/fk4none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("latest version of an object not stored: %v, want fs.ErrNotExist", err)
	}
	missing, _ := loc.ManifestURL("ark:/99999/fk4s", 9)
	if _, err := r.Verify(ctx, missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a version not stored: %v, want fs.ErrNotExist", err)
	}
}

func TestTheLatestVersionOfALocalObjectIsItsHighestComplete(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"ark_99999_fk4l/v1/manifest.checkm", "ark_99999_fk4l/v10/manifest.checkm", "ark_99999_fk4l/v11/producer/a",
		"ark_99999_fk4l/v9/manifest.checkm", "ark_99999_fk4l/vx/manifest.checkm"} {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	loc := Location{Root: root}
	if v, err := loc.LatestVersion(context.Background(), Reader{}, "ark:/99999/fk4l"); err != nil || v != 10 {
		t.Errorf("latest version: %d, %v; want 10", v, err)
	}
	if _, err := loc.LatestVersion(context.Background(), Reader{}, "ark:/99999/fk4none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an object not stored: %v, want fs.ErrNotExist", err)
	}
}

// TestAStoredVersionWhoseNamesHoldEscapesAuditsCleanUnderThoseNames: a
// version stored with names holding "%20", "%7c" and "%7C", its manifest
// as ingestq writes one whose names hold no '|' (../checkm/testdata, with
// the store's folder put in), is read back under those names and every
// file checks out.
func TestAStoredVersionWhoseNamesHoldEscapesAuditsCleanUnderThoseNames(t *testing.T) {
	stored, err := os.ReadFile(filepath.Join("..", "checkm", "testdata", "unmarked-version.checkm"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	files := map[string]string{"producer/100%20off.txt": "3", "producer/x%7cy.txt": "2", "producer/x%7Cy.txt": "3", "system/mrt-erc.txt": "2"}
	for name, content := range files {
		p := filepath.Join(root, "ark_99999_fk4old", "v1", filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	manifest := filepath.Join(root, "ark_99999_fk4old", "v1", "manifest.checkm")
	text := strings.ReplaceAll(string(stored), "file:///store/", checkm.FileURL(root)+"/")
	if err := os.WriteFile(manifest, []byte(text), 0o444); err != nil {
		t.Fatal(err)
	}
	r := Reader{}
	rep, err := r.Verify(context.Background(), checkm.FileURL(manifest))
	if err != nil || rep.Files != 4 || len(rep.Mismatches) != 0 {
		t.Fatalf("audit: %+v, %v", rep, err)
	}
	m, err := r.Manifest(context.Background(), checkm.FileURL(manifest))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Entries {
		if _, ok := files[e.FileName]; !ok {
			t.Errorf("read back the name %q", e.FileName)
		}
	}
}
