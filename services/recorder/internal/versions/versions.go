// Package versions reads stored versions for the recorder, wherever the
// processor stored them (a local folder, file:// URLs; a bucket, s3://
// URLs; a node of Merritt's storage service, the URL of the object's
// manifest there), and hands them to an inventory on another host: a
// presigned URL of the object store, or, for the local store, the
// recorder's own HTTP endpoint behind the admin token, or the storage
// service's manifest.
package versions

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fixity"
	"github.com/ingestq/ingestq/shared/merrittstore"
	"github.com/ingestq/ingestq/shared/s3store"
)

// Prefix is the path under which the HTTP endpoint serves the local store.
const Prefix = "/versions/"

// Store reads the versions of one deployment's store.
type Store struct {
	// S3 reads s3:// manifests and presigns their URLs (nil: none can be
	// read).
	S3 *s3.Client
	// PresignExpiry is how long a presigned URL lasts (default 1 h).
	PresignExpiry time.Duration
	// Root is the local store's folder: file:// manifests under it can be
	// served (empty: none).
	Root string
	// PublicURL is the HTTP endpoint's base URL as other hosts reach it,
	// e.g. http://recorder.example.org:7416 (empty: no fetch URL for the
	// local store).
	PublicURL string
	// Merritt reads the object manifests of Merritt's storage service at
	// its base URL, of any node (nil: none can be read).
	Merritt *merrittstore.Client
}

// Info is what a lease says of a version beyond its manifest URL.
type Info struct {
	FetchURL     string
	FetchExpires time.Time // zero: it does not expire
	TotalSize    int64
	FileCount    int
}

// Manifest reads a version manifest.
func (s Store) Manifest(ctx context.Context, manifestURL string) (*checkm.Manifest, error) {
	return fixity.Reader{S3: s.S3}.Manifest(ctx, manifestURL)
}

// Version reads the files of a stored version: the version manifest's, or,
// for an object of Merritt's storage service, those of the object's
// version number (0: the version whose ingest record names job, as when
// Merritt's storage consumer stored it). It returns the version's number
// (number itself, or 0 where it does not say, outside Merritt's service).
func (s Store) Version(ctx context.Context, manifestURL string, number int, job string) ([]checkm.Entry, int, error) {
	if !merrittManifest(manifestURL) {
		m, err := s.Manifest(ctx, manifestURL)
		if err != nil {
			return nil, 0, err
		}
		return m.Entries, number, nil
	}
	if s.Merritt == nil || !s.Merritt.Serves(manifestURL) {
		return nil, 0, fmt.Errorf("%s is not a manifest of the storage service this recorder reads (INGESTQ_MERRITT_STORAGE_URL)", manifestURL)
	}
	obj, found, err := s.Merritt.ReadManifest(ctx, manifestURL)
	if err != nil {
		return nil, 0, err
	}
	if !found {
		return nil, 0, fmt.Errorf("%s: the storage service holds no such object", manifestURL)
	}
	if number == 0 {
		if number, err = s.versionOfJob(ctx, manifestURL, obj, job); err != nil {
			return nil, 0, err
		}
	}
	v, ok := obj.Version(number)
	if !ok {
		return nil, 0, fmt.Errorf("%s: the object has no version %d (it has %d)", manifestURL, number, obj.Current)
	}
	entries := make([]checkm.Entry, 0, len(v.Files))
	for _, f := range v.Files {
		entries = append(entries, checkm.Entry{FileURL: manifestURL, FileName: f.Name, FileSize: f.Size, HashAlgorithm: f.HashAlgorithm, HashValue: f.HashValue})
	}
	return entries, number, nil
}

// merrittManifest reports whether raw is an http(s) URL, which only an
// object manifest of Merritt's storage service is among stored versions.
func merrittManifest(raw string) bool {
	return strings.HasPrefix(raw, "http://") || strings.HasPrefix(raw, "https://")
}

// maxIngestRecord bounds the ingest record read of a version.
const maxIngestRecord = 64 << 10

// versionOfJob finds the version of obj whose ingest record names job,
// newest first.
func (s Store) versionOfJob(ctx context.Context, manifestURL string, obj merrittstore.Object, job string) (int, error) {
	for i := len(obj.Versions) - 1; i >= 0; i-- {
		v := obj.Versions[i]
		if _, ok := v.File(merrittstore.IngestRecordFile); !ok {
			continue
		}
		data, err := s.Merritt.Content(ctx, manifestURL, v.Number, merrittstore.IngestRecordFile, maxIngestRecord)
		if err != nil {
			return 0, err
		}
		if merrittstore.JobOfIngestRecord(data) == job {
			return v.Number, nil
		}
	}
	return 0, fmt.Errorf("%s: no version's %s names job %s", manifestURL, merrittstore.IngestRecordFile, job)
}

