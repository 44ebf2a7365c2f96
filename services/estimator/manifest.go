package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
)

// Fetcher is the HTTP the estimator needs; *fetch.Client is one.
type Fetcher interface {
	Fetch(ctx context.Context, url string, maxBytes int64) ([]byte, error)
	Head(ctx context.Context, url string) (int64, error)
}

// jobError is a job that cannot go on: the job fails with its message.
type jobError struct{ msg string }

func (e *jobError) Error() string { return e.msg }

func jobErrorf(format string, args ...any) error { return &jobError{msg: fmt.Sprintf(format, args...)} }

// fileList returns the file list a job is to have, and says in a line
// what it read: the object manifest at its payload URL, fetched and parsed
// (a job spawned from a manifest of manifests has no list, nor one whose
// requeue dropped it to read the manifest again), or the payload itself
// as the one file of a file or container job (jobs a peer created without
// a file list).
func (e *Estimator) fileList(ctx context.Context, conf *v1.JobConfiguration) (*v1.Manifest, string, error) {
	raw := conf.GetPayloadUrl()
	if raw == "" {
		// A job Merritt's ingest service made names only a file in that
		// service's own queue folder (its configuration's filename).
		return nil, "", jobErrorf("the job has neither a file list nor a payload_url to make one from (ingestq fetches every payload by URL; " +
			"a job Merritt's ingest service made is Merritt's to process)")
	}
	switch t := conf.GetPayloadType(); t {
	case v1.PayloadType_PAYLOAD_TYPE_OBJECT_MANIFEST:
		data, err := e.fetchManifest(ctx, raw)
		if err != nil {
			return nil, "", err
		}
		m, err := e.objectManifest(raw, data)
		if err != nil {
			return nil, "", err
		}
		sum := sha256.Sum256(data)
		return m, fmt.Sprintf("object manifest %s read (sha256 %s): %d files", raw, hex.EncodeToString(sum[:]), len(m.GetFiles())), nil
	case v1.PayloadType_PAYLOAD_TYPE_FILE, v1.PayloadType_PAYLOAD_TYPE_CONTAINER:
		u, err := url.Parse(raw)
		if err != nil {
			return nil, "", jobErrorf("payload_url %q is not a URL: %v", raw, err)
		}
		name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
		if err := checkm.CheckFileName(name); err != nil {
			return nil, "", jobErrorf("payload %s: no usable file name: %v", raw, err)
		}
		return &v1.Manifest{Files: []*v1.ManifestFile{{Url: raw, Size: -1, Name: name}}}, "payload " + raw + " is the job's one file", nil
	default:
		return nil, "", jobErrorf("payload type %q of %s has no file list of its own (a batcher turns it into jobs)", queue.PayloadTypeName(t), raw)
	}
}

// objectManifest parses and checks the object manifest data fetched from
// raw (fetchManifest: one that cannot be fetched is tried e.Retry.Attempts
// times first). A manifest that is wrong fails the job with a message
// naming the URL and the line.
func (e *Estimator) objectManifest(raw string, data []byte) (*v1.Manifest, error) {
	m, err := checkm.Parse(bytes.NewReader(data), e.Limits)
	if err != nil {
		return nil, jobErrorf("manifest %s: %v", raw, err)
	}
	switch m.Profile {
	case checkm.ProfileBatch, checkm.ProfileContainerBatch:
		return nil, jobErrorf("manifest %s declares profile %s: a batch manifest, not the object manifest its job needs", raw, m.Profile)
	}
	if err := m.CheckFileNames(); err != nil {
		return nil, jobErrorf("manifest %s: %v", raw, err)
	}
	files := make([]*v1.ManifestFile, len(m.Entries))
	for i, en := range m.Entries {
		if _, err := fetch.CheckURL(en.FileURL, e.Policy); err != nil {
			return nil, jobErrorf("manifest %s: line %d: %v", raw, en.Line, err)
		}
		files[i] = &v1.ManifestFile{Url: en.FileURL, HashAlgorithm: en.HashAlgorithm, HashValue: en.HashValue,
			Size: en.FileSize, LastModified: en.FileLastModified, Name: en.FileName}
	}
	return &v1.Manifest{Files: files}, nil
}

// fetchManifest gets a manifest, retrying what may pass.
func (e *Estimator) fetchManifest(ctx context.Context, raw string) ([]byte, error) {
	var data []byte
	attempts, err := e.Retry.Do(ctx, fetch.Retryable, func(attempt int) error {
		var err error
		data, err = e.Client.Fetch(ctx, raw, e.Limits.MaxBytes)
		if err != nil && ctx.Err() == nil && fetch.Retryable(err) && attempt < e.Retry.Attempts {
			e.Logger.WarnContext(ctx, "fetching manifest failed; trying again", "url", raw, "attempt", attempt, "error", err)
		}
		return err
	})
	switch {
	case err == nil:
		return data, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, jobErrorf("fetching the manifest failed: %v (attempt %d of %d)", err, attempts, e.Retry.Attempts)
}
