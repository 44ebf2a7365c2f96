// Package failpoint drives the failpoints of a robustness build (make
// build-failpoints): each service process serves gofail's HTTP endpoint on
// the loopback address of its GOFAIL_HTTP, where a failpoint is armed with
// a term (sleep, panic), its count of hits read, and disarmed.
//
// The catalogue (All) names every failpoint of the tree: where it sits,
// the effect done before it and the commit not yet made, and which actions
// it takes.
package failpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Action is what a failpoint does once armed and reached.
type Action string

const (
	// Crash: the goroutine sleeps at the failpoint and the process is
	// killed (SIGKILL) as soon as the failpoint's count moves: it dies
	// exactly between the effect and its commit.
	Crash Action = "crash"
	// Stall: the goroutine sleeps at the failpoint and the process is
	// stopped (SIGSTOP) past its ZooKeeper session timeout, then continued:
	// the step goes on to its commit after its job was taken elsewhere,
	// and the commit must be refused.
	Stall Action = "stall"
	// Error: the failpoint panics. In a stage handler the runner turns it
	// into a failed step (the job Failed, its message naming the
	// failpoint), the error path after the effect; an operator requeues
	// the job. Only failpoints inside a handler take it.
	Error Action = "error"
)

// Point is one failpoint of the tree.
type Point struct {
	Name    string
	Service string // the service whose binary has it
	Effect  string // what is done when it is reached, and not yet committed
	// Handler: it sits in a stage handler, under the runner's recover, so
	// a panic there is an error of the step, not a crash.
	Handler bool
}

// Actions are the actions the point takes.
func (p Point) Actions() []Action {
	if p.Handler {
		return []Action{Crash, Stall, Error}
	}
	return []Action{Crash, Stall}
}

// All is every failpoint of the tree, in pipeline order. A test checks it
// against the failpoints the robustness build compiled in.
var All = []Point{
	{Name: "batcherPayloadKept", Service: "batcher", Effect: "the payload's reading kept in the work root; the batch not yet Processing, no job"},
	{Name: "batcherJobIDsReserved", Service: "batcher", Effect: "a batch's job ids reserved under /jobs; none of its jobs written"},
	{Name: "batcherJobsWritten", Service: "batcher", Effect: "one multi of a batch's jobs written; the others and the end of spawning not yet"},
	{Name: "batcherJobsCreated", Service: "batcher", Effect: "every job of a batch created; the end of its spawning not yet"},
	{Name: "batcherReportMailed", Service: "batcher", Effect: "the batch's report mailed; its final state not yet committed"},
	// The downloads of a job run in goroutines of their own, which
	// recover a panic as the runner does.
	{Name: "downloaderMidFile", Service: "downloader", Effect: "part of a file written to its .part file", Handler: true},
	{Name: "downloaderStateUnsynced", Service: "downloader", Effect: "a partial file's bytes synced; the digest state that vouches for them not yet saved", Handler: true},
	{Name: "downloaderRangeAppended", Service: "downloader", Effect: "a file's rest, asked for with a range where an attempt stopped, appended to its partial file; no state saved for it, the file not yet in producer/", Handler: true},
	{Name: "downloaderFilesWritten", Service: "downloader", Effect: "every file of the job written and synced; the job not yet in Processing", Handler: true},
	{Name: "processorMinted", Service: "processor", Effect: "the ARK minted and in the job's identifiers; the local ids not yet bound", Handler: true},
	{Name: "processorERCWritten", Service: "processor", Effect: "the ERC and Dublin Core written to system/; the files not yet listed", Handler: true},
	{Name: "processorManifestWritten", Service: "processor", Effect: "the storage manifest written; the job not yet in Storing", Handler: true},
	{Name: "storingHalfStored", Service: "processor", Effect: "some of a version's files stored, its manifest not yet", Handler: true},
	{Name: "storingVersionStored", Service: "processor", Effect: "the version stored; the job not yet in Recording", Handler: true},
	{Name: "recorderLeased", Service: "recorder", Effect: "the job leased under the object's inventory lock; nothing recorded yet"},
	{Name: "recorderRowWritten", Service: "recorder", Effect: "the version's inventory row committed; the lease not yet completed"},
	{Name: "notifierCallbackDelivered", Service: "notifier", Effect: "the callback delivered; the job not yet Completed", Handler: true},
}

// Named finds a point of All.
func Named(name string) (Point, bool) {
	for _, p := range All {
		if p.Name == name {
			return p, true
		}
	}
	return Point{}, false
}

// Client reaches one process's failpoint endpoint.
type Client struct {
	Addr string // host:port of GOFAIL_HTTP
	http *http.Client
}

// NewClient is a client of the endpoint at addr.
func NewClient(addr string) *Client {
	return &Client{Addr: addr, http: &http.Client{Timeout: 5 * time.Second}}
}

// ErrNoEndpoint: the process does not answer (it is down, stopped, or a
// build without failpoints).
var ErrNoEndpoint = errors.New("failpoint endpoint does not answer")

func (c *Client) do(ctx context.Context, method, name, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Addr+"/"+name, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: %s %s: %v", ErrNoEndpoint, method, name, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("failpoint %s %s: HTTP %d: %s", method, name, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return string(data), nil
}

// Enable arms name with a gofail term ("sleep(30000)", "panic",
// "1*panic").
func (c *Client) Enable(ctx context.Context, name, term string) error {
	_, err := c.do(ctx, http.MethodPut, name, term)
	return err
}

// Disable disarms name; a failpoint not armed is no error.
func (c *Client) Disable(ctx context.Context, name string) error {
	_, err := c.do(ctx, http.MethodDelete, name, "")
	if err != nil && strings.Contains(err.Error(), "failpoint is disabled") {
		return nil
	}
	return err
}

// Count is how often name was reached since it was armed.
func (c *Client) Count(ctx context.Context, name string) (int, error) {
	s, err := c.do(ctx, http.MethodGet, name+"/count", "")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(s))
}

// List names the failpoints the process has, armed or not.
func (c *Client) List(ctx context.Context) ([]string, error) {
	s, err := c.do(ctx, http.MethodGet, "", "")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if name, _, _ := strings.Cut(line, "="); name != "" {
			out = append(out, name)
		}
	}
	return out, nil
}

// WaitReached waits until name has been reached (its count is above 0),
// polling every interval, until ctx ends.
func (c *Client) WaitReached(ctx context.Context, name string, interval time.Duration) error {
	for {
		n, err := c.Count(ctx, name)
		if err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("failpoint %s at %s not reached: %w", name, c.Addr, ctx.Err())
		case <-time.After(interval):
		}
	}
}