// Describe reads a version's manifest for its size and file count, and
// gives the URL another host fetches it at. number and job say which
// version of an object of Merritt's storage service (see Version).
func (s Store) Describe(ctx context.Context, manifestURL string, number int, job string) (Info, error) {
	if merrittManifest(manifestURL) {
		entries, _, err := s.Version(ctx, manifestURL, number, job)
		if err != nil {
			return Info{}, err
		}
		// The storage service's manifest, which any host that reaches the
		// service fetches as Merritt's inventory service does.
		info := Info{FileCount: len(entries), FetchURL: manifestURL}
		for _, e := range entries {
			info.TotalSize += max(e.FileSize, 0)
		}
		return info, nil
	}
	m, err := s.Manifest(ctx, manifestURL)
	if err != nil {
		return Info{}, err
	}
	info := Info{FileCount: len(m.Entries)}
	for _, e := range m.Entries {
		info.TotalSize += max(e.FileSize, 0)
	}
	if strings.HasPrefix(manifestURL, "s3:") {
		bucket, key, err := s3store.ParseURL(manifestURL)
		if err != nil {
			return Info{}, err
		}
		expiry := s.PresignExpiry
		if expiry <= 0 {
			expiry = time.Hour
		}
		req, err := s3.NewPresignClient(s.S3).PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)},
			s3.WithPresignExpires(expiry))
		if err != nil {
			return Info{}, fmt.Errorf("presigning %s: %w", manifestURL, err)
		}
		info.FetchURL, info.FetchExpires = req.URL, time.Now().Add(expiry)
		return info, nil
	}
	if rel, ok := s.relative(manifestURL); ok && s.PublicURL != "" {
		info.FetchURL = s.publicURL(rel)
	}
	return info, nil
}

// relative is a file:// URL's path under Root, slash-separated.
func (s Store) relative(raw string) (string, bool) {
	path, err := checkm.FilePath(raw)
	if err != nil || s.Root == "" {
		return "", false
	}
	rel, err := filepath.Rel(s.Root, path)
	if err != nil || !filepath.IsLocal(rel) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

func (s Store) publicURL(rel string) string {
	return strings.TrimSuffix(s.PublicURL, "/") + (&url.URL{Path: Prefix + rel}).EscapedPath()
}

// Handler serves the local store's versions under Prefix to callers that
// present token as a bearer token (to any caller when token is empty: the
// recorder then listens on loopback alone): a version manifest with its
// files' URLs on this endpoint, and the files themselves. Only complete
// versions are served (their manifest exists), and nothing outside Root.
func (s Store) Handler(token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token != "" && (!ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "the admin token is needed", http.StatusUnauthorized)
			return
		}
		rel, ok := strings.CutPrefix(r.URL.Path, Prefix)
		// <object>/v<N>/<file>: the object and version folders, and a file.
		parts := strings.SplitN(rel, "/", 3)
		if !ok || len(parts) < 3 || path.Clean(rel) != rel || !filepath.IsLocal(filepath.FromSlash(rel)) {
			http.NotFound(w, r)
			return
		}
		root, err := os.OpenRoot(s.Root)
		if err != nil {
			http.Error(w, "the store cannot be read", http.StatusInternalServerError)
			return
		}
		defer root.Close()
		version := parts[0] + "/" + parts[1]
		if _, err := root.Stat(version + "/manifest.checkm"); err != nil {
			http.NotFound(w, r)
			return
		}
		if parts[2] == "manifest.checkm" {
			s.serveManifest(w, r, root, version)
			return
		}
		f, err := root.Open(rel)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		http.ServeContent(w, r, "", fi.ModTime(), f)
	})
}

// serveManifest serves a version manifest with each file's URL rewritten
// to this endpoint.
func (s Store) serveManifest(w http.ResponseWriter, r *http.Request, root *os.Root, version string) {
	f, err := root.Open(version + "/manifest.checkm")
	if err != nil {
		http.NotFound(w, r)
		return
	}
	defer f.Close()
	m, err := checkm.Parse(f, checkm.Limits{})
	if err != nil {
		http.Error(w, "the manifest cannot be read", http.StatusInternalServerError)
		return
	}
	for i, e := range m.Entries {
		m.Entries[i].FileURL = s.publicURL(version + "/" + e.FileName)
		m.Entries[i].Line = 0
	}
	var buf bytes.Buffer
	if err := checkm.Write(&buf, m.Profile, m.Fields, m.Entries); err != nil {
		http.Error(w, "the manifest cannot be written", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write(buf.Bytes())
}
