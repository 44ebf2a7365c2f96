// Package download fetches one file of a job into the job's working
// directory: streamed to a partial file (memory stays flat whatever the
// size), hashed with the declared algorithm on the way, checked against
// the declared size and digest, then renamed into place, so a file found
// at its final name is always a complete one.
//
// An attempt cut short (the connection closed or reset, an idle timeout,
// a 5xx after some bytes) is continued where it stopped: the rest is
// asked for with a range, and the digest goes on from its state. Every
// SyncEvery bytes the partial file is synced and its digest's state saved
// beside it, so the attempt of a replica that dies is continued from
// there by the next one. A server that ignores the range, or whose file
// changed, gets the file fetched again from its first byte, and the
// digest is always checked over the whole file. Failures that may pass
// are retried with an exponential, jittered backoff; only attempts that
// take the file no further count against the attempts allowed.
package download

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"

	"github.com/ingestq/ingestq/shared/checkm"
	"github.com/ingestq/ingestq/shared/ctxio"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/retry"
	"github.com/ingestq/ingestq/shared/stage"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Getter starts GETs, of a whole file or of its rest from a byte on;
// *fetch.Client is one.
type Getter interface {
	Get(ctx context.Context, url string) (*http.Response, error)
	GetFrom(ctx context.Context, url string, offset int64, validator string) (*http.Response, error)
}

// File is one file to fetch, as the job's file list declares it.
type File struct {
	URL           string
	HashAlgorithm string // md5, sha1, sha256, sha512 or "" for none
	HashValue     string // lower-case hex
	Size          int64  // -1: not declared
}

// Fetcher fetches files.
type Fetcher struct {
	Client Getter
	// Retry says how many attempts in a row a file gets that take it no
	// further, when its failures may pass, and how long they wait between
	// them. An attempt that took the file at least a MiB further (or to
	// its end) does not count: a file cut every few hundred MiB arrives,
	// a server that sends nothing still fails in bounded time.
	Retry retry.Policy
	// MaxBytes bounds a file whose size is not declared (a declared size
	// bounds the others).
	MaxBytes int64
	// TempDir is where partial files are written, relative to the root
	// given to Fetch; it must be on the same filesystem as their final
	// place (inside the same root, it is).
	TempDir string
	// SyncEvery is how many bytes of a file are written between two syncs
	// of its partial file with its digest's state, each a point the next
	// attempt resumes from after a crash. A file smaller than this is
	// never synced before it is complete, nor its partial file kept when
	// its attempts fail. 0: never (no partial file is kept).
	SyncEvery int64
	Logger    *slog.Logger // nil: slog.Default()
}

// Result says how a file was got.
type Result struct {
	Size     int64
	Reused   bool // complete from an earlier attempt at the job: not fetched
	Attempts int  // requests made for it
	// Resumes counts the answers that continued the file where an attempt
	// stopped; Kept is how many bytes the partial file of an earlier
	// attempt at the job (a replica that died) gave it.
	Resumes int
	Kept    int64
	// Restarts says why the file was started again from its first byte,
	// each time it was.
	Restarts []string
}

// Errors that say what is wrong with the file itself; they are not retried.
var (
	ErrTooLarge = errors.New("larger than allowed")
)

// SizeError: the file does not have the declared size.
type SizeError struct {
	Expected, Got int64
	More          bool // Got is a lower bound: reading stopped past Expected
}

func (e *SizeError) Error() string {
	if e.More {
		return fmt.Sprintf("size expected %d bytes, got more", e.Expected)
	}
	return fmt.Sprintf("size expected %d bytes, got %d", e.Expected, e.Got)
}

// DigestError: the file's digest is not the declared one.
type DigestError struct {
	Algorithm, Expected, Got string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s expected %s, got %s", e.Algorithm, e.Expected, e.Got)
}

// localError is a failure of the local disk: retrying the network does not help.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// copyBuffer is the size of one read from the network and one write to disk.
const copyBuffer = 256 << 10

// bufferFor returns a copy buffer for a file of at most n bytes (n < 0:
// unknown): no larger than it needs, as most files of a deposit are small
// and a zeroed 256 KiB buffer per file cost more than fetching them.
func bufferFor(n int64) []byte {
	if n < 0 || n >= copyBuffer {
		return make([]byte, copyBuffer)
	}
	return make([]byte, max(n+1, 512))
}

