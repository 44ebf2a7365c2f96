package mint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/ingestq/ingestq/proto/ingestq/v1"
	"github.com/ingestq/ingestq/shared/fetch"
	"github.com/ingestq/ingestq/shared/queue"
	"github.com/ingestq/ingestq/shared/queue/batches"
	"github.com/ingestq/ingestq/shared/queue/jobs"
	"github.com/ingestq/ingestq/shared/queue/queuetest"
	"github.com/ingestq/ingestq/shared/stage/stagetest"
	"github.com/ingestq/ingestq/shared/waittest"
	"github.com/ingestq/ingestq/shared/zktest"
)

func TestMain(m *testing.M) { zktest.Main(m) }

func TestLocalMintsOnceAcrossARestartedJob(t *testing.T) {
	c := queuetest.Connect(t, zktest.Root(t))
	ctx := context.Background()
	jid := queuetest.Spawn(t, c, batches.NewJob{Identifiers: &v1.Identifiers{LocalId: []string{"loc001"}}}, queue.Processing)
	m := Local{Shoulder: "ark:/99999/fk4"}

	// One processor: one client, whose counter block the restarted job
	// and the next one draw from.
	jc := jobs.New(c)
	cl, err := jc.ClaimJob(ctx, jid)
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.Mint(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if first != NOIDName("ark:/99999/fk4", 1) {
		t.Errorf("first ARK %s, want the counter's first name %s", first, NOIDName("ark:/99999/fk4", 1))
	}
	// The processor dies here: the job is taken again from ZooKeeper.
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if cl, err = jc.ClaimJob(ctx, jid); err != nil {
		t.Fatal(err)
	}
	if got := cl.Job.GetIdentifiers(); got.GetPrimaryId() != first || len(got.GetLocalId()) != 1 || got.GetLocalId()[0] != "loc001" {
		t.Fatalf("identifiers in ZooKeeper after the restart: %v, want %s and loc001", got, first)
	}
	again, err := m.Mint(ctx, cl)
	if err != nil || again != first {
		t.Fatalf("second Mint = %q, %v; want the same %s", again, err, first)
	}
	cl.Release(ctx)

	// The counter did not move: the next job gets number 2.
	other := queuetest.Spawn(t, c, batches.NewJob{}, queue.Processing)
	if cl, err = jc.ClaimJob(ctx, other); err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	second, err := m.Mint(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if second != NOIDName("ark:/99999/fk4", 2) {
		t.Errorf("next job's ARK %s, want %s: the restart advanced the counter", second, NOIDName("ark:/99999/fk4", 2))
	}
}

// ezidServer speaks EZID's mint protocol on loopback: POST
// /shoulder/<shoulder>, HTTP Basic, a text/plain ANVL body; it answers
// "success: <ark>" (201) or "error: <reason>".
type ezidServer struct {
	user, password string
	mu             sync.Mutex
	minted         int
	bodies         []map[string]string
	answer         func(w http.ResponseWriter) bool // overrides the answer when it returns true
}

func (s *ezidServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	fail := func(code int, reason string) {
		w.WriteHeader(code)
		fmt.Fprintf(w, "error: %s\n", reason)
	}
	shoulder, ok := strings.CutPrefix(r.URL.Path, "/shoulder/")
	if r.Method != http.MethodPost || !ok {
		fail(http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if u, p, ok := r.BasicAuth(); !ok || u != s.user || p != s.password {
		fail(http.StatusUnauthorized, "unauthorized")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "text/plain; charset=UTF-8" {
		fail(http.StatusBadRequest, "bad request - unsupported content type "+ct)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	fields, err := ParseANVL(string(raw))
	if err != nil {
		fail(http.StatusBadRequest, "bad request - ANVL parse error ("+err.Error()+")")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bodies = append(s.bodies, fields)
	if s.answer != nil && s.answer(w) {
		return
	}
	s.minted++
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "success: %s%s\n", shoulder, Betanumeric(int64(1000+s.minted), 6))
}

func (s *ezidServer) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func TestEZIDMintsRecordsAtOnceAndNeverTwice(t *testing.T) {
	srv := &ezidServer{user: "apitest", password: "s3cret"}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	ctx := context.Background()
	job := &v1.Job{Id: "jid0000000001", Metadata: &v1.Metadata{Who: "Doe, Jane", What: "100% cotton:\nnotes", When: "2026"}}
	m := EZID{BaseURL: ts.URL, User: "apitest", Password: "s3cret", Shoulder: "ark:/99999/fk4", Client: fetch.New(fetch.Policy{Allow: fetch.InternalRanges()})}

	cl := stagetest.New(job, queue.Processing)
	ark, err := m.Mint(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ark, "ark:/99999/fk4") {
		t.Fatalf("EZID gave %q", ark)
	}
	if got := srv.bodies[0]; got["erc.who"] != "Doe, Jane" || got["erc.what"] != "100% cotton:\nnotes" || got["erc.when"] != "2026" || got["_profile"] != "erc" {
		t.Errorf("EZID received metadata %v", got)
	}
	// Written to the job before Mint returned: a restart reuses it without calling EZID.
	if u := cl.Updates(); len(u) != 1 || u[0].Identifiers.GetPrimaryId() != ark || job.GetIdentifiers().GetPrimaryId() != ark {
		t.Fatalf("job identifiers %v after the writes %v; want %s written once", job.GetIdentifiers(), u, ark)
	}
	cl = stagetest.New(job, queue.Processing)
	again, err := m.Mint(ctx, cl)
	if err != nil || again != ark || srv.calls() != 1 {
		t.Errorf("after restart: %q, %v, %d EZID calls; want %s and 1 call", again, err, srv.calls(), ark)
	}
}

func TestEZIDErrorsNameTheReason(t *testing.T) {
	for _, tc := range []struct {
		name     string
		password string
		answer   func(w http.ResponseWriter) bool
		want     string
	}{
		{"wrong password", "wrong", nil, "HTTP 401: unauthorized"},
		{"EZID refuses", "s3cret", func(w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "error: bad request - no such shoulder\n")
			return true
		}, "HTTP 400: bad request - no such shoulder"},
		{"not EZID", "s3cret", func(w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>proxy error</html>")
			return true
		}, `HTTP 502: unexpected answer "<html>proxy error</html>"`},
		{"foreign shoulder", "s3cret", func(w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "success: ark:/12345/zz9\n")
			return true
		}, `minted "ark:/12345/zz9", which is not on shoulder ark:/99999/fk4`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &ezidServer{user: "apitest", password: "s3cret", answer: tc.answer}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			cl := stagetest.New(&v1.Job{Id: "jid0000000001"}, queue.Processing)
			m := EZID{BaseURL: ts.URL, User: "apitest", Password: tc.password, Shoulder: "ark:/99999/fk4", Client: fetch.New(fetch.Policy{Allow: fetch.InternalRanges()})}
			_, err := m.Mint(context.Background(), cl)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ts.URL+"/shoulder/ark:/99999/fk4") {
				t.Fatalf("Mint error %v; want one naming the URL and %q", err, tc.want)
			}
			if u := cl.Updates(); len(u) != 0 || cl.Job.GetIdentifiers().GetPrimaryId() != "" {
				t.Errorf("a failed mint recorded %q (writes %v)", cl.Job.GetIdentifiers().GetPrimaryId(), u)
			}
		})
	}
}

func TestEZIDCallsKeepToTheFetchPolicyAndTheTimeout(t *testing.T) {
	loopback, err := fetch.ParseDeny("loopback")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		policy  fetch.Policy
		timeout time.Duration
		stall   bool
		want    error
		calls   int
	}{
		{"an address the policy denies is not called", fetch.Policy{Deny: loopback}, 0, false, fetch.ErrDenied, 0},
		{"an EZID that does not answer is given up on", fetch.Policy{Allow: fetch.InternalRanges()}, 200 * time.Millisecond, true, context.DeadlineExceeded, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &ezidServer{user: "apitest", password: "s3cret"}
			if tc.stall {
				srv.answer = func(w http.ResponseWriter) bool {
					<-t.Context().Done()
					return true
				}
			}
			var requests atomic.Int64
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				srv.ServeHTTP(w, r)
			}))
			// Closed after the test's context ends, which lets a stalled handler return.
			t.Cleanup(ts.Close)
			cl := stagetest.New(&v1.Job{Id: "jid0000000001"}, queue.Processing)
			m := EZID{BaseURL: ts.URL, User: "apitest", Password: "s3cret", Shoulder: "ark:/99999/fk4", Client: fetch.New(tc.policy), Timeout: tc.timeout}
			_, err := m.Mint(context.Background(), cl)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), ts.URL+"/shoulder/ark:/99999/fk4") {
				t.Errorf("Mint error %v; want %v naming the URL", err, tc.want)
			}
			// The server counts a request in a goroutine of its own, which
			// may come to it after the client gave up waiting: wait for it.
			waittest.True(t, 10*time.Second, "EZID counted every request", func() bool { return requests.Load() >= int64(tc.calls) })
			if n := requests.Load(); n != int64(tc.calls) {
				t.Errorf("EZID got %d requests, want %d", n, tc.calls)
			}
		})
	}
}

func TestANVLEscapesWhatEZIDRequires(t *testing.T) {
	got := ANVL([][2]string{{"erc.what", "50%\r\nfoo: bar"}, {"a:b", "x"}, {"empty", ""}})
	want := "erc.what: 50%25%0D%0Afoo: bar\na%3Ab: x\n"
	if got != want {
		t.Fatalf("ANVL = %q, want %q", got, want)
	}
	back, err := ParseANVL(got)
	if err != nil || back["erc.what"] != "50%\r\nfoo: bar" || back["a:b"] != "x" {
		t.Errorf("round trip: %v, %v", back, err)
	}
}

// ParseANVL reads an ANVL body written as EZID expects it (the inverse of
// ANVL); a line without "name: " is an error.
func ParseANVL(body string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			return nil, fmt.Errorf("ANVL line %d: no \"name: value\": %q", i+1, truncate(line, 80))
		}
		n, err := url.PathUnescape(name)
		if err != nil {
			return nil, fmt.Errorf("ANVL line %d: name: %w", i+1, err)
		}
		v, err := url.PathUnescape(value)
		if err != nil {
			return nil, fmt.Errorf("ANVL line %d: value: %w", i+1, err)
		}
		out[n] = v
	}
	return out, nil
}
