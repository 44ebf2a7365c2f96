// Package merrittstore speaks to Merritt's storage service (CDLUC3/mrt-store)
// over its HTTP interface: a version is added to an object, or an object
// updated, on one storage node by a call that names a manifest of the
// version's files, which the service fetches, file by file, before it
// answers; the service says what an object holds (its state, its manifest
// of every version, each file's content). The package also spells what
// Merritt's other programs read of those calls: a store node's mode and
// delete list, and the manifest URL an inventory node names. docs/merritt.md
// gives each fact with the source it comes from.
package merrittstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ingestq/ingestq/shared/config"
	"github.com/ingestq/ingestq/shared/fetch"
)

// Client calls one node of a storage service.
type Client struct {
	// BaseURL is the service's base URL (the part before "add/", "state/",
	// "manifest/"), without a trailing slash.
	BaseURL string
	Node    int
	HTTP    *fetch.Client
}

// Request is what an add or update call sends beside the object id.
type Request struct {
	// ManifestURL is the add manifest (WriteAddManifest) the service
	// fetches; ManifestSize and the manifest's digest let it check what it
	// fetched (0 and "": not checked).
	ManifestURL    string
	ManifestSize   int64
	ManifestDigest string // SHA-256, lower-case hex
	LocalID        string // the object's local identifier ("" for none)
	// Delete are the file ids an update removes from the current version.
	Delete []string
}

// maxAnswer bounds a state or version answer read whole.
const maxAnswer = 64 << 20

// maxRefusal bounds a refusal read whole: the service's exception, its
// Java stack trace included (several KiB), before the reason.
const maxRefusal = 1 << 20

// ManifestURL is the URL of the object's manifest on the client's node:
// what an inventory node names for Merritt's inventory service.
func (c *Client) ManifestURL(ark string) string {
	return c.BaseURL + "/manifest/" + strconv.Itoa(c.Node) + "/" + Encode(ark)
}

func (c *Client) call(kind, ark string) string {
	return kind + "/" + strconv.Itoa(c.Node) + "/" + Encode(ark)
}

// Add asks the service to add a version of ark made of the manifest's
// files.
func (c *Client) Add(ctx context.Context, ark string, req Request) (VersionState, error) {
	if len(req.Delete) > 0 {
		return VersionState{}, errors.New("merrittstore: an add deletes nothing; deletions go with an update")
	}
	return c.store(ctx, ActionAdd, ark, req)
}

// Update asks the service for a new version of ark: its current version's
// files, less req.Delete, with the manifest's files added or replaced.
func (c *Client) Update(ctx context.Context, ark string, req Request) (VersionState, error) {
	return c.store(ctx, ActionUpdate, ark, req)
}

// store sends the call as a multipart form, the form whose field names
// the service documents for any client (the URL-encoded form with dashed
// names is Merritt's ingest service's own).
func (c *Client) store(ctx context.Context, action, ark string, req Request) (VersionState, error) {
	call := c.call(action, ark)
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	fields := [][2]string{{"url", req.ManifestURL}, {"responseForm", "json"}}
	if req.ManifestSize > 0 {
		fields = append(fields, [2]string{"size", strconv.FormatInt(req.ManifestSize, 10)})
	}
	if req.ManifestDigest != "" {
		fields = append(fields, [2]string{"digestType", "sha256"}, [2]string{"digestValue", req.ManifestDigest})
	}
	if req.LocalID != "" {
		fields = append(fields, [2]string{"localIdentifier", req.LocalID})
	}
	if action == ActionUpdate && len(req.Delete) > 0 {
		fields = append(fields, [2]string{"delete", DeleteList(req.Delete)})
	}
	for _, f := range fields {
		if err := w.WriteField(f[0], f[1]); err != nil {
			return VersionState{}, err
		}
	}
	if err := w.Close(); err != nil {
		return VersionState{}, err
	}
	resp, err := c.HTTP.Post(ctx, c.BaseURL+"/"+call, w.FormDataContentType(), body.Bytes(), nil)
	if err != nil {
		return VersionState{}, c.failure(call, err)
	}
	data, err := readAll(resp)
	if err != nil {
		return VersionState{}, fmt.Errorf("the storage service's answer to %s: %w", call, err)
	}
	vs, err := ParseVersionState(data)
	if err != nil {
		return VersionState{}, fmt.Errorf("the storage service's answer to %s: %w", call, err)
	}
	return vs, nil
}