// minProgress is how much further an attempt must take a file for it not
// to count against the attempts allowed.
const minProgress = 1 << 20

// Fetch puts f at dst (a path inside root). A regular file already at dst
// with the declared size and digest is kept: it was completed by an earlier
// attempt (only complete, checked files are ever renamed into place, so
// without a declared size or digest a file found there is kept too). The
// bytes fetched are told to the step's meter (stage.MeterOf(ctx)).
func (fe *Fetcher) Fetch(ctx context.Context, root *os.Root, dst string, f File) (Result, error) {
	if _, err := checkm.NewHash(f.HashAlgorithm); err != nil {
		return Result{}, err
	}
	meter := stage.MeterOf(ctx)
	if n, ok, err := fe.complete(ctx, root, dst, f); err != nil {
		return Result{}, err
	} else if ok {
		meter.Advance(n)
		return Result{Size: n, Reused: true}, nil
	}
	p, err := fe.openPartial(root, dst, f)
	if err != nil {
		return Result{}, err
	}
	t := &transfer{fe: fe, dst: dst, f: f, p: p, meter: meter, log: fe.Logger}
	if t.log == nil {
		t.log = slog.Default()
	}
	if p.distrusted != "" {
		t.restarted(ctx, p.distrusted)
	}
	if p.offset > 0 {
		t.res.Kept = p.offset
		meter.Advance(p.offset)
		t.event(ctx, "download resumed from an earlier attempt's partial file", p.offset)
		t.log.InfoContext(ctx, "download resumed from an earlier attempt's partial file", "file", dst, "url", f.URL, "offset", p.offset)
	}
	ended := false
	defer func() {
		if !ended {
			p.discard() // a panic on the way: no lock left held
		}
	}()
	err = t.run(ctx)
	ended = true
	return t.res, err
}

// complete reports whether dst already holds f.
func (fe *Fetcher) complete(ctx context.Context, root *os.Root, dst string, f File) (int64, bool, error) {
	fi, err := root.Lstat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, false, nil
	case err != nil:
		return 0, false, &localError{err}
	case !fi.Mode().IsRegular():
		return 0, false, &localError{fmt.Errorf("%s exists and is not a regular file", dst)}
	case f.Size >= 0 && fi.Size() != f.Size:
		return 0, false, nil
	case f.HashAlgorithm == "":
		return fi.Size(), true, nil
	}
	in, err := root.Open(dst)
	if err != nil {
		return 0, false, &localError{err}
	}
	defer in.Close()
	h, _ := checkm.NewHash(f.HashAlgorithm)
	if _, err := io.CopyBuffer(h, ctxio.Reader(ctx, in), bufferFor(fi.Size())); err != nil {
		return 0, false, &localError{fmt.Errorf("reading %s: %w", dst, err)}
	}
	return fi.Size(), hex.EncodeToString(h.Sum(nil)) == f.HashValue, nil
}

// transfer is one file being fetched.
type transfer struct {
	fe    *Fetcher
	dst   string
	f     File
	p     *partial
	res   Result
	meter *stage.Meter
	log   *slog.Logger
	// expected: the size of an undeclared file was told to the meter.
	expected bool
}

// run makes attempts until the file is complete and in place, or fails.
func (t *transfer) run(ctx context.Context) error {
	fe, p := t.fe, t.p
	farthest := p.offset // the farthest the file got
	stuck := 0           // attempts in a row that took it no further
	for {
		t.res.Attempts++
		err := t.attempt(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			if serr := p.stop(t.dst, t.f, fe.SyncEvery); serr != nil {
				t.log.WarnContext(ctx, "keeping the partial file of a stopped download", "file", t.dst, "error", serr)
			}
			return context.Cause(ctx)
		}
		if !mayPass(err) {
			p.discard()
			return err
		}
		if p.offset-farthest >= minProgress {
			farthest, stuck = p.offset, 0
		} else {
			stuck++
		}
		if fe.Retry.Attempts > 0 && stuck >= fe.Retry.Attempts {
			// Kept (when worth it) for a requeue of the job to resume.
			if serr := p.stop(t.dst, t.f, fe.SyncEvery); serr != nil {
				t.log.WarnContext(ctx, "keeping the partial file of a failed download", "file", t.dst, "error", serr)
			}
			return fmt.Errorf("%w (after %d attempts)", err, t.res.Attempts)
		}
		if stuck > 0 {
			if serr := retry.Sleep(ctx, fe.Retry.Wait(stuck)); serr != nil {
				if err := p.stop(t.dst, t.f, fe.SyncEvery); err != nil {
					t.log.WarnContext(ctx, "keeping the partial file of a stopped download", "file", t.dst, "error", err)
				}
				return serr
			}
		}
	}
	t.res.Size = p.offset
	return p.finish(t.dst)
}

