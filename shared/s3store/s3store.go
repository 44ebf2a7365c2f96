// Package s3store connects to an S3-compatible object store: the settings
// every service that reads or writes stored versions shares (the processor
// stores them, the recorder hands out URLs to them), and the client built
// from them. Credentials come the standard AWS way: AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files, or a role.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/ctxio"
	retrypolicy "github.com/ingestq/ingestq/shared/retry"
)

// Settings name the bucket and how to reach it.
type Settings struct {
	// Endpoint is the store's base URL (empty: AWS's own, by region).
	Endpoint string
	Region   string
	Bucket   string
	// PathStyle addresses the bucket in the path (http://host/bucket/key),
	// as most S3-compatible servers want, not in the host name.
	PathStyle bool
	// Retry says how often one request that fails with a 5xx, throttling
	// or a broken connection is sent, and the waits between (the zero
	// policy: DefaultRetry): the SDK's retryer with the numbers of ingestq's
	// one retry policy.
	Retry retrypolicy.Policy
	// ResponseTimeout bounds the wait for an answer once a request is
	// sent (its headers, and an error's body), each wait for more of a
	// body, and each wait to send more of a request; 0:
	// DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// Credentials, if set, replace the standard AWS chain (tests).
	Credentials aws.CredentialsProvider
}

// DefaultRetry is how a failed request is tried again by default: as the
// SDK's own retryer does, 6 tries, each wait drawn at random below a bound
// that doubles from 2 s up to 20 s.
var DefaultRetry = retrypolicy.Policy{Attempts: 6, Backoff: 2 * time.Second, Max: 20 * time.Second, Jitter: 1}

// Register adds the S3 settings to a service's configuration.
func Register(r *config.Registry) *Settings {
	s := &Settings{}
	r.Func("s3-endpoint", "INGESTQ_S3_ENDPOINT", "",
		"S3-compatible object store's base URL, e.g. http://127.0.0.1:7070 (empty: AWS by region); credentials the standard AWS way (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE)",
		func(v string) error {
			if v != "" {
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("%q is not an http(s) URL", v)
				}
			}
			s.Endpoint = v
			return nil
		})
	r.Func("s3-region", "INGESTQ_S3_REGION", "us-east-1", "S3 region", func(v string) error {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("a region is needed")
		}
		s.Region = strings.TrimSpace(v)
		return nil
	})
	r.Func("s3-bucket", "INGESTQ_S3_BUCKET", "", "S3 bucket holding the stored versions", func(v string) error {
		s.Bucket = strings.TrimSpace(v)
		return nil
	})
	r.Func("s3-path-style", "INGESTQ_S3_PATH_STYLE", "true",
		"address the bucket in the URL's path (most S3-compatible servers), not in the host name", func(v string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("not a boolean (want true or false): %q", v)
			}
			s.PathStyle = b
			return nil
		})
	policy := retrypolicy.Register(r, "s3", "an S3 request is sent (5xx, throttling and connection failures)", DefaultRetry)
	r.Renamed("s3-max-attempts", "INGESTQ_S3_MAX_ATTEMPTS", "s3-attempts", nil)
	r.Func("s3-response-timeout", "INGESTQ_S3_RESPONSE_TIMEOUT", DefaultResponseTimeout.String(),
		"how long an S3 request waits for its answer (completing a multipart upload: until the server has assembled the object), for more of its body, or to send more of the request",
		config.SetPositiveDuration(&s.ResponseTimeout))
	r.Check(func() error {
		s.Retry = *policy
		return nil
	})
	return s
}

// Client makes a client of the store from the settings.
func Client(ctx context.Context, s Settings) (*s3.Client, error) {
	if s.Bucket == "" {
		return nil, fmt.Errorf("INGESTQ_S3_BUCKET: no bucket named")
	}
	policy := s.Retry
	if policy == (retrypolicy.Policy{}) {
		policy = DefaultRetry
	}
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("S3 retry policy: %w", err)
	}
	if policy.Attempts < 1 {
		return nil, fmt.Errorf("S3 retry policy: %d attempts: the SDK's retryer needs at least 1", policy.Attempts)
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(s.Region),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = policy.Attempts
				o.MaxBackoff = policy.Max
				o.Backoff = backoff(policy)
			})
		}),
	}
	if s.Credentials != nil {
		opts = append(opts, awsconfig.WithCredentialsProvider(s.Credentials))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	timeout := s.ResponseTimeout
	if timeout <= 0 {
		timeout = DefaultResponseTimeout
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if s.Endpoint != "" {
			o.BaseEndpoint = aws.String(s.Endpoint)
		}
		o.UsePathStyle = s.PathStyle
		o.HTTPClient = boundedAnswers{timeout: timeout,
			client: awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
				t.ResponseHeaderTimeout = timeout
				// Every request goes to the one store: as many connections
				// kept for it as a busy stage has requests at once, or
				// each burst dials (and the store accepts) anew.
				t.MaxIdleConns, t.MaxIdleConnsPerHost = maxIdleConns, maxIdleConns
				dial := t.DialContext
				if dial == nil {
					dial = (&net.Dialer{}).DialContext
				}
				t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := dial(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &writeBoundConn{Conn: c, idle: timeout}, nil
				}
			})}
	}), nil
}

// backoff makes the SDK's retryer wait as the policy says.
type backoff retrypolicy.Policy

// BackoffDelay is the wait after the attempt-th failed attempt (from 1).
func (b backoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	return retrypolicy.Policy(b).Wait(attempt), nil
}