// State asks what the service holds of ark: found is false when it holds
// nothing (it answers 404).
func (c *Client) State(ctx context.Context, ark string) (st ObjectState, found bool, err error) {
	call := c.call("state", ark)
	resp, err := c.HTTP.Get(ctx, c.BaseURL+"/"+call+"?t=json")
	if err != nil {
		if notFound(err) {
			return ObjectState{}, false, nil
		}
		return ObjectState{}, false, c.failure(call, err)
	}
	data, err := readAll(resp)
	if err != nil {
		return ObjectState{}, false, fmt.Errorf("the storage service's answer to %s: %w", call, err)
	}
	if st, err = ParseObjectState(data); err != nil {
		return ObjectState{}, false, fmt.Errorf("the storage service's answer to %s: %w", call, err)
	}
	return st, true, nil
}

// Object reads the service's manifest of ark: every version with its
// files. found is false when it holds nothing.
func (c *Client) Object(ctx context.Context, ark string) (o Object, found bool, err error) {
	return c.ReadManifest(ctx, c.ManifestURL(ark))
}

// ReadManifest reads an object's manifest at manifestURL, which must be
// one of the client's service (of any node).
func (c *Client) ReadManifest(ctx context.Context, manifestURL string) (o Object, found bool, err error) {
	if !c.Serves(manifestURL) {
		return Object{}, false, fmt.Errorf("%s is not a manifest of the storage service at %s", manifestURL, c.BaseURL)
	}
	resp, err := c.HTTP.Get(ctx, manifestURL)
	if err != nil {
		if notFound(err) {
			return Object{}, false, nil
		}
		return Object{}, false, c.failure(strings.TrimPrefix(manifestURL, c.BaseURL+"/"), err)
	}
	defer resp.Body.Close()
	o, err = ParseObjectInfo(resp.Body)
	if err != nil {
		return Object{}, false, fmt.Errorf("%s: %w", manifestURL, err)
	}
	return o, true, nil
}

// Serves reports whether manifestURL is an object manifest of the client's
// service.
func (c *Client) Serves(manifestURL string) bool {
	base, _, _, err := ParseManifestURL(manifestURL)
	return err == nil && sameBase(base, c.BaseURL)
}

func sameBase(a, b string) bool {
	ua, erra := url.Parse(a)
	ub, errb := url.Parse(b)
	return erra == nil && errb == nil && strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) &&
		strings.TrimSuffix(ua.EscapedPath(), "/") == strings.TrimSuffix(ub.EscapedPath(), "/")
}

// Content reads one stored file of a version, of at most max bytes, from
// the node of manifestURL (an object manifest of the client's service).
func (c *Client) Content(ctx context.Context, manifestURL string, version int, file string, max int64) ([]byte, error) {
	base, node, ark, err := ParseManifestURL(manifestURL)
	if err != nil {
		return nil, err
	}
	u := base + "/content/" + strconv.Itoa(node) + "/" + Encode(ark) + "/" + strconv.Itoa(version) + "/" + Encode(file)
	data, err := c.HTTP.Fetch(ctx, u, max)
	if err != nil {
		return nil, c.failure(strings.TrimPrefix(u, base+"/"), err)
	}
	return data, nil
}

func notFound(err error) bool {
	var se *fetch.StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// failure names the call and what the service said.
func (c *Client) failure(call string, err error) error {
	var se *fetch.StatusError
	if errors.As(err, &se) {
		status, detail := parseException(se.Body)
		return &AnswerError{Call: call, Code: se.Code, Status: status, Detail: detail}
	}
	return &CallError{Call: call, Err: err}
}

// CallError is a call that got no answer: the service could not be
// reached, did not answer in time, or the connection broke.
type CallError struct {
	Call string
	Err  error
}

func (e *CallError) Error() string {
	if errors.Is(e.Err, fetch.ErrTimeout) {
		return fmt.Sprintf("the storage service did not answer %s in time: %v", e.Call, e.Err)
	}
	return fmt.Sprintf("calling the storage service (%s): %v", e.Call, e.Err)
}

func (e *CallError) Unwrap() error { return e.Err }

// MayPass reports whether the call may get an answer later: the network
// or the service failed, or it was slow; not when ingestq's own policy
// refused the address.
func (e *CallError) MayPass() bool { return fetch.Retryable(e.Err) }

func readAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("the answer is larger than %d bytes", maxAnswer)
	}
	return data, nil
}