// limit is the most bytes the file may have.
func (t *transfer) limit() int64 {
	if t.f.Size >= 0 {
		return t.f.Size
	}
	return t.fe.MaxBytes
}

// attempt makes one request and appends what it brings to the partial
// file; the file complete, it checks its size and digest.
func (t *transfer) attempt(ctx context.Context) error {
	p := t.p
	resp, err := t.request(ctx)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	limit := t.limit()
	body := io.LimitReader(resp.Body, limit-p.offset+1)
	buf := bufferFor(limit - p.offset)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if err := p.write(buf[:n]); err != nil {
				return err
			}
			// gofail: var downloaderMidFile struct{}
			t.meter.Add(int64(n))
			if p.due(t.fe.SyncEvery) {
				if err := p.saveBehind(t.dst, t.f); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if p.spliced {
		rangeAppended()
	}
	if err := p.settle(); err != nil {
		return err
	}
	switch {
	case p.offset > limit && t.f.Size >= 0:
		return &SizeError{Expected: t.f.Size, More: true}
	case p.offset > limit:
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
	case t.f.Size >= 0 && p.offset != t.f.Size:
		return &SizeError{Expected: t.f.Size, Got: p.offset}
	}
	if p.hash != nil {
		if got := hex.EncodeToString(p.hash.Sum(nil)); got != t.f.HashValue {
			if p.spliced {
				// Put together from several answers, the file may mix two
				// versions of it: fetched whole, its digest is the word.
				return t.restart(ctx, fmt.Sprintf("its %s after resuming was %s, not the declared %s: fetching it whole", t.f.HashAlgorithm, got, t.f.HashValue), errSpliced)
			}
			return &DigestError{Algorithm: t.f.HashAlgorithm, Expected: t.f.HashValue, Got: got}
		}
	}
	// A file with a digest is not synced here: the caller makes a job's
	// files durable at once, and after a crash a later attempt checks the
	// file against its digest before keeping it. Without a digest nothing
	// could tell a file the crash cut short: it is synced before it is
	// renamed into place.
	if p.hash == nil {
		if err := p.file.Sync(); err != nil {
			return &localError{err}
		}
	}
	return nil
}

// rangeAppended is reached once the rest of a file, asked for from where
// an attempt stopped, is appended: nothing vouches for it yet (its state
// is saved at the next sync point), and the file is not in place. (The
// robustness build's failpoint.)
func rangeAppended() {
	// gofail: var downloaderRangeAppended struct{}
}

// errSpliced: a file put together from several answers did not have its
// digest; it is fetched again whole.
var errSpliced = errors.New("the digest of the resumed file did not match")

// request asks for the rest of the file (all of it at first, or when it
// cannot be resumed) and returns the answer whose body continues it.
func (t *transfer) request(ctx context.Context) (*http.Response, error) {
	p := t.p
	if p.offset > 0 && !p.rangeable {
		if err := t.restart(ctx, "the server named no version of the file (no strong ETag, no Last-Modified), and no digest is declared that would tell a changed file: it cannot be resumed", nil); err != nil {
			return nil, err
		}
	}
	if p.offset == 0 {
		resp, err := t.fe.Client.Get(ctx, t.f.URL)
		if err != nil {
			return nil, err
		}
		if err := t.begin(resp); err != nil {
			resp.Body.Close()
			return nil, err
		}
		return resp, nil
	}
	resp, err := t.fe.Client.GetFrom(ctx, t.f.URL, p.offset, p.validator)
	var se *fetch.StatusError
	if errors.As(err, &se) && se.Code == http.StatusRequestedRangeNotSatisfiable {
		if err := t.restart(ctx, fmt.Sprintf("the server refused the range from byte %d (HTTP 416)", p.offset), nil); err != nil {
			return nil, err
		}
		return t.request(ctx)
	}
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusPartialContent {
		why := t.misfit(resp)
		if why == "" {
			if _, _, complete, _ := fetch.ContentRange(resp); t.f.Size < 0 && complete > 0 && !t.expected {
				t.meter.Expect(complete) // a file of undeclared size resumed by a replica that did not see it begin
				t.expected = true
			}
			p.spliced = true
			t.res.Resumes++
			t.meter.Resumed(ctx)
			t.event(ctx, "download resumed", p.offset)
			t.log.InfoContext(ctx, "download resumed", "file", t.dst, "url", t.f.URL, "offset", p.offset)
			return resp, nil
		}
		resp.Body.Close()
		if err := t.restart(ctx, "the server's Content-Range does not fit: "+why, nil); err != nil {
			return nil, err
		}
		return t.request(ctx)
	}
	// The whole file: the server ignored the range, or the file changed
	// (If-Range did not match).
	why := fmt.Sprintf("the server ignored the range from byte %d (HTTP %d)", p.offset, resp.StatusCode)
	if v := fetch.Validator(resp); v != "" && p.validator != "" && v != p.validator {
		why = fmt.Sprintf("the file changed on the server (now %s, was %s)", v, p.validator)
	}
	if err := t.restart(ctx, why, nil); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if err := t.begin(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// misfit says why a 206 answer does not continue the file ("" when it does).
func (t *transfer) misfit(resp *http.Response) string {
	first, _, complete, err := fetch.ContentRange(resp)
	switch {
	case err != nil:
		return err.Error()
	case first != t.p.offset:
		return fmt.Sprintf("it begins at byte %d, not %d", first, t.p.offset)
	case complete >= 0 && t.p.total >= 0 && complete != t.p.total:
		return fmt.Sprintf("the file is %d bytes, no longer %d", complete, t.p.total)
	case complete >= 0 && t.f.Size >= 0 && complete != t.f.Size:
		return fmt.Sprintf("the file is %d bytes, not the declared %d", complete, t.f.Size)
	}
	return ""
}

// begin reads what the answer with the whole file says of it: its size
// (checked against the declared one), its version, whether it may be
// resumed.
func (t *transfer) begin(resp *http.Response) error {
	p := t.p
	if t.f.Size >= 0 && resp.ContentLength >= 0 && resp.ContentLength != t.f.Size {
		return &SizeError{Expected: t.f.Size, Got: resp.ContentLength}
	}
	p.validator, p.total = fetch.Validator(resp), resp.ContentLength
	// A body the transport decompressed has offsets no range can name.
	p.rangeable = !resp.Uncompressed && (p.validator != "" || t.f.HashAlgorithm != "")
	if t.f.Size < 0 && resp.ContentLength > 0 && !t.expected {
		t.meter.Expect(resp.ContentLength)
		t.expected = true
	}
	return nil
}

// restart empties the partial file, saying why, and returns err.
func (t *transfer) restart(ctx context.Context, why string, err error) error {
	t.meter.Undo(t.p.offset)
	if rerr := t.p.reset(); rerr != nil {
		return rerr
	}
	t.restarted(ctx, why)
	return err
}

// restarted tells the result, the meter, the trace and the log that the
// file starts again from its first byte, and why.
func (t *transfer) restarted(ctx context.Context, why string) {
	t.res.Restarts = append(t.res.Restarts, why)
	t.meter.Restarted(ctx)
	trace.SpanFromContext(ctx).AddEvent("download restarted", trace.WithAttributes(
		attribute.String("file", t.dst), attribute.String("reason", why)))
	t.log.InfoContext(ctx, "download restarted from the first byte", "file", t.dst, "url", t.f.URL, "reason", why)
}

// event marks a resume in the job's trace.
func (t *transfer) event(ctx context.Context, name string, offset int64) {
	trace.SpanFromContext(ctx).AddEvent(name, trace.WithAttributes(
		attribute.String("file", t.dst), attribute.Int64("offset", offset)))
}

// mayPass tells failures worth another attempt from those that will not
// change: beside fetch's rule, a file that is not what was declared or a
// local disk that fails.
func mayPass(err error) bool {
	var size *SizeError
	var digest *DigestError
	var local *localError
	if errors.Is(err, ErrTooLarge) || errors.As(err, &size) || errors.As(err, &digest) || errors.As(err, &local) {
		return false
	}
	return fetch.Retryable(err)
}