// maxIdleConns is how many idle connections to the store a client keeps:
// a stage working on 64 jobs at once (INGESTQ_CONCURRENCY) with requests
// of its own beside (a multipart upload's parts, a listing) reuses its
// connections instead of dialing again; the SDK keeps 10 to a host.
const maxIdleConns = 256

// DefaultResponseTimeout is how long a request waits for its answer by
// default: long, as a server may assemble a whole multipart object before
// it answers the request that completes it.
const DefaultResponseTimeout = 5 * time.Minute

// maxErrorBody bounds what is read of an error's body: S3's are a few
// hundred bytes of XML.
const maxErrorBody = 64 << 10

// boundedAnswers is the store's HTTP client. The SDK waits for an answer,
// and reads an error's body whole, for as long as the server takes: here
// the headers must come within timeout of the request being sent (the
// transport's ResponseHeaderTimeout), an error's body is read at once, at
// most maxErrorBody of it, within timeout, a read of any other body fails
// when it gets nothing for timeout, and so does a write of a request.
type boundedAnswers struct {
	client  aws.HTTPClient
	timeout time.Duration
}

func (b boundedAnswers) Do(req *http.Request) (*http.Response, error) {
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 300 {
		resp.Body = newIdleBody(resp.Body, b.timeout)
		return resp, nil
	}
	// Closing the body ends a read that waits on it.
	cut := time.AfterFunc(b.timeout, func() { resp.Body.Close() })
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if !cut.Stop() && err != nil {
		err = fmt.Errorf("its body did not end within %s: %w", b.timeout, err)
	}
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the answer HTTP %d: %w", resp.StatusCode, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	resp.ContentLength = int64(len(data))
	return resp, nil
}

// ListObjects yields every page of the listing in asks for, or the error
// that ended it. A store that answers a page with the very token that
// asked for it would have the listing go on for ever: that is an error.
func ListObjects(ctx context.Context, c s3.ListObjectsV2APIClient, in s3.ListObjectsV2Input) iter.Seq2[*s3.ListObjectsV2Output, error] {
	return func(yield func(*s3.ListObjectsV2Output, error) bool) {
		for {
			page, err := c.ListObjectsV2(ctx, &in)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(page, nil) {
				return
			}
			next := aws.ToString(page.NextContinuationToken)
			if next == "" {
				return
			}
			if next == aws.ToString(in.ContinuationToken) {
				yield(nil, fmt.Errorf("listing s3://%s/%s: %w", aws.ToString(in.Bucket), aws.ToString(in.Prefix), ErrListingLoops))
				return
			}
			in.ContinuationToken = &next
		}
	}
}

// ErrListingLoops: a store answered a listing's page with the position
// that asked for it, so the listing would never end.
var ErrListingLoops = errors.New("the store answered the next page with the same position again")

// URL is the s3:// URL of a key in a bucket, as manifests name stored files.
func URL(bucket, key string) string {
	return (&url.URL{Scheme: "s3", Host: bucket, Path: "/" + key}).String()
}

// ParseURL splits an s3:// URL into its bucket and key.
func ParseURL(raw string) (bucket, key string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", err
	}
	if u.Scheme != "s3" || u.Host == "" || len(u.Path) < 2 {
		return "", "", fmt.Errorf("%s is not an s3://bucket/key URL", raw)
	}
	return u.Host, u.Path[1:], nil
}

// StoreSettings say where versions are stored: a local folder or a bucket.
type StoreSettings struct {
	Kind string // "local" or "s3"
	Root string // the local store's folder
	S3   *Settings
}

// RegisterStore adds the store settings (INGESTQ_STORE, INGESTQ_STORE_ROOT
// and the S3 settings) to a service's configuration.
func RegisterStore(r *config.Registry) *StoreSettings {
	s := &StoreSettings{}
	r.Func("store", "INGESTQ_STORE", "local",
		"where versions are stored: local (a folder, INGESTQ_STORE_ROOT), s3 (a bucket, INGESTQ_S3_*) or merritt (a node of Merritt's storage service, INGESTQ_MERRITT_*)", func(v string) error {
			v = strings.TrimSpace(v)
			if v != "local" && v != "s3" && v != "merritt" {
				return fmt.Errorf("%q is not local, s3 or merritt", v)
			}
			s.Kind = v
			return nil
		})
	r.Func("store-root", "INGESTQ_STORE_ROOT", "/var/lib/ingestq/store",
		"the local object store: a folder per ARK, a folder per version", func(v string) error {
			s.Root = v
			return nil
		})
	s.S3 = Register(r)
	return s
}

// writeBoundConn fails a write that cannot hand the connection anything
// for idle: a store that stopped reading an upload.
type writeBoundConn struct {
	net.Conn
	idle time.Duration
}

func (c *writeBoundConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// idleBody fails a read that gets no data for idle: closing the body ends
// the wait.
type idleBody struct {
	body  io.ReadCloser
	bound ctxio.IdleBound
	cut   atomic.Bool
}

func newIdleBody(body io.ReadCloser, idle time.Duration) *idleBody {
	r := &idleBody{body: body}
	r.bound = ctxio.IdleBound{After: idle, Cut: func() {
		r.cut.Store(true)
		r.body.Close()
	}}
	return r
}

func (r *idleBody) Read(p []byte) (int, error) {
	n, err := r.bound.Read(func() (int, error) { return r.body.Read(p) })
	if err != nil && err != io.EOF && r.cut.Load() {
		err = fmt.Errorf("no data of the answer's body for %s: %w", r.bound.After, err)
	}
	return n, err
}

func (r *idleBody) Close() error {
	r.bound.Stop()
	return r.body.Close()
}