// Settings are the storage service's settings, shared by the services that
// call it.
type Settings struct {
	URL     *string
	Node    *int
	Timeout *time.Duration
}

// Register registers the settings.
func Register(r *config.Registry) *Settings {
	return &Settings{
		URL: r.String("merritt-storage-url", "INGESTQ_MERRITT_STORAGE_URL", "",
			"base URL of Merritt's storage service (before add/, state/, manifest/), e.g. http://store.example.org:35121 (empty: none)"),
		Node: r.Int("merritt-node", "INGESTQ_MERRITT_NODE", 0,
			"the storage node versions go to (with INGESTQ_MERRITT_STORAGE_URL; 0: none)"),
		Timeout: r.Duration("merritt-timeout", "INGESTQ_MERRITT_TIMEOUT", 30*time.Minute,
			"longest wait for the storage service's answer to one call (it fetches every file of a version before it answers)"),
	}
}

// Client returns a client of the configured service and node, or nil when
// none is configured. The service is the operator's own, usually on the
// internal network: only the built-in deny list holds for it.
func (s Settings) Client() (*Client, error) {
	base, node := strings.TrimSuffix(strings.TrimSpace(*s.URL), "/"), *s.Node
	switch {
	case base == "" && node == 0:
		return nil, nil
	case base == "" || node == 0:
		return nil, errors.New("INGESTQ_MERRITT_STORAGE_URL and INGESTQ_MERRITT_NODE go together: set both or neither")
	case node < 0:
		return nil, fmt.Errorf("INGESTQ_MERRITT_NODE: %d is not a node number", node)
	case *s.Timeout <= 0:
		return nil, fmt.Errorf("INGESTQ_MERRITT_TIMEOUT: %s must be positive", *s.Timeout)
	}
	return s.client(base, node)
}

// Reader returns a client that reads the configured service's objects on
// any node (its manifests and content), or nil when no service is
// configured: what a reader of stored versions needs, which is no node.
func (s Settings) Reader() (*Client, error) {
	base := strings.TrimSuffix(strings.TrimSpace(*s.URL), "/")
	switch {
	case base == "":
		return nil, nil
	case *s.Timeout <= 0:
		return nil, fmt.Errorf("INGESTQ_MERRITT_TIMEOUT: %s must be positive", *s.Timeout)
	}
	return s.client(base, *s.Node)
}

func (s Settings) client(base string, node int) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("INGESTQ_MERRITT_STORAGE_URL: %q is not an http(s) base URL", base)
	}
	if u.Port() == "" {
		// mrt-inventory's SaveObject rebuilds the service's base from an
		// inventory node's manifest URL as protocol://host:port, and Java's
		// URL gives -1 for a port the URL leaves out.
		return nil, fmt.Errorf("INGESTQ_MERRITT_STORAGE_URL: %q names no port: write it (%s://%s:%s%s); Merritt's inventory service reads the storage service's address from the manifest URLs ingestq writes as protocol://host:port, and without a port it would call %s://%s:-1",
			base, u.Scheme, u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme], u.EscapedPath(), u.Scheme, u.Hostname())
	}
	// The service answers an add or an update once it has fetched every
	// file: the wait for its answer's headers is the call's own bound.
	httpc := fetch.New(fetch.Policy{Allow: fetch.InternalRanges(), AllowSetting: "INGESTQ_MERRITT_STORAGE_URL",
		HeaderTimeout: *s.Timeout, FetchTimeout: *s.Timeout, MaxRedirects: -1, StatusBody: maxRefusal})
	return &Client{BaseURL: base, Node: node, HTTP: httpc}, nil
}
